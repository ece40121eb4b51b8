"""The MSA block a crop needs: read from the store vs parsing the a3m text each time; and bytes.

A 384-token crop of one chain needs ``rows × 384`` residues + deletions. Cases:

* ``synthetic 16384 x 410``: real rows of two deep MSAs placed side by side (721p chain A, 166
  columns + 7pzb, 244 columns; rows recycled to 16,384) — no MSA in the corpus has ≥ 4,096 rows
  and ≥ 384 columns; the rows (and their insertions) are real, only their pairing is not.
* ``721p A`` (15,306 distinct rows of the file's 15,953 × 166 columns) and ``1k1a`` (3 files
  merged) from the corpus, as they are.

Reads: the first 4,096 rows × a contiguous 384-column window; 4,096 random rows × the same
window; 4,096 random rows × 384 scattered columns (a spatial crop); 1,024 random rows (the
client's default budget). "parse" = read the (gzipped) a3m, parse, encode, merge, then slice — what
a loader without the store does per sample. "flat" = the layout DESIGN.md first proposed (residues
and int16 deletions as flat row-major cells, 1-D chunks), written from the same MSA, to show why
the store uses 2-D residue chunks and sparse deletions.

Then the bytes of every MSA part of a real build of the corpus against the gzipped MSA files it
used (--skip-corpus leaves it out), and a sweep of residue chunk shapes on the synthetic MSA
(--skip-sweep).

    .venv/bin/python benchmarks/msa.py [--rows N] [--cols N] [--skip-corpus] [--skip-sweep] [--out FILE]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import logging
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, RESULTS_DIR, Bench, require_shared, timeit
from featurecache.const import MolType
from featurecache.featurize.msa import build_msa
from featurecache.parse.a3m import parse_a3m
from featurecache.store.index import read_table
from featurecache.store.layout import ZSTD_LEVEL
from featurecache.store.msa import MSAItem, MSAPartContents, MSAReader, write_msa_part
from featurecache.types import EncodedMSA, ParsedMSA

MSAS = REAL / "msas"
ROWS, COLS = 4096, 384  # defaults of --rows / --cols
FLAT_CHUNK = 1 << 16  # cells per 1-D chunk in the "flat" layout


def _synthetic_a3m(out: Path, depth: int = 16384) -> Path:
    """Rows of 721p A and 7pzb side by side (a3m text, insertions kept), gzipped like real inputs."""
    a = parse_a3m(MSAS / "alphafold3-pytorch/721p-assembly1A_protein.a3m.gz")[0]
    b = parse_a3m(MSAS / "Protenix/7pzb/msa/1/non_pairing.a3m.gz")[0]
    lines = []
    for i in range(depth):
        ra, rb = a.rows[i % a.depth], b.rows[(i * 7) % b.depth]  # distinct pairings, no duplicate rows
        lines.append(f">row{i}\n{ra}{rb}\n")
    path = out / "synthetic.a3m.gz"
    path.write_bytes(gzip.compress("".join(lines).encode()))
    return path


def _parse_and_encode(paths: list[Path]) -> EncodedMSA:
    parsed: list[tuple[str, ParsedMSA]] = [(str(p), parse_a3m(p)[0]) for p in paths]
    query = parsed[0][1].query_sequence
    return build_msa(query, MolType.PROTEIN, parsed)


def _write(root: Path, name: str, enc: EncodedMSA) -> MSAReader:
    (root / "parts").mkdir(parents=True, exist_ok=True)
    write_msa_part(root, name, MSAPartContents(items=[MSAItem(name, enc, "bench")]))
    return MSAReader(root, read_table(root / "parts" / name / "_index" / "msas.arrow"))


def _write_flat(root: Path, enc: EncodedMSA) -> tuple[zarr.Array, zarr.Array]:
    g = zarr.open_group(str(root / "flat"), mode="w")
    arrays = []
    for name, a in (("residues", enc.residues), ("deletions", enc.deletions)):
        flat = np.ascontiguousarray(a).reshape(-1)
        shard = -(-flat.size // FLAT_CHUNK) * FLAT_CHUNK
        arr = g.create_array(name, shape=flat.shape, dtype=flat.dtype, chunks=(FLAT_CHUNK,), shards=(shard,),
                             compressors=[ZstdCodec(level=ZSTD_LEVEL)])  # fmt: skip
        arr[...] = flat
        arrays.append(zarr.open_array(str(root / "flat" / name), mode="r"))
    return arrays[0], arrays[1]


def _flat_block(res: zarr.Array, dels: zarr.Array, length: int, rows: np.ndarray, cols: np.ndarray) -> tuple:
    r0, r1 = int(rows.min()), int(rows.max()) + 1
    a = np.asarray(res[r0 * length : r1 * length]).reshape(r1 - r0, length)
    d = np.asarray(dels[r0 * length : r1 * length]).reshape(r1 - r0, length)
    return a[np.ix_(rows - r0, cols)], d[np.ix_(rows - r0, cols)]


def _bind(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return functools.partial(fn, *args)


def _time(fn: Callable[[], Any], repeat: int) -> dict[str, float]:
    """Wall median/min (harness.timeit) plus the median CPU time of this process (all threads).

    The machine is shared: wall times include waiting for a core, CPU time does not.
    """
    wall = timeit(fn, repeat=repeat, warmup=1)
    cpu = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        cpu.append(time.process_time() - t0)
    return {**wall, "cpu_s": statistics.median(cpu)}


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _gzipped_bytes(paths: list[Path]) -> int:
    """Input bytes as gzip (files already gzipped count as they are; others are gzipped, level 6)."""
    total = 0
    for p in paths:
        raw = p.read_bytes()
        total += len(raw) if raw[:2] == b"\x1f\x8b" else len(gzip.compress(raw, compresslevel=6))
    return total


def _selections(
    depth: int, length: int, rng: np.random.Generator, rows: int = ROWS, cols: int = COLS
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    n_rows, n_cols = min(rows, depth), min(cols, length)
    c0 = (length - n_cols) // 2
    window = np.arange(c0, c0 + n_cols)
    scattered = np.sort(rng.choice(length, n_cols, replace=False))
    rand = np.sort(rng.choice(depth, n_rows, replace=False))
    rand_1k = np.sort(rng.choice(depth, min(1024, depth), replace=False))
    return [
        (f"first {n_rows} rows x {n_cols} window", np.arange(n_rows), window),
        (f"random {n_rows} rows x {n_cols} window", rand, window),
        (f"random {n_rows} rows x {n_cols} scattered", rand, scattered),
        (f"random {len(rand_1k)} rows x {n_cols} window", rand_1k, window),
    ]


def bench_case(
    bench: Bench,
    label: str,
    paths: list[Path],
    tmp: Path,
    rng: np.random.Generator,
    rows: int = ROWS,
    cols: int = COLS,
) -> None:
    enc = _parse_and_encode(paths)
    reader = _write(tmp / label.replace(" ", "_"), "m-000000", enc)
    flat_res, flat_dels = _write_flat(tmp / label.replace(" ", "_"), enc)
    store_bytes = _dir_bytes(tmp / label.replace(" ", "_") / "parts")
    flat_bytes = _dir_bytes(tmp / label.replace(" ", "_") / "flat")
    parse = _time(_bind(_parse_and_encode, paths), repeat=3)
    for what, r, c in _selections(enc.depth, enc.length, rng, rows, cols):
        blk = reader.msa("m-000000", r, c)
        assert np.array_equal(blk.residues, enc.residues[np.ix_(r, c)])
        assert np.array_equal(blk.deletions, enc.deletions[np.ix_(r, c)])
        store_t = _time(_bind(reader.msa, "m-000000", r, c), repeat=15)
        flat_t = _time(_bind(_flat_block, flat_res, flat_dels, enc.length, r, c), repeat=7)
        bench.add(
            msa=label, depth=enc.depth, length=enc.length, read=what,
            store_ms=store_t["median_s"] * 1e3, store_min_ms=store_t["min_s"] * 1e3,
            store_cpu_ms=store_t["cpu_s"] * 1e3, flat_ms=flat_t["median_s"] * 1e3,
            flat_cpu_ms=flat_t["cpu_s"] * 1e3, parse_ms=parse["median_s"] * 1e3,
            parse_cpu_ms=parse["cpu_s"] * 1e3, parse_over_store=parse["median_s"] / store_t["median_s"],
            parse_over_store_cpu=parse["cpu_s"] / store_t["cpu_s"],
        )  # fmt: skip
    gz = _gzipped_bytes(paths)
    bench.add(
        msa=label, depth=enc.depth, length=enc.length, read="bytes", store_bytes=store_bytes,
        flat_bytes=flat_bytes, gzip_input_bytes=gz, store_over_gzip=store_bytes / gz,
    )  # fmt: skip


SWEEP_CHUNKS = ((16384, 64), (16384, 32), (16384, 128), (4096, 128), (1024, 128), (1024, 1024))


def chunk_sweep(
    bench: Bench, tmp: Path, rng: np.random.Generator, rows: int = ROWS, cols: int = COLS
) -> None:
    """Residue chunk shapes for the synthetic MSA: read times per pattern and bytes on disk."""
    import featurecache.store.msa as store_msa

    enc = _parse_and_encode([_synthetic_a3m(tmp)])
    sels = _selections(enc.depth, enc.length, rng, rows, cols)
    default = store_msa.MSA_CHUNK
    try:
        for chunk in SWEEP_CHUNKS:
            store_msa.MSA_CHUNK = chunk
            d = tmp / f"sweep-{chunk[0]}x{chunk[1]}"
            reader = _write(d, "m-000000", enc)
            size = _dir_bytes(d / "parts")
            for what, r, c in sels:
                t = _time(_bind(reader.msa, "m-000000", r, c), repeat=11)
                bench.add(
                    msa="synthetic 16384 x 410", read=f"sweep {chunk[0]}x{chunk[1]}: {what}",
                    store_ms=t["median_s"] * 1e3, store_min_ms=t["min_s"] * 1e3, store_cpu_ms=t["cpu_s"] * 1e3,
                    store_bytes=size,
                )  # fmt: skip
    finally:
        store_msa.MSA_CHUNK = default


def corpus_bytes(bench: Bench, tmp: Path) -> None:
    """Every MSA part of a real build of the corpus vs the gzipped MSA files it used."""
    from featurecache.build.run import run_build
    from featurecache.store.reader import open_store

    out = tmp / "corpus"
    run_build(pdb_dir=REAL / "structures", out=out, msa_dir=MSAS, workers=2, part_size=16, progress=False)
    store = open_store(out)
    used = sorted({s.split("#")[0] for row in store.msas.column("sources").to_pylist() for s in row})
    parts = [p for p in (out / "parts").iterdir() if p.name.startswith("m-")]
    store_bytes = sum(_dir_bytes(p) for p in parts)
    gz = _gzipped_bytes([MSAS / u for u in used])
    bench.add(
        msa=f"corpus ({store.msas.num_rows} MSAs from {len(used)} files)", read="bytes",
        depth=int(sum(store.msas.column("depth").to_pylist())), store_bytes=store_bytes,
        gzip_input_bytes=gz, store_over_gzip=store_bytes / gz,
    )  # fmt: skip


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--rows",
        type=int,
        default=ROWS,
        metavar="N",
        help=f"rows of each read (the random ones too; default {ROWS})",
    )
    ap.add_argument(
        "--cols",
        type=int,
        default=COLS,
        metavar="N",
        help=f"columns of each read: the crop size (default {COLS})",
    )
    ap.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the random rows/columns (default 0)"
    )
    ap.add_argument("--skip-corpus", action="store_true", help="leave out the corpus build and its bytes")
    ap.add_argument("--skip-sweep", action="store_true", help="leave out the residue chunk-shape sweep")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "msa.json", metavar="FILE",
                    help="results JSON (default benchmarks/results/msa.json)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.rows < 1 or args.cols < 1:
        ap.error("--rows and --cols must be at least 1")
    require_shared(__file__)
    return args


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    logging.basicConfig(level=logging.WARNING)
    bench = Bench(
        "msa", rows=args.rows, cols=args.cols, chunk="store.msa.MSA_CHUNK", flat_chunk_cells=FLAT_CHUNK
    )
    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-msa-"))
    rng = np.random.default_rng(args.seed)
    rows, cols = args.rows, args.cols
    try:
        synthetic = _synthetic_a3m(tmp)
        bench_case(bench, "synthetic 16384 x 410", [synthetic], tmp, rng, rows, cols)
        bench_case(bench, "721p A", [MSAS / "alphafold3-pytorch/721p-assembly1A_protein.a3m.gz"], tmp, rng, rows,
                   cols)  # fmt: skip
        k1a = [MSAS / "Protenix/mmcif_msa/1/non_pairing.a3m", MSAS / "Protenix/mmcif_msa/1/pairing.a3m.gz",
               MSAS / "Protenix/mmcif_msa_initial/1.a3m.gz"]  # fmt: skip
        bench_case(bench, "1k1a (3 files)", k1a, tmp, rng, rows, cols)
        if not args.skip_corpus:
            corpus_bytes(bench, tmp)
        if not args.skip_sweep:
            chunk_sweep(bench, tmp, rng, rows, cols)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
