"""Session 22: did the client get slower per sample? Run 101 (gpu_e2e) measured 16 % of the CUDA-graph
step's wall time waiting for data where run 94 measured 0.04 %, with the same step time.

Each variant is a (package directory, store) pair; each rep runs every variant in its own process
(``PYTHONPATH`` = the package; the working directory is a temp dir, so no checkout shadows it),
interleaved, and times ``--samples`` samples of ``FeatureDataset(store, crop_size=384, seed=0,
workers=1, pool="thread")`` after ``--warmup`` samples: the per-sample wall and CPU time of the client alone, in
one worker thread, the same stream positions for every variant.

    python benchmarks/dev/client_ab.py OUT.json NAME=PKG_DIR:STORE [NAME=PKG_DIR:STORE ...] [--reps 3]

Make a package directory with ``git archive <sha> featurecache services | tar -x -C DIR``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
from featurecache.client import FeatureDataset
store, n, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ds = FeatureDataset(store, crop_size=384, seed=0, workers=1, pool="thread", infinite=True)
it = iter(ds)
for _ in range(warm):
    next(it)
times, cpus = [], []
for _ in range(n):
    t0, c0 = time.perf_counter(), time.process_time()
    next(it)
    times.append(time.perf_counter() - t0)
    cpus.append(time.process_time() - c0)
print(json.dumps({"wall_ms": [t * 1e3 for t in times], "cpu_ms": [c * 1e3 for c in cpus]}))
"""


def run(pkg: str, store: str, n: int, warm: int) -> dict:
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(Path(store).resolve()), str(n), str(warm)],
            cwd=cwd, env={"PYTHONPATH": str(Path(pkg).resolve()), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("variants", nargs="+", help="NAME=PKG_DIR:STORE")
    ap.add_argument("--samples", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    variants = {}
    for v in args.variants:
        name, rest = v.split("=", 1)
        pkg, store = rest.split(":", 1)
        variants[name] = (pkg, store)
    results: dict[str, list[dict]] = {k: [] for k in variants}
    for rep in range(args.reps):
        order = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for name in order:
            r = run(*variants[name], args.samples, args.warmup)
            results[name].append(r)
            print(f"rep {rep} {name:12} median wall {statistics.median(r['wall_ms']):7.2f} ms  "
                  f"mean wall {statistics.fmean(r['wall_ms']):7.2f}  mean cpu {statistics.fmean(r['cpu_ms']):7.2f}",
                  flush=True)  # fmt: skip
    summary = {
        name: {
            "mean_wall_ms_per_rep": [statistics.fmean(r["wall_ms"]) for r in reps],
            "median_wall_ms_per_rep": [statistics.median(r["wall_ms"]) for r in reps],
            "mean_cpu_ms_per_rep": [statistics.fmean(r["cpu_ms"]) for r in reps],
            "package": variants[name][0],
            "store": variants[name][1],
        }
        for name, reps in results.items()
    }
    args.out.write_text(
        json.dumps({"samples": args.samples, "warmup": args.warmup, "variants": summary}, indent=1)
    )
    for name, s in summary.items():
        wall = " ".join(f"{x:.2f}" for x in s["mean_wall_ms_per_rep"])
        cpu = " ".join(f"{x:.2f}" for x in s["mean_cpu_ms_per_rep"])
        print(f"{name:12} mean wall ms per rep {wall}  cpu {cpu}")


if __name__ == "__main__":
    main()
