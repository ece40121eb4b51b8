"""MSA stage at scale: memory of encoding a deep a3m, and the time of a no-op build over many files.

* ``memory``: peak RSS (a fresh interpreter per case) and tracemalloc peak of ``build_msa`` for one
  deep a3m: by default real rows of 721p chain A (166 columns) made distinct and repeated to
  ``--rows`` rows (each row changed at two columns by its index); ``--a3m FILE`` uses a file instead.
  Cases: parse only; parse + build_msa as the build runs it (rows encoded in chunks of
  ``ENCODE_CHUNK_ROWS``); parse + build_msa with the whole MSA as one chunk (how memory grew with the
  input rows before: the int64 positions / cumulative sums over the whole text, all rows' codes).
* ``noop``: the real structures with the real MSA folder copied ``--copies`` times, built once with
  a LocalCluster of 2 workers, then rebuilt unchanged: with the MSA scan cache
  (``STORE/cache/msa_scan.arrow``) and with it deleted before the build (every file read and
  parsed, as every no-op build did before the cache).

    .venv/bin/python benchmarks/msa_scale.py [--rows N] [--a3m FILE] [--copies N] [--skip-memory]
                                             [--skip-noop] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, RESULTS_DIR, Bench, require_shared

MSAS = REAL / "msas"
DEEP = MSAS / "alphafold3-pytorch" / "721p-assembly1A_protein.a3m.gz"
ROWS = 200_000
COPIES = 15
_LETTERS = "ACDEFGHIKLMNPQRSTVWY"


def _deep_a3m(out: Path, n_rows: int) -> Path:
    """``n_rows`` distinct a3m rows made from the real rows of 721p A (insertions kept)."""
    text = gzip.decompress(DEEP.read_bytes()).decode()
    records = [r for r in text.split(">")[1:] if r.strip()]
    query_header, query_row = records[0].split("\n", 1)
    query = query_row.replace("\n", "")
    hits = [(h, "".join(body.split())) for h, body in (r.split("\n", 1) for r in records[1:])]
    length = len(query)
    with out.open("w") as f:
        f.write(f">{query_header}\n{query}\n")
        for i in range(n_rows - 1):
            header, row = hits[i % len(hits)]
            # change match columns (i mod L) and (i // L mod L) to letters given by i: distinct rows
            a, b = i % length, (i // length) % length
            chars, m = [], 0
            for c in row:
                if c.isupper() or c == "-":
                    if m == a:
                        c = _LETTERS[(i // (length * length)) % 20]
                    elif m == b:
                        c = _LETTERS[(i // 7) % 20]
                    m += 1
                chars.append(c)
            f.write(f">{header} {i}\n{''.join(chars)}\n")
    return out


def _child(mode: str, path: str) -> None:
    """Runs in a fresh interpreter: one memory case, prints a JSON line."""
    from featurecache.const import MolType
    from featurecache.featurize import msa as fmsa
    from featurecache.parse.a3m import parse_a3m

    t0 = time.perf_counter()
    tracemalloc.start()
    msa = parse_a3m(path)[0]
    parse_peak = tracemalloc.get_traced_memory()[1]
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    depth = 0
    if mode != "parse":
        # "whole": every row in one chunk (the rows cap and the cells cap both lifted)
        whole = mode == "whole"
        if whole:
            fmsa.ENCODE_CHUNK_ROWS = msa.depth
        cells = msa.depth * len(msa.query_sequence) if whole else None
        enc = fmsa.build_msa(msa.query_sequence, MolType.PROTEIN, [("x", msa)], 16384, chunk_cells=cells)
        depth = enc.depth
    build_peak = tracemalloc.get_traced_memory()[1] - held
    tracemalloc.stop()
    doc = {
        "rows": msa.depth, "columns": len(msa.query_sequence), "stored_rows": depth,
        "parse_peak_mib": parse_peak / 2**20, "build_peak_mib": build_peak / 2**20 if depth else 0.0,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "seconds": time.perf_counter() - t0,
    }  # fmt: skip
    sys.stdout.write(json.dumps(doc) + "\n")


def bench_memory(bench: Bench, a3m: Path) -> None:
    cases = {
        "parse": "parse only",
        "chunked": "parse + build_msa (chunks)",
        "whole": "parse + build_msa (one chunk)",
    }
    for mode, label in cases.items():
        out = subprocess.run(
            [sys.executable, __file__, "--_child", mode, str(a3m)], capture_output=True, text=True, check=True
        ).stdout
        doc = json.loads(out.strip().splitlines()[-1])
        bench.add(case="memory", what=label, input_mib=a3m.stat().st_size / 2**20, **doc)


def bench_noop(bench: Bench, tmp: Path, copies: int) -> None:
    from featurecache.build.msa_stage import SCAN_CACHE_DIR, SCAN_CACHE_FILE
    from featurecache.build.run import run_build

    msa = tmp / "msas"
    for k in range(copies):
        shutil.copytree(MSAS, msa / f"copy{k:02d}")  # copy2 keeps the files' old mtimes
    n_files = sum(1 for p in msa.rglob("*") if p.is_file())
    n_bytes = sum(p.stat().st_size for p in msa.rglob("*") if p.is_file())
    store = tmp / "store"

    def build(label: str) -> None:
        t0 = time.perf_counter()
        s = run_build(pdb_dir=REAL / "structures", out=store, msa_dir=msa, workers=2, progress=False)
        wall = time.perf_counter() - t0
        bench.add(
            case="noop", what=label, files=n_files, input_mib=n_bytes / 2**20, wall_s=wall,
            msa_stage_s=s.stage_seconds.get("msa", float("nan")),
            msas_written=s.stages["msa"]["MSAs written (from files / single sequence)"],
            msas_up_to_date=s.stages["msa"]["MSAs up to date"],
        )  # fmt: skip

    build("first build")
    build("no-op, scan cache")
    (store / SCAN_CACHE_DIR / SCAN_CACHE_FILE).unlink()
    build("no-op, no scan cache (every file read)")
    build("no-op, scan cache again")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=ROWS, metavar="N",
                    help=f"rows of the synthetic deep a3m (default {ROWS})")  # fmt: skip
    ap.add_argument("--a3m", type=Path, default=None, metavar="FILE",
                    help="measure this a3m file instead of the synthetic one")  # fmt: skip
    ap.add_argument("--copies", type=int, default=COPIES, metavar="N",
                    help=f"copies of the real MSA folder for the no-op build (default {COPIES})")  # fmt: skip
    ap.add_argument("--skip-memory", action="store_true", help="leave out the memory cases")
    ap.add_argument("--skip-noop", action="store_true", help="leave out the no-op build cases")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "msa_scale.json", metavar="FILE",
                    help="results JSON (default benchmarks/results/msa_scale.json)")  # fmt: skip
    ap.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rows < 2 or args.copies < 1:
        ap.error("--rows must be at least 2 and --copies at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    if args._child:
        _child(*args._child)
        return
    require_shared(__file__)
    logging.basicConfig(level=logging.WARNING)
    bench = Bench("msa_scale", rows=args.rows, a3m=str(args.a3m or ""), copies=args.copies)
    tmp = Path(tempfile.mkdtemp(prefix="fc-bench-msa-scale-"))
    try:
        if not args.skip_memory:
            a3m = args.a3m or _deep_a3m(tmp / "deep.a3m", args.rows)
            bench_memory(bench, a3m)
        if not args.skip_noop:
            bench_noop(bench, tmp, args.copies)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
