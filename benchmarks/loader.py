"""How fast does the training client deliver 384-token samples, what does the cache buy, and how
does ready-first yielding cope with stragglers? One run, side by side.

(a) samples/s — and samples per CPU-second ("per core") — of ``FeatureDataset`` at 384-token crops
    reading the local store and reading the same store through the lookup service
    (``featurecache serve`` in a child process). CPU time counts this process and its children
    (the lookup server, or the pool's worker processes): ``child_cpu_ms_per_sample``.
(b) what the cache buys: the same samples computed from the raw files (the uncached baseline:
    parse + tokenize + featurize the structure; then also parse and merge the cropped chains'
    MSA files, each distinct MSA once per sample; then also build the entry's RDKit reference
    conformers) against reading them from the store. Both sides compute one fixed set of stream
    positions that covers every entry of the store (the first position at which the sampler draws
    each entry), one sample at a time in this process, interleaved position by position (the
    order of the sides rotates), for ``--raw-repeats`` rounds; per sample CPU time
    (``time.process_time``) and wall time, the median over rounds. Reported: per-sample medians,
    totals over the positions, and the ratio of totals (raw / cached); the slowest entry and its
    share of the total (one deep MSA dominates).
(c) stragglers: 10 % of the timed samples, at least one (a fixed random set of positions after
    the warm-up), take 20× the median sample time (an injected sleep). An ordered ``torch.utils.data.DataLoader`` (2 worker processes,
    ``prefetch_factor`` 9: 18 samples in flight) over a map-style view of the same stream versus
    ready-first (a 2-process pool, window 16: the same 18 in flight; and an 8-thread pool, 24):
    throughput with and without stragglers, relative to each one's own no-straggler run, and the
    worst and p95 step wait.

(a) and (c) run ``--repeats`` rounds with the configurations interleaved and report field-wise
medians (``worst_wait_max_s``: the worst over all rounds) — the machine is shared.

Usage: ``.venv/bin/python benchmarks/loader.py [--store DIR] [--samples N] [--full]``. Without
``--store`` the real corpus (``../shared/data/real``, its MSAs and the CCD) is built once into a
temp dir. By default part (b) times the two MSA variants once per position (the cached side and
the structure-only variant: 3 rounds), about 100 CPU-seconds, 2–4 min on a shared 2-core machine;
``--full`` (or ``--raw-repeats 3``) gives them 3 rounds too.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.harness import (  # noqa: E402
    REAL,
    SHARED,
    Bench,
    add_out_argument,
    corpus_store,
    percentile,
    require_shared,
    store_argument,
    store_label,
)
from featurecache.client.sampler import SampleKey  # noqa: E402
from featurecache.store.base import FeatureReader  # noqa: E402
from featurecache.types import Entry  # noqa: E402

if TYPE_CHECKING:
    # imports torch: imported where used, after the arguments are parsed (--help and usage errors answer without it)
    from featurecache.client import FeatureDataset

log = logging.getLogger("benchmarks.loader")

CROP = 384
WINDOW = 16
POOL_WORKERS = 2
#: the ordered DataLoader's prefetch per worker that gives it ready-first's samples in flight
#: (ReadyFirst keeps at most workers + window submitted or waiting; a DataLoader workers × prefetch)
PREFETCH = (POOL_WORKERS + WINDOW) // POOL_WORKERS
STRAGGLER_FRACTION = 0.10
STRAGGLER_FACTOR = 20.0
#: part (c)'s warm-up samples (not timed); the stragglers are drawn from the timed ones
WARMUP = 4
MIN_SAMPLES = 10


# --------------------------------------------------------------------- the uncached baseline
class RawFilesReader(FeatureReader):
    """The store's index (so the sampler stream is identical) over the *raw files*.

    Every ``entry()`` reads, parses, tokenizes and featurizes the structure file again. With
    ``msas=True`` each distinct MSA a sample reads is parsed from its alignment files and merged
    (the build's own functions) once per sample: the client fetches once per cropped chain, and a
    homomer's chains share one MSA, so ``msa()`` keeps the parses of the current sample by key.
    The job fetches a sample's entry first, so ``entry()`` starts a sample and empties that memo
    (per thread: a thread pool computes one sample per thread at a time); nothing parsed is kept
    for a later sample — that would be a cache. With ``conformers=True`` every entry's reference
    conformers are built again with RDKit. What is not recomputed comes from the store.
    """

    def __init__(
        self, store: Path, pdb_dir: Path, msa_dir: Path, ccd: Path, msas: bool, conformers: bool
    ) -> None:
        from featurecache import open_store

        self.store = open_store(store)
        self.pdb_dir, self.msa_dir, self.ccd = Path(pdb_dir), Path(msa_dir), str(ccd)
        self.msas_raw, self.conformers = msas, conformers
        e = self.store.entries
        self._source = dict(zip(e.column("id").to_pylist(), e.column("source_path").to_pylist(), strict=True))
        m = self.store.msas
        self._msa_sources = (
            {r["key"]: r for r in m.select(["key", "mol_type", "sources"]).to_pylist()} if m.num_rows else {}
        )
        seqs = self.store.chains.select(["sequence_hash", "sequence"]).to_pylist()
        self._sequence = {r["sequence_hash"]: r["sequence"] for r in seqs}
        self._sample = threading.local()  # .parsed: MSA key -> this sample's parse (see the class doc)

    def _parsed(self) -> dict[str, Any]:
        """This thread's current sample's parsed MSAs, by key."""
        parsed: dict[str, Any] | None = getattr(self._sample, "parsed", None)
        if parsed is None:
            parsed = self._sample.parsed = {}
        return parsed

    def __getstate__(self) -> dict[str, Any]:
        return {"args": (str(self.store.path), str(self.pdb_dir), str(self.msa_dir), self.ccd, self.msas_raw,
                         self.conformers)}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        a = state["args"]
        self.__init__(Path(a[0]), Path(a[1]), Path(a[2]), Path(a[3]), a[4], a[5])  # type: ignore[misc]

    ids = property(lambda self: self.store.ids)
    entries = property(lambda self: self.store.entries)
    chains = property(lambda self: self.store.chains)
    interfaces = property(lambda self: self.store.interfaces)
    failures = property(lambda self: self.store.failures)
    msas = property(lambda self: self.store.msas)

    def info(self) -> dict[str, Any]:
        return {"raw": True}

    def component_table(self) -> Any:
        return self.store.component_table()

    def entry(self, entry_id: str, arrays: Sequence[str] | None = None) -> Entry:
        from featurecache.build.components import component_resolvers
        from featurecache.featurize.entry import featurize_bytes
        from featurecache.store.layout import columns

        self._parsed().clear()  # a new sample: the job fetches its entry before any of its MSAs
        path = self.pdb_dir / self._source[entry_id]  # source paths are relative to the build's --pdb-dir
        atoms_fn, bonds_fn = component_resolvers(self.ccd)
        st = featurize_bytes(path.read_bytes(), path.name, entry_id, component_atoms=atoms_fn,
                             component_bonds=bonds_fn)  # fmt: skip
        chains = [{**asdict(c), "entry_id": entry_id} for c in st.chains]
        for c in chains:  # the chain ↔ MSA join is by sequence hash, as in the build
            c["msa_key"] = c["sequence_hash"] if c["sequence_hash"] in self._msa_sources else None
        return Entry(id=entry_id, atoms=columns(st.atoms), tokens=columns(st.tokens), bonds=columns(st.bonds),
                     interfaces=columns(st.interfaces), meta={}, chains=chains)  # fmt: skip

    def msa(self, key: str, rows: Any = None, cols: Any = None) -> Any:
        if not self.msas_raw:
            return self.store.msa(key, rows, cols)
        from featurecache.types import MSABlock

        parsed = self._parsed()
        enc = parsed.get(key)
        if enc is None:  # the first chain of this sample with this MSA
            enc = parsed[key] = self._parse_msa(key)
        r = np.arange(enc.depth) if rows is None else np.minimum(np.asarray(rows, np.int64), enc.depth - 1)
        c = np.arange(enc.length) if cols is None else np.asarray(cols, np.int64)
        return MSABlock(key=key, residues=enc.residues[np.ix_(r, c)], deletions=enc.deletions[np.ix_(r, c)],
                        species=enc.species[r], source=enc.source[r], profile=enc.profile[c],
                        deletion_mean=enc.deletion_mean[c], depth=enc.depth, length=enc.length)  # fmt: skip

    def _parse_msa(self, key: str) -> Any:
        """Parse and merge the chain's alignment files, as the build's MSA stage does."""
        from featurecache.errors import MSAError
        from featurecache.featurize.msa import adopt_query, build_msa, compatible_query
        from featurecache.parse.a3m import find_query, parse_a3m, reroot
        from featurecache.parse.hits import sniff_file
        from featurecache.parse.sto import parse_sto
        from featurecache.types import ParsedMSA

        row = self._msa_sources[key]
        sequence = self._sequence[key]
        alignments: list[tuple[str, ParsedMSA]] = []
        for rel in row["sources"] or ():
            path = self.msa_dir / rel.split("#")[0]
            blocks: list[Any] = parse_a3m(path) if sniff_file(path) == "a3m" else parse_sto(path)
            for b in blocks:
                if isinstance(b, ParsedMSA):
                    q = find_query(b, sequence)
                    msa = reroot(b, q) if q is not None else None
                    if msa is None and compatible_query(b.query_sequence, sequence):
                        msa = adopt_query(b, sequence)
                else:
                    msa = b.msa_for(sequence)
                if msa is not None and msa.rows and msa.rows[0] == sequence:
                    alignments.append((rel, msa))
                    break
        try:
            return build_msa(sequence, row["mol_type"], alignments)
        except MSAError:
            return build_msa(sequence, row["mol_type"], [])

    def entry_component_table(self, entry: Entry) -> Any:
        if not self.conformers:
            return self.store.component_table()
        from featurecache.chem.conformer import conformer_for_component
        from featurecache.chem.library import get_library
        from featurecache.chem.reference import ComponentTable, residue_codes

        lib = get_library(self.ccd)
        defs = lib.load(sorted(set(residue_codes(entry.tokens))))
        return ComponentTable.from_conformers([conformer_for_component(d) for d in defs.values()])


# ------------------------------------------------------------------------------ measurement
class Straggle:
    """Sample hook: the positions in ``slow`` sleep ``seconds`` before their fetch."""

    def __init__(self, slow: Iterable[int], seconds: float) -> None:
        self.slow = frozenset(slow)
        self.seconds = seconds

    def __call__(self, key: SampleKey) -> None:
        if key.position in self.slow:
            time.sleep(self.seconds)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu(skip_server: bool) -> float:
    """CPU seconds of this process's live children: pool workers and, unless ``skip_server``, the
    lookup server (``featurecache.cli serve``)."""
    total = 0.0
    me = str(os.getpid())
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            if ppid != me:
                continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                is_server = b"serve" in f.read()
            if not (skip_server and is_server):
                total += _cpu_seconds(int(d))
        except OSError:
            continue
    return total


def consume(stream: Iterator[Any], n: int, warmup: int = 0, server: bool = False) -> dict[str, Any]:
    """Pull ``warmup`` then ``n`` items; wall time, own + children's CPU time and per-item waits."""
    for _ in range(warmup):
        next(stream)
    waits: list[float] = []
    t0, c0, k0 = time.perf_counter(), time.process_time(), _children_cpu(skip_server=not server)
    for _ in range(n):
        t = time.perf_counter()
        next(stream)
        waits.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0
    cpu, child = time.process_time() - c0, _children_cpu(skip_server=not server) - k0
    return {
        "samples": n,
        "wall_s": wall,
        "samples_per_s": n / wall,
        "client_cpu_s": cpu,
        "child_cpu_s": child,
        "samples_per_cpu_s": n / max(cpu + child, 1e-9),
        "cores_busy": (cpu + child) / wall,
        "worst_wait_s": max(waits),
        "p95_wait_s": percentile(waits, 95),
    }


def _dataset(source: Any, **kw: Any) -> FeatureDataset:
    kw.setdefault("crop_size", CROP)
    kw.setdefault("infinite", True)
    kw.setdefault("seed", 0)
    kw.setdefault("window", WINDOW)
    kw.setdefault("deadline_s", None)
    from featurecache.client import FeatureDataset

    return FeatureDataset(source, **kw)


def _identity(x: Any) -> Any:
    return x


def ordered_loader(ds: FeatureDataset, n: int, workers: int, prefetch: int) -> Iterator[Any]:
    """An ordered DataLoader over the first ``n`` positions: ``workers × prefetch`` samples in flight."""
    import torch
    from torch.utils.data import DataLoader

    class Positions(torch.utils.data.Dataset):  # type: ignore[type-arg]
        """Map-style view of the first ``n`` positions of a dataset's stream (for an ordered DataLoader)."""

        def __init__(self, ds: FeatureDataset, n: int) -> None:
            self.ds, self.n = ds, n

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, i: int) -> dict[str, Any]:
            return self.ds.sample(int(i))

    loader: DataLoader[Any] = DataLoader(Positions(ds, n), batch_size=None, num_workers=workers, collate_fn=_identity,
                        prefetch_factor=prefetch, multiprocessing_context="fork")  # fmt: skip
    return iter(loader)


def covering_positions(ds: FeatureDataset, ids: Sequence[str], limit: int = 200_000) -> list[int]:
    """The first stream position at which the sampler draws each of ``ids`` (ascending): one fixed
    set of samples that covers every entry the sampler can draw."""
    first: dict[str, int] = {}
    want = set(ids)
    for p in range(limit):
        first.setdefault(ds.sampler.key(p).entry_id, p)
        if want <= first.keys():
            break
    return sorted(first[e] for e in want if e in first)


def per_sample_costs(
    sides: dict[str, FeatureDataset], positions: Sequence[int], repeats: dict[str, int]
) -> dict[str, dict[int, list[tuple[float, float]]]]:
    """(CPU s, wall s) of ``sides[label].sample(p)`` for every position, in this thread, position by
    position with the sides interleaved (their order rotates with the position and the round);
    side ``label`` runs ``repeats[label]`` rounds."""
    costs: dict[str, dict[int, list[tuple[float, float]]]] = {
        label: {p: [] for p in positions} for label in sides
    }
    labels = list(sides)
    for rnd in range(max(repeats.values())):
        for i, p in enumerate(positions):
            k = (i + rnd) % len(labels)
            for label in labels[k:] + labels[:k]:
                if rnd >= repeats[label]:
                    continue
                t0, c0 = time.perf_counter(), time.process_time()
                sides[label].sample(p)
                costs[label][p].append((time.process_time() - c0, time.perf_counter() - t0))
        log.info("part b: round %d of %d done", rnd + 1, max(repeats.values()))
    return costs


def stage_times(ds: FeatureDataset, positions: Sequence[int]) -> dict[str, float]:
    """Median seconds of fetch / crop / assemble for one sample, single thread."""
    from featurecache.client.crop import CropInput
    from featurecache.client.job import ENTRY_ARRAYS

    reader = ds.source.get()
    fetch, crop, total = [], [], []
    for p in positions:
        key = ds.sampler.key(p)
        t0 = time.perf_counter()
        e = reader.entry(key.entry_id, list(ENTRY_ARRAYS))
        t1 = time.perf_counter()
        ds.cropper(CropInput.from_arrays(e.tokens, e.atoms, e.bonds, e.interfaces), np.random.default_rng(p))
        t2 = time.perf_counter()
        ds.sample(p)
        t3 = time.perf_counter()
        fetch.append(t1 - t0)
        crop.append(t2 - t1)
        total.append(t3 - t2)
    return {"fetch_ms": 1e3 * statistics.median(fetch), "crop_ms": 1e3 * statistics.median(crop),
            "sample_ms": 1e3 * statistics.median(total)}  # fmt: skip


# ------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> None:
    # the whole docstring: the options refer to its parts (a), (b), (c)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--store", type=store_argument, default=None, help="existing store (default: build the real corpus)"
    )
    ap.add_argument(
        "--samples",
        type=int,
        default=300,
        help="samples per run of (a) and of (c) (default 300; at least 10)",
    )
    ap.add_argument(
        "--repeats", type=int, default=3, help="rounds of (a) and (c); medians are reported (default 3)"
    )
    ap.add_argument("--raw-repeats", type=int, default=None,
                    help="rounds of (b) for the raw MSA variants (default 1, 3 with --full; the others: 3)")  # fmt: skip
    ap.add_argument(
        "--full", action="store_true", help="3 rounds of every raw variant in (b) (about 3x longer)"
    )
    add_out_argument(ap, "loader")
    args = ap.parse_args(argv)
    for opt in ("samples", "repeats", "raw_repeats"):
        if getattr(args, opt) is not None and getattr(args, opt) < 1:
            ap.error(f"--{opt.replace('_', '-')} must be at least 1")
    if args.samples < MIN_SAMPLES:
        ap.error(f"--samples must be at least {MIN_SAMPLES} (part c times samples {WARMUP} onwards and makes "
                 f"{STRAGGLER_FRACTION:.0%} of them stragglers, at least one)")  # fmt: skip
    require_shared(__file__, ccd=True)  # part (b) computes the samples from the real files
    # torch (FeatureDataset, part c's DataLoader) after the arguments are parsed, before anything is
    # built or timed
    import torch  # noqa: F401

    import featurecache.client.dataset  # noqa: F401

    raw_repeats = args.raw_repeats or (3 if args.full else 1)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    log.setLevel(logging.INFO)

    store = corpus_store(args.store, "loader-corpus", log)
    from featurecache import open_store

    reader = open_store(store)
    n_entries = len(reader.ids)
    tokens = np.asarray(reader.entries.column("token_count").to_numpy())
    bench = Bench("loader", store=store_label(args.store), entries=n_entries, crop=CROP, window=WINDOW, cpus=os.cpu_count(),
                  entries_over_crop=int((tokens > CROP).sum()), msas=reader.msas.num_rows,
                  components=reader.components.num_rows)  # fmt: skip
    n = args.samples

    # ---- stage breakdown (single thread)
    probe = _dataset(store, workers=1)
    st = stage_times(probe, range(0, 40))
    bench.add(part="stages", source="local", **{k: round(v, 3) for k, v in st.items()})
    median_sample_s = st["sample_ms"] / 1e3
    probe.close()

    # ---- (a) cached: local store and lookup service; configurations interleaved, R rounds
    local_cfgs = (("local threads=1", "thread", 1), ("local threads=2", "thread", 2),
                  ("local processes=2", "process", 2))  # fmt: skip
    service_cfgs = (("service threads=2", "thread", 2), ("service threads=4", "thread", 4))
    runs: dict[str, list[dict[str, Any]]] = {c[0]: [] for c in (*local_cfgs, *service_cfgs)}
    from services.lookup.server import background_server

    with background_server(store) as url:
        for _ in range(args.repeats):
            for cfgs, source in ((local_cfgs, str(store)), (service_cfgs, url)):
                for label, pool, workers in cfgs:
                    ds = _dataset(source, pool=pool, workers=workers)
                    runs[label].append(consume(iter(ds), n, warmup=10, server=source == url))
                    ds.close()
    rates = {label: _median_run(rs) for label, rs in runs.items()}
    for label, r in rates.items():
        bench.add(part="a", source=label, **_row(r))

    # ---- (b) uncached vs cached: one fixed set of positions covering every entry, per sample
    ccd = SHARED / "data" / "ccd"
    variants = (("raw: structure", False, False), ("raw: structure+MSAs", True, False),
                ("raw: structure+MSAs+conformers", True, True))  # fmt: skip
    sides = {"cached: local store": _dataset(store, workers=1)}
    for label, msas, conformers in variants:
        sides[label] = _dataset(RawFilesReader(store, REAL / "structures", REAL / "msas", ccd, msas, conformers),
                                workers=1)  # fmt: skip
    cached_ds = sides["cached: local store"]
    positions = covering_positions(cached_ds, reader.ids)
    for p in positions:  # warm-up: page cache, the component table, the CCD library of this process
        cached_ds.sample(p)
    # each raw side computes the smallest entry once first, so that the one-time imports (parsers,
    # RDKit) are not charged to whichever position a side happens to compute first
    token_count = dict(zip(reader.entries.column("id").to_pylist(), tokens.tolist(), strict=True))
    smallest = min(positions, key=lambda p: token_count.get(cached_ds.sampler.key(p).entry_id, 0))
    for ds in sides.values():
        if ds is not cached_ds:
            ds.sample(smallest)
    # the cached side and the raw structure side are cheap: 3 rounds; the MSA variants --raw-repeats
    repeats = {label: (raw_repeats if "MSAs" in label else 3) for label in sides}
    log.info("part b: %d positions covering %d of %d entries, rounds %s", len(positions), len(positions),
             n_entries, repeats)  # fmt: skip
    costs = per_sample_costs(sides, positions, repeats)
    summary = {label: _cost_summary(per_pos, cached_ds, positions) for label, per_pos in costs.items()}
    base = summary["cached: local store"]
    for label, r in summary.items():
        worst = r.pop("_slowest_position")
        row: dict[str, Any] = {"part": "b", "source": label, "samples": len(positions), "entries": len(positions),
                               "rounds": repeats[label], **r}  # fmt: skip
        if label != "cached: local store":
            row["cache_speedup_cpu_total"] = round(r["cpu_total_s"] / base["cpu_total_s"], 1)
            row["cache_speedup_wall_total"] = round(r["wall_total_s"] / base["wall_total_s"], 1)
            row["cache_speedup_cpu_median"] = round(r["cpu_median_ms"] / base["cpu_median_ms"], 1)
            # how much the one slowest entry decides: the same ratio without its position on both sides
            rest = [p for p in positions if p != worst]
            raw_rest = sum(_median_cpu(costs[label][p]) for p in rest)
            cached_rest = sum(_median_cpu(costs["cached: local store"][p]) for p in rest)
            row["cache_speedup_cpu_total_without_slowest"] = round(raw_rest / cached_rest, 1)
        bench.add(**row)
    for ds in sides.values():
        ds.close()

    # ---- (c) stragglers; configurations interleaved, R rounds
    slow = straggler_positions(n)
    delay = (STRAGGLER_FACTOR - 1.0) * median_sample_s
    log.info("stragglers: %d of %d positions sleep %.3f s (20x the median %.1f ms)", len(slow), n, delay,
             1e3 * median_sample_s)  # fmt: skip
    configs: list[tuple[str, dict[str, Any]]] = [
        (f"ordered DataLoader workers={POOL_WORKERS} prefetch={PREFETCH}", {}),
        (
            f"ready-first processes={POOL_WORKERS} window={WINDOW}",
            {"pool": "process", "workers": POOL_WORKERS},
        ),
        (f"ready-first threads=8 window={WINDOW}", {"pool": "thread", "workers": 8}),
    ]
    in_flight = {configs[0][0]: POOL_WORKERS * PREFETCH, configs[1][0]: POOL_WORKERS + WINDOW,
                 configs[2][0]: 8 + WINDOW}  # fmt: skip
    res: dict[tuple[str, bool], list[dict[str, Any]]] = {
        (c, s): [] for c, _ in configs for s in (False, True)
    }
    for _ in range(args.repeats):
        for label, kw in configs:
            for straggle in (False, True):
                hook = Straggle(slow, delay) if straggle else None
                if label.startswith("ordered"):
                    ds = _dataset(store, workers=1, sample_hook=hook)
                    stream = ordered_loader(ds, n, workers=POOL_WORKERS, prefetch=PREFETCH)
                    res[(label, straggle)].append(consume(stream, n - WARMUP, warmup=WARMUP))
                    del stream
                else:
                    ds = _dataset(store, sample_hook=hook, **kw)
                    it = iter(ds)
                    res[(label, straggle)].append(consume(it, n - WARMUP, warmup=WARMUP))
                    it.close()
                    ds.close()
    for label, _ in configs:
        base, hit = _median_run(res[(label, False)]), _median_run(res[(label, True)])
        bench.add(part="c", source=label, in_flight=in_flight[label], samples=n - WARMUP, stragglers=len(slow),
                  delay_s=round(delay, 3),
                  samples_per_s=round(base["samples_per_s"], 1),
                  straggled_samples_per_s=round(hit["samples_per_s"], 1),
                  relative_throughput=round(hit["samples_per_s"] / base["samples_per_s"], 3),
                  worst_wait_s=round(hit["worst_wait_s"], 3),
                  worst_wait_max_s=round(max(r["worst_wait_s"] for r in res[(label, True)]), 3),
                  p95_wait_s=round(hit["p95_wait_s"], 4),
                  worst_wait_no_straggler_s=round(base["worst_wait_s"], 3))  # fmt: skip
    bench.finish(args.out)


def straggler_positions(n: int, seed: int = 1234) -> set[int]:
    """Part (c)'s slow positions: ``STRAGGLER_FRACTION`` of the timed positions ``WARMUP .. n - 1``
    (rounded, at least one), a fixed random choice. A fraction drawn position by position could
    choose none at a small ``--samples`` and still report a "with stragglers" comparison."""
    timed = np.arange(WARMUP, n)
    if timed.size == 0:
        raise ValueError(f"{n} samples leave none to time after the {WARMUP} warm-up samples")
    k = max(1, round(STRAGGLER_FRACTION * timed.size))
    return set(np.random.default_rng(seed).choice(timed, size=k, replace=False).tolist())


def _cost_summary(
    per_pos: dict[int, list[tuple[float, float]]], ds: FeatureDataset, positions: Sequence[int]
) -> dict[str, Any]:
    """Per-sample medians and totals over the positions of each position's median-over-rounds cost."""
    cpu = {p: statistics.median(c for c, _ in per_pos[p]) for p in positions}
    wall = {p: statistics.median(w for _, w in per_pos[p]) for p in positions}
    worst = max(positions, key=lambda p: cpu[p])
    total = sum(cpu.values())
    return {
        "cpu_median_ms": round(1e3 * statistics.median(cpu.values()), 2),
        "wall_median_ms": round(1e3 * statistics.median(wall.values()), 2),
        "cpu_p95_ms": round(1e3 * percentile(list(cpu.values()), 95), 2),
        "cpu_total_s": round(total, 3),
        "wall_total_s": round(sum(wall.values()), 3),
        "slowest_entry": ds.sampler.key(worst).entry_id,
        "slowest_cpu_s": round(cpu[worst], 3),
        "slowest_share": round(cpu[worst] / total, 3) if total > 0 else None,
        "_slowest_position": worst,
    }


def _median_cpu(costs: list[tuple[float, float]]) -> float:
    return statistics.median(c for c, _ in costs)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Field-wise median over repeated runs (the machine is shared: single runs are noisy)."""
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "samples": r["samples"],
        "samples_per_s": round(r["samples_per_s"], 1),
        "samples_per_cpu_s": round(r["samples_per_cpu_s"], 1),
        "cores_busy": round(r["cores_busy"], 2),
        "client_cpu_ms_per_sample": round(1e3 * r["client_cpu_s"] / r["samples"], 2),
        "child_cpu_ms_per_sample": round(1e3 * r["child_cpu_s"] / r["samples"], 2),
        "p95_wait_s": round(r["p95_wait_s"], 4),
    }


if __name__ == "__main__":
    main()
