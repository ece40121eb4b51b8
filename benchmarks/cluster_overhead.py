"""The embedded cluster's Dask diagnostics: featurecache's settings
(``featurecache.build.run.EMBEDDED_DASK_CONFIG``: no worker profiler, the tick every 1 s, the system
monitor every 2 s) against Dask's defaults (profiler every 10 ms, tick every 20 ms, monitor every
500 ms), which a user gets back with the matching ``DASK_*`` variables (the build keeps a setting
the user made); that is how the "Dask" variant runs.

Two measurements, each in fresh processes, the variants alternating, ``--repeat`` times, medians:

* idle: an embedded cluster of ``--workers`` workers made as a build makes it
  (``run._make_client``), left idle for ``--idle-s`` seconds; CPU of the whole process tree per
  second idle (the cluster's start and shutdown are the same in both variants and are subtracted:
  each variant also runs with 0 s idle);
* build: ``featurecache build`` of ``--pdb-dir`` with ``--ccd`` on ``--workers`` workers into a new
  store; CPU of the process tree (reaped through a child subreaper) and wall time. Input failures
  (exit 1) are part of a corpus build.

Run: ``.venv/bin/python benchmarks/cluster_overhead.py [--workers 2] [--repeat 3] [--idle-s 20]
[--pdb-dir DIR] [--ccd DIR] [--out FILE]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REAL, SHARED, Bench, add_out_argument
from benchmarks.worker_start import _become_subreaper, run_tree

#: Dask's defaults of the settings featurecache changes, as the variables that ask for them
DASK_DEFAULTS = {
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "True",
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "20ms",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "500ms",
}
VARIANTS = ("featurecache", "dask")

#: an idle embedded cluster (argv: workers, seconds)
IDLE = """
import sys, time
from featurecache.build.run import _make_client, _shutdown
if __name__ == "__main__":
    client, cluster = _make_client(int(sys.argv[1]), None)
    time.sleep(float(sys.argv[2]))
    _shutdown(client, cluster)
"""


def _tree_cpu(cmd: list[str], variant: str) -> tuple[float, float]:
    """(CPU seconds of the command's process tree, its wall seconds) with ``variant``'s settings."""
    env = {k: v for k, v in os.environ.items() if k not in DASK_DEFAULTS}
    env["FEATURECACHE_DASHBOARD"] = "0"
    if variant == "dask":
        env.update(DASK_DEFAULTS)
    cpu, wall, proc = run_tree(cmd, env)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd[:4]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2, help="workers of the cluster (default 2)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per variant and measurement (default 3)")
    ap.add_argument(
        "--idle-s", type=float, default=20.0, help="seconds the idle cluster stays up (default 20)"
    )
    ap.add_argument("--pdb-dir", type=Path, default=REAL / "structures",
                    help="structures to build (default: the shared corpus, data/real/structures)")  # fmt: skip
    ap.add_argument(
        "--ccd", type=Path, default=SHARED / "data" / "ccd", help="CCD (default: the shared data/ccd)"
    )
    add_out_argument(ap, "cluster_overhead")
    args = ap.parse_args()
    if args.repeat < 1 or args.workers < 1 or args.idle_s <= 0:
        ap.error("--repeat and --workers must be at least 1, --idle-s above 0")
    for path in (args.pdb_dir, args.ccd):
        if not path.exists():
            ap.error(f"{path}: does not exist")
    _become_subreaper()
    bench = Bench("cluster_overhead", workers=args.workers, repeat=args.repeat, idle_s=args.idle_s,
                  pdb_dir=str(args.pdb_dir), ccd=str(args.ccd), dask_defaults=DASK_DEFAULTS)  # fmt: skip
    idle: dict[tuple[str, float], list[float]] = {}
    builds: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="cluster-overhead-") as tmp:
        for rep in range(args.repeat):
            for variant in VARIANTS if rep % 2 == 0 else VARIANTS[::-1]:
                for seconds in (0.0, args.idle_s):
                    cpu, _ = _tree_cpu([sys.executable, "-c", IDLE, str(args.workers), str(seconds)], variant)
                    idle.setdefault((variant, seconds), []).append(cpu)
                store = Path(tmp) / f"{variant}-{rep}"
                cmd = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(args.pdb_dir), "--ccd",
                       str(args.ccd), "--out", str(store), "--workers", str(args.workers), "--no-progress"]  # fmt: skip
                cpu, wall = _tree_cpu(cmd, variant)
                builds[variant].append((cpu, wall))
                print(f"rep {rep} {variant}: build cpu {cpu:.2f} s wall {wall:.2f} s", flush=True)
    for variant in VARIANTS:
        per_s = (
            statistics.median(idle[variant, args.idle_s]) - statistics.median(idle[variant, 0.0])
        ) / args.idle_s
        runs = builds[variant]
        bench.add(variant=variant, idle_cpu_per_s=per_s, idle_cores_pct=100 * per_s,
                  build_cpu_s=statistics.median(c for c, _ in runs), build_wall_s=statistics.median(w for _, w in runs),
                  build_runs=[{"cpu_s": round(c, 3), "wall_s": round(w, 3)} for c, w in runs])  # fmt: skip
        bench.params.setdefault("idle_runs_cpu_s", {})[variant] = {  # each run's tree CPU, by seconds idle
            str(seconds): [round(c, 3) for c in idle[variant, seconds]] for seconds in (0.0, args.idle_s)
        }
    fc, dk = bench.rows
    bench.add(variant="dask / featurecache", idle_cpu_per_s=dk["idle_cpu_per_s"] / max(fc["idle_cpu_per_s"], 1e-9),
              build_cpu_s=dk["build_cpu_s"] / fc["build_cpu_s"], build_wall_s=dk["build_wall_s"] / fc["build_wall_s"])  # fmt: skip
    bench.finish(args.out)


if __name__ == "__main__":
    main()
