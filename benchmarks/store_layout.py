"""Why the store keeps one record array per group instead of one array per field (DESIGN.md's
first layout): time to read one entry at random, both layouts written from the same real entries.

The store's structure parts are re-written with one zarr array per field (same chunk rows, shards
and zstd level), then the same random entries are read from both layouts: milliseconds per entry
and the slowdown of the per-field layout. Without --store the real structure corpus
(../shared/data/real/structures) is built into a temp dir first (no MSAs or CCD; removed after).

    .venv/bin/python benchmarks/store_layout.py [--store DIR] [--reads N] [--out FILE]
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, RESULTS_DIR, Bench, require_shared
from featurecache.build.run import run_build
from featurecache.store.layout import CHUNK_ROWS, ENTRY_GROUPS, GROUP_OFFSETS, ZSTD_LEVEL
from featurecache.store.reader import open_store


def _write_columnar(store_path: Path, out: Path) -> dict[tuple[str, str, str], zarr.Array]:
    """Re-write every structure part with one zarr array per field."""
    store = open_store(store_path)
    arrays: dict[tuple[str, str, str], zarr.Array] = {}
    for part in sorted(set(store.entries.column("part").to_pylist())):
        g = zarr.open_group(str(out / part), mode="w")
        for group, dt in ENTRY_GROUPS.items():
            raw = np.asarray(zarr.open_array(str(store_path / "parts" / part / group), mode="r")[...])
            rec = np.ascontiguousarray(raw).view(dt).reshape(raw.shape[0])
            for f in dt.names or ():
                col = np.ascontiguousarray(rec[f])
                n = max(1, len(col))
                chunk = (min(CHUNK_ROWS, n), *col.shape[1:])
                shard = (-(-n // chunk[0]) * chunk[0], *col.shape[1:])
                a = g.create_array(f"{group}/{f}", shape=col.shape, dtype=col.dtype, chunks=chunk, shards=shard,
                                   compressors=[ZstdCodec(level=ZSTD_LEVEL)])  # fmt: skip
                if len(col):
                    a[...] = col
                arrays[(part, group, f)] = zarr.open_array(str(out / part / group / f), mode="r")
    return arrays


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--store",
        type=Path,
        default=None,
        metavar="DIR",
        help="existing store to read (default: build the real structure corpus into a temp dir)",
    )
    ap.add_argument(
        "--workers", type=int, default=2, metavar="N", help="LocalCluster workers of that build (default 2)"
    )
    ap.add_argument(
        "--reads", type=int, default=300, metavar="N", help="random entries read per layout (default 300)"
    )
    ap.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the random entry choice (default 0)"
    )
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "store_layout.json", metavar="FILE",
                    help="results JSON (default benchmarks/results/store_layout.json)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.reads < 1 or args.workers < 1:
        ap.error("--reads and --workers must be at least 1")
    if args.store is None:
        require_shared(__file__)
    return args


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    logging.basicConfig(level=logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-layout-"))
    try:
        store_path = args.store
        if store_path is None:
            store_path = tmp / "store"
            run_build(pdb_dir=REAL / "structures", out=store_path, workers=args.workers, part_size=16,
                      progress=False)  # fmt: skip
        store = open_store(store_path)
        columnar = _write_columnar(store_path, tmp / "columnar")
        ids = store.ids
        rng = random.Random(args.seed)
        sample = [rng.choice(ids) for _ in range(args.reads)]
        rows = {eid: store.row_of(eid) for eid in ids}
        parts = store.entries.column("part").to_pylist()
        offsets = {g: (store.entries.column(s).to_numpy(), store.entries.column(c).to_numpy())
                   for g, (s, c) in GROUP_OFFSETS.items()}  # fmt: skip

        def read_columnar(eid: str) -> None:
            r = rows[eid]
            for group, dt in ENTRY_GROUPS.items():
                s, c = int(offsets[group][0][r]), int(offsets[group][1][r])
                if c:
                    for f in dt.names or ():
                        columnar[(parts[r], group, f)][s : s + c]

        def read_records(eid: str) -> None:
            store.entry(eid)

        bench = Bench("store_layout", entries=len(ids), reads=len(sample))
        for name, fn in (("records (adopted)", read_records), ("one array per field", read_columnar)):
            for eid in sample[:20]:
                fn(eid)  # warm: open arrays
            t0 = time.perf_counter()
            for eid in sample:
                fn(eid)
            dt = (time.perf_counter() - t0) / len(sample)
            arrays = (
                len(ENTRY_GROUPS)
                if name.startswith("records")
                else sum(len(d.names or ()) for d in ENTRY_GROUPS.values())
            )
            bench.add(layout=name, arrays_per_entry=arrays, ms_per_entry=dt * 1e3)
        bench.rows[1]["slowdown_vs_records"] = bench.rows[1]["ms_per_entry"] / bench.rows[0]["ms_per_entry"]
        bench.finish(args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
