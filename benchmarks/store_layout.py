"""Why the store keeps one record array per group instead of one array per field (DESIGN.md's
first layout): time to read one entry at random, both layouts written from the same real entries.

    .venv/bin/python benchmarks/store_layout.py
"""

from __future__ import annotations

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

from benchmarks.harness import REAL, Bench
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
            rec = zarr.open_array(str(store_path / "parts" / part / group), mode="r")[...]
            rec = np.ascontiguousarray(rec).view(dt).reshape(rec.shape[0])
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


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-layout-"))
    try:
        run_build(pdb_dir=REAL / "structures", out=tmp / "store", workers=2, part_size=16, progress=False)
        store = open_store(tmp / "store")
        columnar = _write_columnar(tmp / "store", tmp / "columnar")
        ids = store.ids
        rng = random.Random(0)
        sample = [rng.choice(ids) for _ in range(300)]
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
        bench.finish()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
