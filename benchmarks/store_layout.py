"""Why the store keeps one record array per group instead of one array per field (DESIGN.md's
first layout): time to read one entry at random, both layouts written from the same real entries.

The store's structure parts are re-written with one zarr array per field (same chunk rows, shards
and zstd level), then the same random entries are read from both layouts through the same reader:
``PartArrays.read_many`` (the store's direct shard reader), one call per entry, of the entry's rows
of the 4 record arrays or of the 32 per-field arrays, raw (no decoding into an ``Entry``). So the
ratio is the layout's alone; the reader's own gain over zarr is shard_reads.py's. (Before, the records
were read through ``store.entry()`` and the fields through zarr: two read paths.) Both readers keep
every array open (no reopening), the per-field bytes are checked equal to the records' fields first,
and a row says how many arrays of each layout went through zarr instead (0 when the layout is the
store's own).

``--repeats`` rounds, the layouts' order alternating round by round, each round ``--reads`` random
entries (the same ones) after 20 warm-up reads: per layout the median over rounds of CPU time
(``time.process_time``; the steadier number on a shared machine) and wall time per entry, the
rounds' spread, and the slowdown of the per-field layout in both. Without --store the real structure
corpus (../shared/data/real/structures) is built into a temp dir first (no MSAs or CCD; removed after).

    .venv/bin/python benchmarks/store_layout.py [--store DIR] [--reads N] [--repeats R] [--out FILE]
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, RESULTS_DIR, Bench, require_shared
from featurecache.build.run import run_build
from featurecache.store.layout import CHUNK_ROWS, ENTRY_GROUPS, GROUP_OFFSETS, PARTS_DIR, ZSTD_LEVEL
from featurecache.store.reader import open_store
from featurecache.store.root import PartArrays
from featurecache.store.shards import ShardReader

LAYOUTS = ("records (adopted)", "one array per field")
WARM_READS = 20


def _write_columnar(store_path: Path, out: Path) -> dict[tuple[str, str, str], zarr.Array]:
    """Re-write every structure part with one zarr array per field, as a store's ``parts/`` under
    ``out`` (``out/parts/<part>/<group>/<field>``), so that a :class:`PartArrays` reads it."""
    store = open_store(store_path)
    arrays: dict[tuple[str, str, str], zarr.Array] = {}
    for part in sorted(set(store.entries.column("part").to_pylist())):
        g = zarr.open_group(str(out / PARTS_DIR / part), mode="w")
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
                arrays[(part, group, f)] = zarr.open_array(str(out / PARTS_DIR / part / group / f), mode="r")
    store.close()
    return arrays


def _through_zarr(root: Path, names: list[tuple[str, str]]) -> int:
    """How many of the arrays ``(part, name)`` under ``root/parts`` the direct reader cannot read
    (``read_many`` sends those through zarr: another read path)."""
    n = 0
    for part, name in names:
        path = root / PARTS_DIR / part / name
        n += ShardReader.of(path, zarr.open_array(str(path), mode="r")) is None
    return n


def _check_same(
    eids: list[str],
    reads: Callable[[str, bool], list[tuple[str, str, tuple[slice, ...]]]],
    records: PartArrays,
    fields: PartArrays,
) -> None:
    """Each entry's per-field arrays hold its records' fields, byte for byte."""
    for eid in eids:
        raw = records.read_many(*reads(eid, False))
        cols = iter(fields.read_many(*reads(eid, True)))
        for (_, group, _), got in zip(reads(eid, False), raw, strict=True):
            dt = ENTRY_GROUPS[group]
            rec = np.ascontiguousarray(got).view(dt).reshape(got.shape[0])
            for f in dt.names or ():
                if not np.array_equal(np.ascontiguousarray(rec[f]), next(cols)):
                    raise SystemExit(f"store_layout.py: {eid} {group}/{f}: the layouts differ")


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
        "--reads",
        type=int,
        default=300,
        metavar="N",
        help="random entries read per layout a round (default 300)",
    )
    ap.add_argument("--repeats", type=int, default=5, metavar="R",
                    help="rounds, the layouts' order alternating (default 5)")  # fmt: skip
    ap.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the random entry choice (default 0)"
    )
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "store_layout.json", metavar="FILE",
                    help="results JSON (default benchmarks/results/store_layout.json)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.reads < 1 or args.workers < 1 or args.repeats < 1:
        ap.error("--reads, --repeats and --workers must be at least 1")
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
        store.close()
        # the same reader for both layouts, every array kept open: only the layout differs
        record_names = sorted({(p, g) for p in set(parts) for g in ENTRY_GROUPS})
        field_names = sorted({(p, f"{g}/{f}") for p, g, f in columnar})
        records = PartArrays(store_path, "record array", max_open=len(record_names) + 1)
        fields = PartArrays(
            tmp / "columnar", "per-field array", max_open=len(field_names) + 1, other_layouts=True
        )

        def reads(eid: str, per_field: bool) -> list[tuple[str, str, tuple[slice, ...]]]:
            r = rows[eid]
            out = []
            for group, dt in ENTRY_GROUPS.items():
                s, c = int(offsets[group][0][r]), int(offsets[group][1][r])
                if c:
                    names = [f"{group}/{f}" for f in dt.names or ()] if per_field else [group]
                    out += [(parts[r], name, (slice(s, s + c),)) for name in names]
            return out

        def read_records(eid: str) -> None:
            records.read_many(*reads(eid, per_field=False))

        def read_columnar(eid: str) -> None:
            fields.read_many(*reads(eid, per_field=True))

        _check_same(sample[:WARM_READS], reads, records, fields)
        read: dict[str, Callable[[str], None]] = dict(
            zip(LAYOUTS, (read_records, read_columnar), strict=True)
        )
        for name in LAYOUTS:
            for eid in sample[:WARM_READS]:
                read[name](eid)  # warm: open arrays
        cpu: dict[str, list[float]] = {name: [] for name in LAYOUTS}
        wall: dict[str, list[float]] = {name: [] for name in LAYOUTS}
        for k in range(args.repeats):
            for name in LAYOUTS if k % 2 == 0 else LAYOUTS[::-1]:
                fn = read[name]
                c0, t0 = time.process_time(), time.perf_counter()
                for eid in sample:
                    fn(eid)
                cpu[name].append((time.process_time() - c0) / len(sample) * 1e3)
                wall[name].append((time.perf_counter() - t0) / len(sample) * 1e3)
        bench = Bench("store_layout", entries=len(ids), reads=len(sample), repeats=args.repeats,
                      reader="PartArrays.read_many (direct shard reader), raw rows, both layouts")  # fmt: skip
        for name in LAYOUTS:
            per_field = not name.startswith("records")
            bench.add(layout=name,
                      arrays_per_entry=sum(len(d.names or ()) for d in ENTRY_GROUPS.values()) if per_field
                      else len(ENTRY_GROUPS),
                      cpu_ms_per_entry=statistics.median(cpu[name]), ms_per_entry=statistics.median(wall[name]),
                      cpu_ms_rounds=" ".join(f"{x:.3g}" for x in cpu[name]),
                      ms_rounds=" ".join(f"{x:.3g}" for x in wall[name]),
                      arrays_through_zarr=_through_zarr(tmp / "columnar", field_names) if per_field
                      else _through_zarr(store_path, record_names))  # fmt: skip
        first, second = bench.rows
        second["slowdown_vs_records_cpu"] = second["cpu_ms_per_entry"] / first["cpu_ms_per_entry"]
        second["slowdown_vs_records"] = second["ms_per_entry"] / first["ms_per_entry"]
        bench.finish(args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
