"""Per-entry memory plan of a store, from its index tables alone.

For every entry the plan predicts the peak training memory of one step of the reference trunk
(:mod:`featurecache.plan.memory`) at each standard crop, with the entry's effective token count
``N = min(token_count, crop)`` padded up to a multiple of 128 and capped at the crop (what
``featurecache train`` runs on CUDA; ``pad_multiple``), and its worst-case MSA rows ``M = min(deepest chain MSA,
max_msa_rows)`` (the client draws between 1 and that many rows), and the largest token budget that
fits the GPU. The result is written to ``STORE/index/plan.arrow`` (atomic replace), which
:class:`~featurecache.store.reader.LocalStore` loads as ``store.table("plan")``;
:func:`fitting_ids` turns it into the ``ids`` of a
:class:`~featurecache.client.sampler.SamplerFilter`.

``plan.arrow`` columns: ``id``, ``token_count``, ``msa_rows``, ``max_tokens`` (largest N that fits
at this entry's M), ``recommended_crop`` (``min(token_count, max_tokens)``), and per standard crop
``C``: ``tokens_C`` (effective N), ``predicted_peak_bytes_C``, ``fits_C``. The schema metadata
``featurecache.plan`` (JSON) records the GPU budget, kernel mode, precision, batch size, model
config and the store's entry count at planning time (a plan older than the index is detectable), and
``first_build_finished``: False when the store's first build had not finished (its index listed only the
entries, MSAs and conformers written so far), so the plan is partial and its peaks may be low: :func:`fitting_ids` and the report warn about it
(:func:`unfinished_plan_warning`). A plan written before this key is taken as a finished store's.

Atoms play no part: the model's inputs hold no atom-level array, and the client's crops have no
atom budget by default, so a crop holds ``min(token_count, crop)`` tokens. Under ``train
--max-atoms`` a crop can hold fewer tokens; the plan is then an upper bound.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featurecache.arrow_columns import column_array
from featurecache.errors import FeatureCacheError, InvalidRequest, StoreError, UsageError
from featurecache.model.config import ModelConfig
from featurecache.plan.memory import MemoryEstimate, Precision, estimate_step, max_tokens_within
from featurecache.text import first_named

log = logging.getLogger(__name__)

#: crops the plan reports (AF3 trains at 384, then 640 and 768 in fine-tuning)
STANDARD_CROPS: tuple[int, ...] = (384, 640, 768)
PLAN_METADATA_KEY = b"featurecache.plan"
PLAN_VERSION = 1
#: the client's default cap on sampled MSA rows (client/assemble.py DEFAULT_MAX_MSA_ROWS)
DEFAULT_MAX_MSA_ROWS = 1024

_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip


#: a GPU budget below this is a unit mistake ("80" read as 80 bytes), not a GPU
MIN_GPU_MEMORY = 64 * 2**20
#: training pads each batch's token axis to a multiple of this on CUDA, capped at the crop
#: (``featurecache.model.train.DEFAULT_PAD_MULTIPLE``; a test keeps the two equal)
DEFAULT_PAD_MULTIPLE = 128


def parse_bytes(text: str | int) -> int:
    """``"80GiB"`` → 85899345920; accepts B, kB/MB/GB/TB (powers of 10), KiB/MiB/GiB/TiB, bare numbers.
    A size below 64 MiB (``"80"``: 80 bytes) is refused as a unit mistake (UsageError)."""
    if isinstance(text, int):
        value = text
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise UsageError(
                f"--gpu-memory: cannot read a memory size from {text!r} (e.g. 80GiB, 141GB, 8e9)"
            )
        number = float(m.group(1)) * _UNITS[unit]
        if not math.isfinite(number) or number > 2**63:
            raise UsageError(f"--gpu-memory: {text!r} is not a plausible GPU memory size")
        value = int(number)
    if value < MIN_GPU_MEMORY:
        has_unit = not isinstance(text, int) and bool(re.search(r"[a-zA-Z]", str(text)))
        if value <= 0:
            raise UsageError(f"--gpu-memory: {text!r} is {value} bytes; it must be > 0 (e.g. 80GiB)")
        if has_unit:
            raise UsageError(
                f"--gpu-memory: {text!r} is {value} bytes, less than {MIN_GPU_MEMORY // 2**20} MiB: not a GPU "
                "memory size (e.g. 80GiB)"
            )
        raise UsageError(f"--gpu-memory: {text!r} is {value} bytes; give a unit, e.g. 80GiB")
    return value


def padded_tokens(tokens: np.ndarray, crop: int, pad_multiple: int) -> np.ndarray:
    """The token length a step at ``crop`` runs for each entry: min(tokens, crop) padded up to a
    multiple of ``pad_multiple``, capped at the crop (what ``featurecache train`` does on CUDA)."""
    n = np.minimum(tokens, crop)
    if pad_multiple <= 1:
        return n
    return np.minimum(-(-n // pad_multiple) * pad_multiple, crop)


def load_model_config(path: str | Path | None) -> ModelConfig:
    return ModelConfig() if path is None else ModelConfig.from_json(path)


def entry_msa_rows(
    entries: pa.Table, chains: pa.Table, max_msa_rows: int = DEFAULT_MAX_MSA_ROWS
) -> np.ndarray:
    """int64 ``[n_entries]``: rows of the largest MSA the client can sample for each entry (≥ 1)."""
    ids = entries.column("id").to_pylist()
    deepest = dict.fromkeys(ids, 1)
    if chains.num_rows and "msa_depth" in chains.column_names:
        depth = pc.fill_null(chains.column("msa_depth"), 0).to_numpy(zero_copy_only=False)
        for eid, dep in zip(chains.column("entry_id").to_pylist(), depth.tolist(), strict=True):
            if eid in deepest and dep > deepest[eid]:
                deepest[eid] = int(dep)
    return np.minimum(np.array([deepest[i] for i in ids], dtype=np.int64), max_msa_rows)


#: Share of GPU memory kept free for allocator fragmentation and the CUDA context.
DEFAULT_HEADROOM = 0.08


class Planner:
    """Predictions for one (model config, GPU budget, kernel mode, precision, batch size), cached
    per (N, M) so a large index costs one ledger replay per distinct shape."""

    def __init__(
        self,
        cfg: ModelConfig,
        gpu_memory_bytes: int,
        *,
        fused: bool = True,
        precision: Precision | None = None,
        batch_size: int = 1,
        headroom: float = 0.0,
        pad_multiple: int = DEFAULT_PAD_MULTIPLE,
    ) -> None:
        if not 0.0 <= headroom < 1.0:
            raise UsageError(f"--headroom must be in [0, 1), got {headroom}")
        if pad_multiple < 1:
            raise UsageError(f"--pad-multiple must be >= 1 (1: no padding), got {pad_multiple}")
        self.gpu_memory = int(gpu_memory_bytes)
        self.pad_multiple = int(pad_multiple)
        # An entry "fits" when its predicted peak leaves ``headroom`` of the card free: the caching
        # allocator's fragmentation and the CUDA context are not in the ledger (measured on the H200:
        # a step predicted at 131.2 GiB ran out of memory on the 139.8 GiB card).
        self.headroom = float(headroom)
        self.cfg, self.budget, self.fused = cfg, int(gpu_memory_bytes * (1.0 - headroom)), fused
        self.precision = precision or Precision.cuda_bf16()
        self.batch_size = int(batch_size)
        self.estimate = lru_cache(maxsize=None)(self._estimate)
        self.max_tokens = lru_cache(maxsize=None)(self._max_tokens)

    def _estimate(self, n_tokens: int, msa_rows: int) -> MemoryEstimate:
        return estimate_step(
            self.cfg, n_tokens, msa_rows, self.batch_size, fused=self.fused, precision=self.precision
        )

    def _max_tokens(self, msa_rows: int) -> int:
        return max_tokens_within(
            self.budget, self.cfg, msa_rows, self.batch_size, fused=self.fused, precision=self.precision
        )

    def metadata(self) -> dict[str, Any]:
        # "gpu_memory_bytes" is the usable budget (the memory given less the headroom), a name kept
        # for the plans already written; summarize_plan names it usable_memory_bytes
        return {
            "version": PLAN_VERSION, "gpu_memory_bytes": self.budget, "fused": self.fused,
            "gpu_memory_given_bytes": self.gpu_memory, "headroom": self.headroom, "pad_multiple": self.pad_multiple,
            "precision": {"compute_bytes": self.precision.compute, "exp_fp32": self.precision.exp_fp32},
            "batch_size": self.batch_size, "model_config": self.cfg.to_dict(),
        }  # fmt: skip

    def plan(
        self,
        entries: pa.Table,
        chains: pa.Table,
        crops: Sequence[int] = STANDARD_CROPS,
        max_msa_rows: int = DEFAULT_MAX_MSA_ROWS,
        *,
        first_build_finished: bool = True,
    ) -> pa.Table:
        """The plan table (one row per entry of ``entries``, same order). ``first_build_finished``:
        False when ``entries`` is the index of a store whose first build has not finished (recorded
        in the plan's metadata: the plan is partial)."""
        ids = entries.column("id").to_pylist()
        tokens = column_array(entries, "token_count", np.int64)
        rows = entry_msa_rows(entries, chains, max_msa_rows)
        max_tok = np.array([self.max_tokens(int(m)) for m in rows.tolist()], dtype=np.int64)
        cols: dict[str, pa.Array] = {
            "id": pa.array(ids, pa.string()),
            "token_count": pa.array(tokens, pa.int64()),
            "msa_rows": pa.array(rows, pa.int64()),
            "max_tokens": pa.array(max_tok, pa.int64()),
            "recommended_crop": pa.array(np.minimum(tokens, max_tok), pa.int64()),
        }
        for crop in crops:
            n_eff = padded_tokens(tokens, crop, self.pad_multiple)
            peak = np.array(
                [self.estimate(max(1, int(n)), int(m)).peak_bytes for n, m in zip(n_eff, rows, strict=True)],
                dtype=np.int64,
            )
            cols[f"tokens_{crop}"] = pa.array(n_eff, pa.int64())
            cols[f"predicted_peak_bytes_{crop}"] = pa.array(peak, pa.int64())
            cols[f"fits_{crop}"] = pa.array(peak <= self.budget, pa.bool_())
        meta = dict(
            self.metadata(), crops=list(crops), max_msa_rows=max_msa_rows, n_entries=len(ids),
            first_build_finished=first_build_finished,
        )  # fmt: skip
        table = pa.table(cols)
        return table.replace_schema_metadata({PLAN_METADATA_KEY: json.dumps(meta).encode()})


def plan_metadata(table: pa.Table) -> dict[str, Any]:
    raw = (table.schema.metadata or {}).get(PLAN_METADATA_KEY)
    return json.loads(raw) if raw else {}


def unfinished_plan_warning(table: pa.Table, where: str = "the plan") -> str | None:
    """What a reader of a plan says when the plan was made while the store's first build had not
    finished (metadata ``first_build_finished`` False); None for a finished store's plan (or one
    written before the key existed). Not only entries can be missing: a build interrupted in its
    MSA or conformer stage has every entry listed but not their MSAs or conformers, so the plan
    read fewer MSA rows (or atoms) than the finished store holds and its peaks are too low."""
    meta = plan_metadata(table)
    if meta.get("first_build_finished", True):
        return None
    return (
        f"{where} was made before the store's first build finished (its index then listed "
        f"{meta.get('n_entries', table.num_rows)} entries): entries, MSAs or conformers written since are "
        "missing from it, so its memory predictions may be low; run `featurecache plan STORE` again once "
        "the build has finished"
    )


#: entry ids named in :func:`stale_plan_warning`, at most (per kind)
SHOWN_STALE = 5


def plan_drift(
    table: pa.Table, entries: pa.Table, chains: pa.Table
) -> tuple[list[str], list[str], list[str]] | None:
    """How a plan differs from the store's index: (entries of the index without a plan row, plan rows
    of entries no longer in it, entries whose planned inputs changed since: token count, or the MSA
    rows :func:`entry_msa_rows` gives at the plan's ``max_msa_rows``). None for a plan without the
    columns to tell (older plans)."""
    meta = plan_metadata(table)
    max_rows = int(meta.get("max_msa_rows", DEFAULT_MAX_MSA_ROWS))
    cols = ("id", "token_count", "msa_rows")
    if not all(c in table.column_names for c in cols):
        return None
    planned = {i: (t, m) for i, t, m in zip(*(table.column(c).to_pylist() for c in cols), strict=True)}
    ids = entries.column("id").to_pylist() if entries.num_rows else []
    now: dict[str, tuple[int, int]] = {}
    if ids:
        tokens = pc.fill_null(entries.column("token_count"), 0).to_pylist()
        rows = entry_msa_rows(entries, chains, max_rows).tolist()
        now = {i: (int(t), int(m)) for i, t, m in zip(ids, tokens, rows, strict=True)}
    added = [i for i in ids if i not in planned]
    gone = [i for i in planned if i not in now]
    changed = [i for i in ids if i in planned and tuple(planned[i]) != now[i]]
    return added, gone, changed


def stale_plan_warning(
    table: pa.Table, entries: pa.Table, chains: pa.Table, where: str = "the plan"
) -> str | None:
    """What a reader of a plan says when the plan is older than the store's index (None when it is
    not): entries of the index it has no row for (added since: :func:`fitting_ids` leaves them
    out), rows of entries no longer in the index, and entries whose planned inputs changed since
    (:func:`plan_drift`: a rebuild that stored deeper MSAs makes the predicted peaks too low)."""
    drift = plan_drift(table, entries, chains)
    if drift is None or not any(drift):
        return None
    added, gone, changed = drift
    n_ids = entries.num_rows

    def named(what: list[str]) -> str:
        return first_named(sorted(what), SHOWN_STALE)

    def count(n: int) -> str:
        return f"{n} entr{'y' if n == 1 else 'ies'}"

    said = []
    if added:
        said.append(f"{len(added)} of the store's {count(n_ids)} {'has' if len(added) == 1 else 'have'} "
                    f"no plan row ({named(added)}): left out")  # fmt: skip
    if gone:
        said.append(f"{count(len(gone))} planned {'is' if len(gone) == 1 else 'are'} no longer in the store "
                    f"({named(gone)})")  # fmt: skip
    if changed:
        said.append(f"{count(len(changed))} changed since (token count or MSA rows: {named(changed)}): "
                    "predicted from what it was")  # fmt: skip
    return f"{where} is older than the store's index: {'; '.join(said)}; run `featurecache plan STORE` again"


def summarize_plan(table: pa.Table, crops: Sequence[int] | None = None) -> dict[str, Any]:
    """Share of entries that fit at each crop, and the budget bounds: ``usable_memory_bytes`` (what
    an entry's predicted peak may reach: the GPU memory given less the headroom),
    ``gpu_memory_given_bytes`` and ``headroom`` (None for plans that recorded only the usable
    memory). ``gpu_memory_bytes`` is the usable memory too, despite its name (the plan metadata's
    key; kept for the readers of ``summary.json`` that use it)."""
    meta = plan_metadata(table)
    crops = list(crops or meta.get("crops") or STANDARD_CROPS)
    n = table.num_rows
    out: dict[str, Any] = {
        "entries": n,
        "usable_memory_bytes": meta.get("gpu_memory_bytes"),
        "gpu_memory_given_bytes": meta.get("gpu_memory_given_bytes"),
        "headroom": meta.get("headroom"),
        "gpu_memory_bytes": meta.get("gpu_memory_bytes"),  # deprecated: usable_memory_bytes
        "fused": meta.get("fused"),
    }
    for crop in crops:
        fits = table.column(f"fits_{crop}").to_numpy(zero_copy_only=False) if n else np.zeros(0, bool)
        peaks = table.column(f"predicted_peak_bytes_{crop}").to_numpy() if n else np.zeros(0, np.int64)
        out[f"share_fits_{crop}"] = float(fits.mean()) if n else None  # of no entries: none (JSON's null)
        out[f"max_predicted_peak_bytes_{crop}"] = int(peaks.max()) if n else 0
    if n:
        out["min_max_tokens"] = int(pc.min(table.column("max_tokens")).as_py())
    return out


def plan_path(store: str | Path) -> Path:
    from featurecache.store.layout import INDEX_DIR, PLAN_TABLE  # (zarr: not at import)

    return Path(store) / INDEX_DIR / f"{PLAN_TABLE}.arrow"


def write_plan(store: str | Path, table: pa.Table) -> Path:
    """Atomically replace ``STORE/index/plan.arrow``. ``rebuild_index`` only rewrites the tables
    the parts carry, so the plan survives a rebuild (re-plan after adding entries: entries missing
    from the plan are not in :func:`fitting_ids`)."""
    from featurecache.store.index import replace_table

    path = plan_path(store)
    if not path.parent.is_dir():
        raise StoreError(f"{store} has no index directory; is it a featurecache store?")
    try:
        replace_table(path, table)
    except OSError as exc:
        raise StoreError(
            f"cannot write the plan to {path}: {exc.strerror or exc} (--no-write-index plans without writing)"
        ) from exc
    return path


def read_plan(store: Any) -> pa.Table:
    """The plan of a store (a path or an open ``LocalStore``); raises ``StoreError`` without one."""
    from featurecache.store.index import read_table
    from featurecache.store.layout import PLAN_TABLE

    if hasattr(store, "table"):
        t = store.table(PLAN_TABLE)
        if t.num_rows or "id" in t.column_names:
            return t
        raise StoreError("the store has no plan: run `featurecache plan STORE` first")
    path = plan_path(store)
    if not path.is_file():
        raise StoreError(f"{path} does not exist: run `featurecache plan {store}` first")
    return read_table(path, memory_map=False)


def fitting_ids(store: Any, crop: int) -> list[str]:
    """Ids of the entries the plan says fit at ``crop`` — the filter hook of the client's sampler:

    ``SamplerFilter(ids=fitting_ids(store, 640))`` (see :class:`featurecache.client.sampler.SamplerFilter`).
    A plan made while the store's first build had not finished is partial, and one older than the
    store's index (:func:`stale_plan_warning`) leaves out entries added since or predicts from
    what changed since: each logged as a warning.
    """
    table = read_plan(store)
    name = store if isinstance(store, str | Path) else getattr(store, "path", None)
    where = f"the plan of {name}" if name else "the plan"
    warning = unfinished_plan_warning(table, where)
    if warning:
        log.warning("fitting_ids: %s", warning)
    stale = stale_against_index(store, table, where)
    if stale:
        log.warning("fitting_ids: %s", stale)
    col = f"fits_{crop}"
    if col not in table.column_names:
        crops = [c.removeprefix("fits_") for c in table.column_names if c.startswith("fits_")]
        raise InvalidRequest(f"the plan has no crop {crop}; planned crops: {', '.join(crops)}")
    mask = table.column(col).to_numpy(zero_copy_only=False)
    return [i for i, ok in zip(table.column("id").to_pylist(), mask.tolist(), strict=True) if ok]


def stale_against_index(store: Any, table: pa.Table, where: str) -> str | None:
    """:func:`stale_plan_warning` against the index of ``store`` (a path: opened here; a reader or
    a lookup client: its ``entries`` and ``chains``); an index that cannot be read is said so."""
    try:
        if isinstance(store, str | Path):
            from featurecache.store.reader import open_store

            reader = open_store(store)
            try:
                return stale_plan_warning(table, reader.entries, reader.chains, where)
            finally:
                reader.close()
        return stale_plan_warning(table, store.entries, store.chains, where)
    except (FeatureCacheError, OSError) as exc:
        return f"{where} could not be compared with the store's index ({exc}): it may be older than it"


def plan_store(
    store: str | Path,
    model_config: str | Path | None = None,
    gpu_memory: str | int = "80GiB",
    *,
    fused: bool = True,
    write_index: bool = True,
    batch_size: int = 1,
    crops: Sequence[int] = STANDARD_CROPS,
    max_msa_rows: int = DEFAULT_MAX_MSA_ROWS,
    precision: Precision | None = None,
    headroom: float = DEFAULT_HEADROOM,
    pad_multiple: int = DEFAULT_PAD_MULTIPLE,
) -> pa.Table:
    """Plan every entry of a store; write ``index/plan.arrow`` when ``write_index``.

    An entry fits a crop when its predicted peak is at most ``gpu_memory × (1 − headroom)``."""
    from featurecache.store.reader import open_store

    reader = open_store(store)
    try:
        planner = Planner(
            load_model_config(model_config), parse_bytes(gpu_memory), fused=fused, precision=precision,
            batch_size=batch_size, headroom=headroom, pad_multiple=pad_multiple,
        )  # fmt: skip
        table = planner.plan(
            reader.entries, reader.chains, crops, max_msa_rows, first_build_finished=reader.finished
        )
    finally:
        reader.close()
    if write_index:
        path = write_plan(store, table)
        log.info("plan written: %s (%d entries)", path, table.num_rows)
    return table


def run_plan(
    store: Path,
    model_config: Path | None = None,
    gpu_memory: str = "80GiB",
    fused: bool = True,
    write_index: bool = True,
    headroom: float | None = None,
    pad_multiple: int = DEFAULT_PAD_MULTIPLE,
) -> dict[str, Any]:
    """``featurecache plan``: plan, print a summary, write the index table; returns the summary."""
    from rich.console import Console
    from rich.table import Table

    headroom = DEFAULT_HEADROOM if headroom is None else headroom
    table = plan_store(
        store, model_config, gpu_memory, fused=fused, write_index=False, headroom=headroom,
        pad_multiple=pad_multiple,
    )  # fmt: skip
    summary = summarize_plan(table)
    meta = plan_metadata(table)
    budget = meta["gpu_memory_bytes"]
    console = Console()
    t = Table(
        title=f"memory plan: {table.num_rows} entries, {meta['gpu_memory_given_bytes'] / 2**30:.1f} GiB GPU "
        f"({budget / 2**30:.1f} GiB usable after {meta['headroom']:.0%} headroom), "
        f"{'fused Triton kernels' if fused else 'torch reference kernels'}, bf16 autocast, batch {meta['batch_size']}, "
        f"tokens padded to a multiple of {meta['pad_multiple']}"
    )
    for col in ("crop", "entries that fit", "share", "largest predicted peak", "peak of a full crop"):
        t.add_column(col, justify="right")
    planner = Planner(
        load_model_config(model_config), budget, fused=fused, batch_size=meta["batch_size"]
    )  # for the "full crop" column: N = crop, the deepest MSA the client samples
    for crop in meta["crops"]:
        n_fit = int(pc.sum(table.column(f"fits_{crop}")).as_py() or 0)
        full = planner.estimate(crop, meta["max_msa_rows"]).peak_bytes
        t.add_row(
            str(crop), f"{n_fit}/{table.num_rows}",
            f"{summary[f'share_fits_{crop}']:.1%}" if table.num_rows else "—",
            f"{summary[f'max_predicted_peak_bytes_{crop}'] / 2**30:.2f} GiB" if table.num_rows else "—",
            f"{full / 2**30:.2f} GiB",
        )  # fmt: skip
    console.print(t)
    if table.num_rows:
        console.print(f"largest crop that fits at the deepest MSA: {summary['min_max_tokens']} tokens")
    if (
        write_index
    ):  # after printing: a read-only store still shows its plan, then says why it was not written
        path = write_plan(store, table)
        console.print(f"written to {path} (filter: featurecache.plan.fitting_ids(store, crop))")
    else:
        console.print("not written (--no-write-index)")
    return summary
