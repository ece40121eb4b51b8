"""The numbers of a store report, computed from the index tables and the part directories.

Each plot of the report is a :class:`Panel`: what to draw and the exact numbers drawn (written
next to its PNG as CSV). :func:`collect` returns the panels, the per-entry table and a summary
dict (written as ``summary.json``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from featurecache.arrow_columns import column_array
from featurecache.const import MOL_TYPE_NAMES
from featurecache.store.layout import (
    COMPONENT_PART_PREFIX,
    INDEX_DIR,
    MSA_PART_PREFIX,
    PART_INDEX_DIR,
    PARTS_DIR,
    PLAN_TABLE,
    STRUCTURE_PART_PREFIX,
    TMP_PREFIX,
)

PanelKind = Literal["hist", "bar", "barh", "series"]

_PART_KINDS = {
    STRUCTURE_PART_PREFIX: "structures",
    MSA_PART_PREFIX: "msas",
    COMPONENT_PART_PREFIX: "components",
}


@dataclass
class Panel:
    """One plot. ``columns`` are the numbers drawn (equal-length lists; the CSV):

    * ``hist``: ``bin_lo``, ``bin_hi``, ``count`` (``log_x``: log-spaced bins)
    * ``bar`` / ``barh``: ``label`` and one or more numeric series
    * ``series``: ``x`` and one or more numeric series (one subplot each)
    """

    name: str
    title: str
    section: str
    kind: PanelKind
    columns: dict[str, list[Any]]
    xlabel: str = ""
    ylabel: str = ""
    caption: str = ""
    log_x: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _num(table: pa.Table, name: str, dtype: Any = np.float64) -> np.ndarray:
    """:func:`~featurecache.arrow_columns.column_array`, or NaN a row for a column the table lacks."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    return column_array(table, name, dtype)


def _hist(
    values: np.ndarray, *, log: bool = False, integer: bool = False, bins: int = 30
) -> dict[str, list[Any]]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {"bin_lo": [], "bin_hi": [], "count": []}
    lo, hi = float(v.min()), float(v.max())
    if log:
        lo = max(lo, 1.0)
        edges = np.unique(np.geomspace(lo, max(hi, lo * 1.0001), bins + 1))
        if integer:
            edges = np.unique(np.round(edges))
            if edges.size < 2:
                edges = np.array([lo, lo + 1.0])
    elif integer and hi - lo <= 60:
        edges = np.arange(math.floor(lo), math.floor(hi) + 2, dtype=np.float64)
    else:
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)
    counts, edges = np.histogram(np.clip(v, edges[0], edges[-1]), bins=edges)
    return {"bin_lo": edges[:-1].tolist(), "bin_hi": edges[1:].tolist(), "count": counts.astype(int).tolist()}


def _bar(counter: Counter[str] | dict[str, int], value: str = "count") -> dict[str, list[Any]]:
    items = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"label": [k for k, _ in items], value: [int(v) for _, v in items]}


def entry_table(entries: pa.Table, chains: pa.Table) -> dict[str, list[Any]]:
    """Per-entry numbers behind the distributions (``entries.csv``)."""
    ids = entries.column("id").to_pylist() if entries.num_rows else []
    deepest = dict.fromkeys(ids, 0)
    if chains.num_rows and "msa_depth" in chains.column_names:
        for eid, dep in zip(
            chains.column("entry_id").to_pylist(), chains.column("msa_depth").to_pylist(), strict=True
        ):
            if eid in deepest and dep is not None and dep > deepest[eid]:
                deepest[eid] = int(dep)
    dates = (
        entries.column("release_date").to_pylist()
        if "release_date" in entries.column_names
        else [""] * len(ids)
    )
    cols: dict[str, list[Any]] = {
        "id": ids,
        "tokens": _num(entries, "token_count", np.int64).tolist(),
        "atoms": _num(entries, "atom_count", np.int64).tolist(),
        "chains": _num(entries, "n_chains", np.int64).tolist(),
        "msa_depth": [deepest[i] for i in ids],
        "msa_coverage": _num(entries, "msa_coverage").tolist(),
        "resolution": _num(entries, "resolution").tolist(),
        "release_date": [d or "" for d in dates],
        "method": entries.column("method").to_pylist()
        if "method" in entries.column_names
        else [""] * len(ids),
    }
    for name in MOL_TYPE_NAMES:
        cols[f"{name}_tokens"] = _num(entries, f"n_{name}_tokens", np.int64).tolist()
    return cols


def part_bytes(store: Path) -> dict[str, int]:
    """Bytes on disk by ``<part kind>/<array>`` (summed over parts), ``<kind>/part index`` (the parts'
    own ``_index``), metadata files and the index tables (``index``: ``index/*.arrow``). Left out:
    parts being written, the parts' rows the index keeps (``index/.part-rows``) and its other hidden
    files, the caches (``cache/``) and the root's own files; ``featurecache info`` counts them."""
    out: Counter[str] = Counter()
    parts = store / PARTS_DIR
    for part in sorted(parts.iterdir()) if parts.is_dir() else []:
        if part.is_file():  # the parts group's own zarr.json
            out["parts/metadata"] += part.stat().st_size
            continue
        if not part.is_dir() or part.name.startswith(TMP_PREFIX):
            continue
        kind = _PART_KINDS.get(part.name[:2], part.name.split("-")[0])
        for child in part.iterdir():
            if child.is_dir():
                key = f"{kind}/{'part index' if child.name == PART_INDEX_DIR else child.name}"
                out[key] += sum(f.stat().st_size for f in child.rglob("*") if f.is_file())
            elif child.is_file():
                out[f"{kind}/metadata"] += child.stat().st_size
    index = store / INDEX_DIR
    if index.is_dir():
        out["index"] = sum(f.stat().st_size for f in index.glob("*.arrow"))
    return dict(out)


def collect(reader: Any, store: Path) -> tuple[list[Panel], dict[str, list[Any]], dict[str, Any]]:
    """(panels, per-entry table, summary) of an open store."""
    entries, chains = reader.entries, reader.chains
    failures, components = reader.failures, reader.components
    per_entry = entry_table(entries, chains)
    n = len(per_entry["id"])
    panels: list[Panel] = []
    content = "What the store holds"

    tokens = np.array(per_entry["tokens"], dtype=np.float64)
    atoms = np.array(per_entry["atoms"], dtype=np.float64)
    n_chains = np.array(per_entry["chains"], dtype=np.float64)
    depth = np.array(per_entry["msa_depth"], dtype=np.float64)
    coverage = np.array(per_entry["msa_coverage"], dtype=np.float64)
    resolution = np.array(per_entry["resolution"], dtype=np.float64)
    years = np.array([float(d[:4]) if d[:4].isdigit() else np.nan for d in per_entry["release_date"]])

    panels.append(Panel("tokens_per_entry", "Tokens per entry", content, "hist", _hist(tokens, log=True, integer=True),
                        "tokens (log scale)", "entries", f"{n} entries, {int(tokens.sum())} tokens; median "
                        f"{_median(tokens)}, max {_max(tokens)}", log_x=True))  # fmt: skip
    panels.append(Panel("atoms_per_entry", "Atoms per entry", content, "hist", _hist(atoms, log=True, integer=True),
                        "atoms (log scale)", "entries", f"{int(atoms.sum())} atoms; median {_median(atoms)}, max "
                        f"{_max(atoms)}", log_x=True))  # fmt: skip
    log_chains = bool(n and n_chains.max() > 60)
    panels.append(Panel("chains_per_entry", "Chains per entry", content, "hist",
                        _hist(n_chains, log=log_chains, integer=True),
                        "chains (log scale)" if log_chains else "chains", "entries",
                        f"{int(n_chains.sum())} chains; max {_max(n_chains)} in one entry",
                        log_x=log_chains))  # fmt: skip
    # three counts a reader may take "entries with an MSA" for; each is named for what it counts
    deep_msa = int((depth > 1).sum())  # the deepest chain MSA holds more than the query row
    stored_msa = int((depth > 0).sum())  # any MSA stored, single-sequence (query row alone) ones too
    file_msa = int((coverage > 0).sum())  # a polymer chain's MSA came from files (NaN compares False)
    panels.append(Panel("msa_depth_per_entry", "MSA depth per entry (deepest chain MSA)", content, "hist",
                        _hist(np.where(depth > 0, depth, np.nan), log=True, integer=True), "rows (log scale)",
                        "entries", f"{deep_msa} of {n} entries have an MSA deeper than the query; "
                        f"{int((depth == 0).sum())} have none stored", log_x=True))  # fmt: skip
    panels.append(Panel("msa_coverage_per_entry", "MSA coverage per entry", content, "hist",
                        _hist(coverage, bins=10), "polymer chains with an MSA from files (fraction)", "entries",
                        _coverage_caption(coverage, file_msa)))  # fmt: skip

    mol_tokens = {name: int(np.sum(per_entry[f"{name}_tokens"])) for name in MOL_TYPE_NAMES}
    mol_chains = Counter(
        MOL_TYPE_NAMES[m] if 0 <= m < len(MOL_TYPE_NAMES) else str(m)
        for m in (chains.column("mol_type").to_pylist() if chains.num_rows else [])
    )
    mol_entries = {name: int(np.count_nonzero(per_entry[f"{name}_tokens"])) for name in MOL_TYPE_NAMES}
    panels.append(Panel("molecule_types", "Molecule-type mix", content, "bar",
                        {"label": list(MOL_TYPE_NAMES), "tokens": [mol_tokens[k] for k in MOL_TYPE_NAMES],
                         "chains": [mol_chains.get(k, 0) for k in MOL_TYPE_NAMES],
                         "entries": [mol_entries[k] for k in MOL_TYPE_NAMES]},
                        "", "count (log scale)", "tokens, chains and entries containing each molecule type",
                        extra={"log_value": True}))  # fmt: skip
    panels.append(Panel("resolution", "Resolution", content, "hist", _hist(resolution, bins=20), "Å", "entries",
                        f"{int(np.isfinite(resolution).sum())} entries state a resolution; "
                        f"{int((~np.isfinite(resolution)).sum())} do not (NMR, predictions, unstated)"))  # fmt: skip
    panels.append(Panel("release_year", "Release date", content, "hist", _hist(years, integer=True, bins=20),
                        "release year", "entries", f"{int(np.isfinite(years).sum())} dated; "
                        f"{int((~np.isfinite(years)).sum())} undated"))  # fmt: skip

    build = "How the build went"
    stages = Counter(failures.column("stage").to_pylist()) if failures.num_rows else Counter()
    reasons = Counter(
        f"{s}: {e}"
        for s, e in zip(failures.column("stage").to_pylist(), failures.column("error_class").to_pylist(), strict=True)
    ) if failures.num_rows else Counter()  # fmt: skip
    panels.append(Panel("failures_by_stage", "Failures by stage", build, "bar", _bar(stages, "failures"), "stage",
                        "inputs", f"{failures.num_rows} inputs failed" if failures.num_rows else "no failures"))  # fmt: skip
    panels.append(Panel("failures_by_reason", "Failures by reason", build, "barh", _bar(reasons, "failures"),
                        "inputs", "", "stage: error class"))  # fmt: skip
    strategies = (
        Counter(components.column("strategy").to_pylist())
        if components.num_rows and "strategy" in components.column_names
        else Counter()
    )
    panels.append(Panel("conformer_strategies", "Conformer strategy", build, "bar", _bar(strategies, "components"),
                        "strategy", "components", components_caption(components.num_rows, n,
                                                                     getattr(reader, "finished", True))))  # fmt: skip
    sizes = part_bytes(store)
    panels.append(Panel("store_bytes", "Store bytes by array", build, "barh", _bar(sizes, "bytes"),
                        "bytes (log scale)", "", f"{sum(sizes.values()) / 1e6:.2f} MB on disk: the parts' arrays and metadata, "
                        "and the index tables (index/*.arrow); featurecache info's total also counts the parts' rows "
                        "the index keeps (index/.part-rows) and its other hidden files, the store's caches "
                        "(cache/) and its root files (zarr.json, the build lock)", extra={"log_value": True}))  # fmt: skip

    summary: dict[str, Any] = {
        "store": str(store),
        "entries": n,
        "tokens": int(tokens.sum()),
        "atoms": int(atoms.sum()),
        "chains": int(chains.num_rows),
        "interfaces": int(reader.interfaces.num_rows),
        "msas": int(reader.msas.num_rows),
        "components": int(components.num_rows),
        "failures": int(failures.num_rows),
        "failures_by_stage": dict(stages),
        "failures_by_reason": dict(reasons),
        "conformer_strategies": dict(strategies),
        "tokens_by_mol_type": mol_tokens,
        "chains_by_mol_type": {k: mol_chains.get(k, 0) for k in MOL_TYPE_NAMES},
        "entries_with_msa_from_files": file_msa,
        "entries_with_deep_msa": deep_msa,
        "entries_with_stored_msa": stored_msa,
        "entries_with_msa": deep_msa,  # deprecated: the old name of entries_with_deep_msa
        "bytes_by_array": sizes,
        "bytes_total": int(sum(sizes.values())),
    }
    if not getattr(reader, "finished", True):
        summary["first_build_unfinished"] = unfinished_store_note(n)
    plan = _plan_panels(reader)
    if plan is not None:
        panels.extend(plan[0])
        summary["plan"] = plan[1]
    return panels, per_entry, summary


def components_caption(n_components: int, n_entries: int, finished: bool) -> str:
    """What the conformer-strategy panel counts, and when it counts none, what that can mean. A
    store built without ``--ccd`` has components too: the standard residues featurecache ships."""
    what = (
        f"{n_components} components: the residue and ligand definitions the entries use (from --ccd, "
        "and featurecache's packaged standard residues), by how their reference conformer was made"
    )
    if n_components:
        return what
    if n_entries == 0:
        return f"{what} (the store holds no entry)"
    if not finished:
        return f"{what} (the store's first build has not finished: its conformer stage may not have run yet)"
    return f"{what} (neither --ccd nor the packaged standard residues defines any residue of the entries)"


def unfinished_store_note(n_entries: int) -> str:
    """What the report says of a store whose first build has not finished (its index is flagged so:
    ``store.index.UNFINISHED_KEY``): it shows only what was written so far."""
    return (
        f"The store's first build has not finished: its index lists only the {n_entries} entries written "
        "so far (their MSAs and conformers may be missing too), so this report covers only part of the "
        "store; if no build is running, run the same `featurecache build` again to finish it"
    )


def _coverage_caption(coverage: np.ndarray, file_msa: int) -> str:
    """The coverage panel's caption; ``coverage`` is NaN for an entry without polymer chains."""
    n = coverage.size
    if n == 0:
        return "no entries"
    finite = coverage[np.isfinite(coverage)]
    mean = f"{float(finite.mean()):.2f}" if finite.size else "–"
    return (
        f"{file_msa} of {n} entries have an MSA from files; mean {mean}; "
        f"{n - finite.size} entries without polymer chains"
    )


def _median(v: np.ndarray) -> str:
    return f"{float(np.median(v)):g}" if v.size else "–"


def _max(v: np.ndarray) -> str:
    return f"{float(np.max(v)):g}" if v.size else "–"


def _plan_panels(reader: Any) -> tuple[list[Panel], dict[str, Any]] | None:
    """Panels of ``index/plan.arrow`` when the store has been planned; a plan older than the index
    (entries added, removed, or changed since: :func:`_plan_staleness`) is flagged as out of date,
    one made while the store's first build had not finished as partial."""
    from featurecache.plan.planner import plan_metadata, summarize_plan, unfinished_plan_warning

    table = reader.table(PLAN_TABLE)
    if "recommended_crop" not in table.column_names or (table.num_rows == 0 and reader.entries.num_rows == 0):
        return None  # not planned, or a plan of no entries of a store that still has none
    meta = plan_metadata(table)
    summary = summarize_plan(table)
    crops = list(meta.get("crops", []))
    section = "Memory plan"
    budget = _plan_budget(meta)
    mode = "fused Triton kernels" if meta.get("fused") else "torch reference kernels"
    stale = _plan_staleness(table, reader, meta)
    if stale:
        summary.update(stale)
        section = f"Memory plan — out of date: {stale['plan_drift']}"
    note = f"{stale['plan_out_of_date']}. " if stale else ""
    partial = unfinished_plan_warning(table, "This plan")
    if partial:
        summary["plan_first_build_unfinished"] = partial
        section = section.replace(
            "Memory plan", "Memory plan — partial: planned during an unfinished first build", 1
        )
        note = f"{partial}. {note}"
    shares = {"label": [str(c) for c in crops], "share_fits": [summary[f"share_fits_{c}"] for c in crops]}
    panels = [
        Panel("plan_share_fits", "Share of entries that fit", section, "bar", shares, "crop (tokens)", "share",
              f"{note}{budget}, {mode}, batch {meta.get('batch_size')}", extra={"share": True}),
    ]  # fmt: skip
    top = crops[-1] if crops else None
    if top is not None:
        h = _hist(table.column(f"predicted_peak_bytes_{top}").to_numpy().astype(np.float64) / 2**30, bins=20)
        largest = summary[f"max_predicted_peak_bytes_{top}"]
        most = f"largest {largest / 2**30:.2f} GiB" if table.num_rows else "no entry planned"
        panels.append(Panel(f"plan_peak_{top}", f"Predicted peak memory at crop {top}", section, "hist", h, "GiB",
                            "entries", f"{note}{most}; {budget}"))  # fmt: skip
    return panels, summary


def _plan_budget(meta: dict[str, Any]) -> str:
    """The plan's GPU budget as ``featurecache plan`` prints it: the memory given and what an entry
    may use after the headroom (older plans recorded only the latter)."""
    usable = meta.get("gpu_memory_bytes", 0) / 2**30
    given = meta.get("gpu_memory_given_bytes")
    if given is None:
        return f"{usable:.1f} GiB usable"
    return (
        f"{given / 2**30:.1f} GiB GPU ({usable:.1f} GiB usable after {meta.get('headroom', 0):.0%} headroom)"
    )


def _plan_staleness(plan: pa.Table, reader: Any, meta: dict[str, Any]) -> dict[str, Any] | None:
    """None when the plan is the store's current one; otherwise how it is behind: the entries it
    covers against the index's (``n_entries`` of the plan's metadata, else its rows, at planning
    time), and the entries whose token count or MSA rows changed since (``plan_drift``, as
    ``featurecache.plan.fitting_ids`` warns: more tokens or deeper MSAs than planned make its
    predicted peaks too low)."""
    from featurecache.plan.planner import plan_drift

    entries = reader.entries
    ids = entries.column("id").to_pylist() if entries.num_rows else []
    planned = set(plan.column("id").to_pylist()) if "id" in plan.column_names else set()
    covered = sum(1 for i in ids if i in planned)
    n_planned = int(meta.get("n_entries", plan.num_rows))
    drift = plan_drift(plan, entries, reader.chains)
    changed = sorted(drift[2]) if drift else []
    if n_planned == len(ids) and covered == len(ids) == len(planned) and not changed:
        return None
    gone = len(planned) - covered
    said = []
    coverage = not (n_planned == len(ids) and covered == len(ids) == len(planned))
    if coverage:
        said.append(
            f"the plan covers {covered} of the store's {len(ids)} entries (planned when the store had {n_planned}"
            + (f"; {gone} planned entries are no longer in the store" if gone else "") + ")"
        )  # fmt: skip
    n = len(changed)
    if n:
        said.append(f"{n} entr{'y' if n == 1 else 'ies'} changed since (token count or MSA rows: "
                    f"{', '.join(changed[:5])}{', …' if n > 5 else ''}), predicted from what "
                    f"{'it was' if n == 1 else 'they were'}")  # fmt: skip
    parts = [f"covers {covered} of {len(ids)} entries"] if coverage else []
    parts += [f"{n} entr{'y' if n == 1 else 'ies'} changed since"] if n else []
    title = "; ".join(parts)
    return {"plan_out_of_date": "Out of date: " + "; ".join(said) + "; run `featurecache plan` again",
            "plan_drift": title, "plan_covers_entries": covered, "store_entries": len(ids),
            "plan_n_entries": n_planned, "plan_entries_changed": n}  # fmt: skip
