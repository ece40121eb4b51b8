"""Cost of a per-chunk checksum in the store's arrays: zstd alone (stores before session 21: bit
damage inside a chunk reads back as wrong values), zstd + zarr's crc32c codec, and zstd with its
own content checksum (adopted: ``layout.chunk_compressors``).

Every structure part of a store is re-written once per variant from the same records, with the
writer's own ``write_record_array`` (same chunk rows and shards; only the codecs differ), in one run
and interleaved over ``--rounds`` rounds: write seconds for all parts, the variant's bytes on disk,
and seconds to read every entry's four record slices through the reader's ``PartArrays`` (fresh,
so each round opens the arrays again). Medians over the rounds of wall and CPU time (this process,
all threads: less disturbed by other processes on a shared machine). Without --store the real structure
corpus (../shared/data/real/structures) is built into a temp dir first (no MSAs or CCD; removed
after).

    .venv/bin/python benchmarks/chunk_checksums.py [--store DIR] [--rounds N] [--out FILE]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from zarr.abc.codec import BytesBytesCodec
from zarr.codecs import Crc32cCodec, ZstdCodec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, RESULTS_DIR, Bench, require_shared, store_argument
from featurecache.build.run import run_build
from featurecache.store.layout import ENTRY_GROUPS, GROUP_OFFSETS, PARTS_DIR, ZSTD_LEVEL
from featurecache.store.reader import open_store
from featurecache.store.root import PartArrays, decode_records
from featurecache.store.writer import write_record_array

#: variant -> the inner chunks' bytes-to-bytes codecs
VARIANTS: dict[str, list[BytesBytesCodec]] = {
    "zstd, no chunk checksum (before)": [ZstdCodec(level=ZSTD_LEVEL)],
    "zstd + crc32c codec": [ZstdCodec(level=ZSTD_LEVEL), Crc32cCodec()],
    "zstd content checksum (adopted)": [ZstdCodec(level=ZSTD_LEVEL, checksum=True)],
}


def _records(store_path: Path, parts: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """part -> group -> its records (structured array), as the store holds them."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for part in parts:
        out[part] = {}
        for g, dt in ENTRY_GROUPS.items():
            raw = np.asarray(zarr.open_array(str(store_path / PARTS_DIR / part / g), mode="r")[...])
            out[part][g] = decode_records(raw, dt)
    return out


def _write(
    root: Path, records: dict[str, dict[str, np.ndarray]], codecs: list[BytesBytesCodec]
) -> tuple[float, float]:
    """Write every part's record arrays under ``root/parts``; (wall, CPU) seconds taken."""
    shutil.rmtree(root, ignore_errors=True)
    t0, c0 = time.perf_counter(), time.process_time()
    for part, groups in records.items():
        group = zarr.open_group(str(root / PARTS_DIR / part), mode="w")
        for g, rec in groups.items():
            write_record_array(group, g, rec, compressors=codecs)
    return time.perf_counter() - t0, time.process_time() - c0


def _read_all(root: Path, slices: list[tuple[str, list[tuple[str, int, int]]]]) -> tuple[float, float]:
    """Read every entry's record slices (one ``read_many`` per entry, as the reader does); (wall,
    CPU) seconds."""
    arrays = PartArrays(root, "bench array", data_files_required=True, other_layouts=True)
    t0, c0 = time.perf_counter(), time.process_time()
    for part, spans in slices:
        reads = [(part, g, (slice(s, s + c),)) for g, s, c in spans if c]
        if reads:
            arrays.read_many(*reads)
    return time.perf_counter() - t0, time.process_time() - c0


def _bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=store_argument, default=None, metavar="DIR",
                    help="existing store whose structure parts are re-written (default: build the real "
                         "structure corpus into a temp dir)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=20, metavar="N", help="rounds per variant (default 20)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "chunk_checksums.json", metavar="FILE",
                    help="results JSON (default benchmarks/results/chunk_checksums.json)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.store is None:
        require_shared(__file__)
    return args


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    logging.basicConfig(level=logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-checksums-"))
    try:
        # the clock (Bench starts it) covers the whole run: the corpus build and every round
        bench = Bench("chunk_checksums", store=str(args.store) if args.store else "real structure corpus (built into a temp dir)")  # fmt: skip
        store_path = args.store
        if store_path is None:
            store_path = tmp / "store"
            run_build(pdb_dir=REAL / "structures", out=store_path, workers=2, part_size=16, progress=False)
        store = open_store(store_path)
        entries = store.entries
        parts = sorted(set(entries.column("part").to_pylist()))
        records = _records(store_path, parts)
        cols = {
            g: (entries.column(s).to_pylist(), entries.column(c).to_pylist())
            for g, (s, c) in GROUP_OFFSETS.items()
        }
        slices = [
            (part, [(g, cols[g][0][i], cols[g][1][i]) for g in ENTRY_GROUPS])
            for i, part in enumerate(entries.column("part").to_pylist())
        ]
        n_rows = sum(len(r) for groups in records.values() for r in groups.values())
        raw_bytes = sum(r.nbytes for groups in records.values() for r in groups.values())
        bench.params.update(parts=len(parts), entries=entries.num_rows, record_rows=n_rows, raw_bytes=raw_bytes,
                            rounds=args.rounds)  # fmt: skip
        writes: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
        reads: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
        sizes: dict[str, int] = {}
        names = list(VARIANTS)
        for rnd in range(args.rounds):
            # rotate the order each round: no variant always runs first (cold caches) or last
            for name in names[rnd % len(names) :] + names[: rnd % len(names)]:
                root = tmp / f"v{names.index(name)}"
                writes[name].append(_write(root, records, VARIANTS[name]))
                reads[name].append(_read_all(root, slices))
                sizes[name] = _bytes(root / PARTS_DIR)

        def med(xs: list[tuple[float, float]], i: int) -> float:
            return statistics.median(x[i] for x in xs)

        base = names[0]
        for name in names:
            w, r = writes[name], reads[name]
            bench.add(
                variant=name,
                write_s=med(w, 0),
                write_cpu_s=med(w, 1),
                read_all_entries_s=med(r, 0),
                read_cpu_s=med(r, 1),
                ms_per_entry=med(r, 0) / max(1, entries.num_rows) * 1e3,
                store_bytes=sizes[name],
                write_cpu_vs_before=med(w, 1) / med(writes[base], 1),
                read_cpu_vs_before=med(r, 1) / med(reads[base], 1),
                bytes_vs_before=sizes[name] / sizes[base],
            )
        bench.finish(args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
