"""What bounding the part arrays a reader keeps open costs and saves (review R2 F4): memory held by
a reader's open arrays, and milliseconds per entry read at random, for several bounds
(``FEATURECACHE_MAX_OPEN_ARRAYS``), side by side in one process.

A reader kept every part array it opened (~13 KB each); over a store of 200k entries (16 a part)
a long-lived DataLoader worker held 0.2-0.4 GB of them. With a bound, reads of an array that was
closed open it again. The store is built with one entry per part (``--part-size 1``) so that a
small corpus has many parts; the bound is set below the number of arrays to show the miss cost.
Without --store the real structure corpus (../shared/data/real/structures) is built into a temp
dir first (no MSAs or CCD; removed after).

Memory (``held_kib``, tracemalloc: what a fresh reader holds after reading every entry once) is
measured once per bound. ``kib_per_open_array`` is that over the arrays open, which includes the
reader's fixed part; ``kib_per_array_fit`` and ``fixed_kib_fit`` are the least-squares line
``held_kib = fixed + slope x open_arrays`` over the bounds (the cost of one more open array, and
what a reader holds regardless). Time: ``--repeats`` rounds, the bounds' order alternating round by
round, each a fresh reader that reads every entry once (warm) and then ``--reads`` random entries:
per bound the median over rounds of CPU time (``time.process_time``; the steadier number on a shared
machine) and wall time per entry, and the rounds' values.

    .venv/bin/python benchmarks/reader_memory.py [--store DIR] [--reads N] [--repeats R] [--bounds 8192,64,8]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, Bench, add_out_argument, require_shared
from featurecache.build.run import run_build
from featurecache.store.reader import LocalStore, open_store
from featurecache.store.root import MAX_OPEN_ARRAYS_ENV


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, default=None, help="an existing store (default: build the corpus, "
                    "one entry a part, into a temp dir)")  # fmt: skip
    ap.add_argument("--reads", type=int, default=600, help="random entry reads timed per bound (default 600)")
    ap.add_argument(
        "--bounds", default="8192,64,8", help="bounds on open arrays to compare (default 8192,64,8)"
    )
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds, the bounds interleaved (default 5)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random entry choice (default 0)")
    ap.add_argument("--workers", type=int, default=2, help="build workers when building the corpus")
    add_out_argument(ap, "reader_memory")
    return ap.parse_args(argv)


def _reader(store_path: Path, bound: int) -> LocalStore:
    """A reader of ``store_path`` that keeps ``bound`` arrays open, set as a user sets it."""
    os.environ[MAX_OPEN_ARRAYS_ENV] = str(bound)
    return open_store(store_path)


def fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """(slope, intercept) of the least-squares line through ``(open_arrays, held_kib)``; None with
    fewer than two distinct array counts."""
    xs = [float(x) for x, _ in points]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    slope = sum((x - mx) * (y - my) for x, (_, y) in zip(xs, points, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return slope, my - slope * mx


def _held(store_path: Path, ids: list[str], bound: int) -> tuple[float, int]:
    """KiB a fresh reader with ``bound`` holds after reading every entry once, and its open arrays."""
    gc.collect()
    tracemalloc.start()
    store = _reader(store_path, bound)
    base = tracemalloc.get_traced_memory()[0]
    for eid in ids:
        store.entry(eid)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return held / 1024, store._part_arrays.open_count()


def _timed(store_path: Path, ids: list[str], sample: list[str], bound: int) -> tuple[float, float]:
    """CPU and wall ms per entry of ``sample``'s reads by a fresh reader (every entry read once first)."""
    store = _reader(store_path, bound)
    for eid in ids:
        store.entry(eid)
    c0, t0 = time.process_time(), time.perf_counter()
    for eid in sample:
        store.entry(eid)
    return (time.process_time() - c0) / len(sample) * 1e3, (time.perf_counter() - t0) / len(sample) * 1e3


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    bounds = [int(b) for b in args.bounds.split(",")]
    if not bounds or min(bounds) < 1:
        raise SystemExit(f"{Path(__file__).name}: --bounds must be positive integers (got {args.bounds!r})")
    if args.repeats < 1 or args.reads < 1:
        raise SystemExit(f"{Path(__file__).name}: --repeats and --reads must be at least 1")
    logging.basicConfig(level=logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-reader-memory-"))
    try:
        store_path = args.store
        if store_path is None:
            require_shared(__file__)
            store_path = tmp / "store"
            run_build(pdb_dir=REAL / "structures", out=store_path, workers=args.workers, part_size=1,
                      progress=False)  # fmt: skip
        opened = open_store(store_path)
        ids = opened.ids
        parts = len(set(opened.entries.column("part").to_pylist()))
        del opened
        rng = random.Random(args.seed)
        sample = [rng.choice(ids) for _ in range(args.reads)]
        bench = Bench("reader_memory", store=str(store_path), entries=len(ids), parts=parts, reads=len(sample),
                      repeats=args.repeats)  # fmt: skip
        # a throwaway pass first: the first reader of a process also pays one-time setup (zarr's
        # event loop, codec registries) that the first measured row would otherwise hold
        warm = _reader(store_path, bounds[0])
        for eid in ids:
            warm.entry(eid)
        del warm
        memory = {bound: _held(store_path, ids, bound) for bound in bounds}
        cpu: dict[int, list[float]] = {b: [] for b in bounds}
        wall: dict[int, list[float]] = {b: [] for b in bounds}
        for k in range(args.repeats):
            for bound in bounds if k % 2 == 0 else bounds[::-1]:
                c, w = _timed(store_path, ids, sample, bound)
                cpu[bound].append(c)
                wall[bound].append(w)
        line = fit([(n, held) for held, n in memory.values()])
        slope, fixed = line if line is not None else (None, None)
        for bound in bounds:
            held, n_open = memory[bound]
            bench.add(max_open=bound, open_arrays=n_open, held_kib=held, kib_per_open_array=held / max(n_open, 1),
                      kib_per_array_fit=slope, fixed_kib_fit=fixed, cpu_ms_per_entry=statistics.median(cpu[bound]),
                      ms_per_entry=statistics.median(wall[bound]),
                      cpu_ms_rounds=" ".join(f"{x:.3g}" for x in cpu[bound]))  # fmt: skip
        first, first_cpu = bench.rows[0]["ms_per_entry"], bench.rows[0]["cpu_ms_per_entry"]
        for row in bench.rows:
            row["time_vs_first"] = row["ms_per_entry"] / first
            row["cpu_vs_first"] = row["cpu_ms_per_entry"] / first_cpu
        bench.finish(args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
