"""The store's per-sample reads, direct (``store.shards.ShardReader``, now) against zarr's own read
path (what every read went through before), side by side in one process.

(a) ``slice``: one slice of a real store's arrays, ``PartArrays.read_many`` with the direct reader
    and with every read sent through zarr, interleaved: the atom records of 300 rows (one inner
    chunk), of 4,096 and of 20,000 rows (several chunks), 384 columns of 64 rows of an MSA's
    residues. Wall and CPU ms per read (median of ``--reads``).
(b) ``sample``: training samples at ``featurecache train``'s settings (``FeatureDataset(crop_size=384,
    weighting="af3", max_msa_rows=1024, pair_msa=True)``, seed 0), the same stream positions drawn
    by each side in turn (the order alternating), ``--samples`` positions after 5 warm-up ones:
    CPU ms per sample (``time.process_time``: every thread of the process, zarr's loop thread
    included), and every sample's arrays compared byte for byte between the sides.

    .venv/bin/python benchmarks/shard_reads.py [--store DIR] [--samples 300] [--reads 300] [--out FILE]

Without ``--store`` the real corpus is built once into a temp dir (``harness.corpus_store``).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import Bench, add_out_argument, corpus_store, same_sample, store_argument, store_label
from featurecache.client import FeatureDataset
from featurecache.store.reader import open_store
from featurecache.store.root import PartArrays
from featurecache.store.shards import ShardReader

log = logging.getLogger("benchmarks.shard_reads")
TRAIN: dict[str, Any] = {"crop_size": 384, "weighting": "af3", "max_msa_rows": 1024, "pair_msa": True}
WARMUP = 5
SIDES = ("direct", "zarr")


@contextmanager
def side(name: str) -> Iterator[None]:
    """Reads inside go through zarr (``zarr``) or the direct reader (``direct``, the default)."""
    if name == "direct":
        yield
        return
    takes = ShardReader.takes
    ShardReader.takes = lambda self, selection: False  # type: ignore[method-assign]
    try:
        yield
    finally:
        ShardReader.takes = takes  # type: ignore[method-assign]


def _ms(fn: Callable[[], Any]) -> tuple[float, float]:
    c, t = time.process_time(), time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3, (time.process_time() - c) * 1e3


def slices(bench: Bench, store: Path, n: int) -> None:
    s = open_store(store)
    entries = s.entries
    big = int(np.argmax(entries.column("atom_count").to_numpy()))
    part, a0 = entries.column("part")[big].as_py(), int(entries.column("atom_start")[big].as_py())
    cases: list[tuple[str, str, str, tuple[slice, ...]]] = [
        (f"atoms, {k:,} rows", part, "atoms", (slice(a0 + 1000, a0 + 1000 + k),)) for k in (300, 4096, 20000)
    ]
    msas = s.msas
    if msas.num_rows:
        deep = int(np.argmax(msas.column("depth").to_numpy()))
        row = {c: msas.column(c)[deep].as_py() for c in ("part", "array", "depth")}
        cases.append((f"MSA residues, 64 rows x 384 columns (depth {row['depth']})", row["part"], row["array"],
                      (slice(0, 64), slice(0, 384))))  # fmt: skip
    s.close()
    arrays = PartArrays(store, "part array")
    for label, p, name, sel in cases:
        got = {}
        for sd in SIDES:
            with side(sd):
                got[sd] = arrays.read_many((p, name, sel))[0]
        assert got["direct"].tobytes() == got["zarr"].tobytes(), label
        times: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for i in range(n):
            for sd in SIDES if i % 2 == 0 else SIDES[::-1]:
                with side(sd):
                    times[sd].append(_ms(partial(arrays.read_many, (p, name, sel))))
        med = {
            sd: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
            for sd, v in times.items()
        }
        bench.add(part="slice", case=label, n=n, zarr_wall_ms=med["zarr"][0], direct_wall_ms=med["direct"][0],
                  zarr_cpu_ms=med["zarr"][1], direct_cpu_ms=med["direct"][1],
                  cpu_speedup=med["zarr"][1] / med["direct"][1], same_bytes=True)  # fmt: skip


def samples(bench: Bench, store: Path, n: int) -> None:
    sets = {sd: FeatureDataset(store, infinite=True, seed=0, **TRAIN) for sd in SIDES}

    def draw(sd: str, p: int) -> tuple[float, dict[str, Any]]:
        with side(sd):
            c = time.process_time()
            s = sets[sd].sample(p)
            return (time.process_time() - c) * 1e3, s

    for sd in SIDES:
        for p in range(WARMUP):
            draw(sd, p)
    cpu: dict[str, list[float]] = defaultdict(list)
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    differ = 0
    for p in range(WARMUP, WARMUP + n):
        got = {}
        for sd in SIDES if p % 2 == 0 else SIDES[::-1]:
            ms, got[sd] = draw(sd, p)
            cpu[sd].append(ms)
            per[str(got[sd]["entry_id"])][sd].append(ms)
        differ += not same_sample(got["direct"], got["zarr"])
    for ds in sets.values():
        ds.close()
    if differ:
        raise SystemExit(f"{differ} of {n} samples differ between the direct and the zarr reads")
    row: dict[str, Any] = {"part": "sample", "case": "(all)", "n": n}
    for sd in SIDES:
        row |= {
            f"{sd}_cpu_median_ms": statistics.median(cpu[sd]),
            f"{sd}_cpu_mean_ms": statistics.fmean(cpu[sd]),
        }
    bench.add(**row, cpu_speedup=row["zarr_cpu_mean_ms"] / row["direct_cpu_mean_ms"], same_bytes=True)
    for e in sorted(per, key=lambda e: -len(per[e]["direct"]))[:6]:
        med = {sd: statistics.median(per[e][sd]) for sd in SIDES}
        bench.add(part="sample", case=e, n=len(per[e]["direct"]), zarr_cpu_median_ms=med["zarr"],
                  direct_cpu_median_ms=med["direct"], cpu_speedup=med["zarr"] / med["direct"])  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--store", type=store_argument, default=None, help="a store (default: the real corpus, built once)"
    )
    ap.add_argument("--samples", type=int, default=300, help="stream positions drawn by each side")
    ap.add_argument("--reads", type=int, default=300, help="timed reads per slice case and side")
    add_out_argument(ap, "shard_reads")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    store = corpus_store(args.store, "shard_reads", log)
    bench = Bench("shard_reads", store=store_label(args.store), samples=args.samples, reads=args.reads,
                  settings=TRAIN, warmup=WARMUP)  # fmt: skip
    slices(bench, store, args.reads)
    samples(bench, store, args.samples)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
