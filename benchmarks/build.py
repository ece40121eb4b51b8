"""Build throughput over the real structure corpus with 1 and 2 workers.

Prints entries/s, atoms/s, MB written/s, the per-stage time breakdown (parse / tokenize /
featurize / write, summed over workers) and store bytes vs input bytes.

    .venv/bin/python benchmarks/build.py [--ccd] [--msa] [--out FILE]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, SHARED, Bench, add_out_argument
from featurecache.build.run import run_build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ccd", action="store_true", help="also pass ../shared/data/ccd")
    ap.add_argument("--msa", action="store_true", help="also pass ../shared/data/real/msas")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    add_out_argument(ap, "build", "benchmarks/results/build.json, build_full.json with --ccd or --msa")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    name = "build_full" if (args.ccd or args.msa) else "build"
    bench = Bench(name, corpus=str(REAL / "structures"), ccd=args.ccd, msa=args.msa)
    for workers in args.workers:
        tmp = Path(tempfile.mkdtemp(prefix="fc-bench-build-"))
        try:
            s = run_build(
                pdb_dir=REAL / "structures", out=tmp / "store", workers=workers, part_size=4, progress=False,
                ccd=SHARED / "data" / "ccd" if args.ccd else None, msa_dir=REAL / "msas" if args.msa else None,
            )  # fmt: skip
            row = {
                "workers": workers, "entries": s.n_built, "failed": s.n_failed, "seconds": s.seconds,
                "entries_per_s": s.n_built / s.seconds, "atoms_per_s": s.n_atoms / s.seconds,
                "MB_written_per_s": s.bytes_written / 1e6 / s.seconds,
                "input_MB": s.input_bytes / 1e6, "store_MB": s.store_bytes / 1e6,
                "store_over_input": s.store_bytes / s.input_bytes,
            }  # fmt: skip
            total = sum(s.stage_seconds.values()) or 1.0
            for stage in ("read", "parse", "tokenize", "featurize", "write", "msa", "chem"):
                row[f"{stage}_s"] = s.stage_seconds.get(stage, 0.0)
                row[f"{stage}_pct"] = 100 * s.stage_seconds.get(stage, 0.0) / total
            bench.add(**row)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    bench.finish(args.out)


if __name__ == "__main__":
    main()
