"""The embedded cluster's worker start: workers forked by a fork server that imported the build's
modules once (what ``featurecache build`` does) against workers spawned as new interpreters that
each import them (what it did before, and what ``run_build`` still does by default).

Each measurement is one whole build in a fresh Python process, as a ``featurecache build`` run is:
``run_build(..., fork_server=True|False)`` over ``--pdb-dir`` (default: the sample structures in
the repo) into a new store. CPU is the user+system time of the process and everything it started
(the fork server, the workers, reaped through a child subreaper), wall is the process's run time.
The two variants alternate, ``--repeat`` times per worker count; medians. On a shared machine CPU
time is the steadier number.

Run: ``.venv/bin/python benchmarks/worker_start.py [--workers 1 2 4] [--repeat 5] [--pdb-dir DIR]
[--out FILE]``
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import REPO, Bench, add_out_argument

#: one build, in the process it runs in (argv: pdb dir, store, workers, fork server 0/1)
BUILD = """
import sys
from pathlib import Path
from featurecache.build.run import run_build
summary = run_build(pdb_dir=Path(sys.argv[1]), out=Path(sys.argv[2]), workers=int(sys.argv[3]),
                    fork_server=sys.argv[4] == "1", progress=False, dashboard=False)
sys.exit(1 if summary.n_failed else 0)
"""


def _become_subreaper() -> None:
    """Orphans of the build (the fork server outlives its parent by a moment, and the workers it
    forked are its children, not the build's) are re-parented here, so their CPU time is counted."""
    PR_SET_CHILD_SUBREAPER = 36
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def run_tree(
    cmd: list[str], env: dict[str, str] | None = None
) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Run ``cmd`` in the repo and wait for it and for every process it left re-parented here
    (:func:`_become_subreaper`): (CPU seconds of the whole tree, wall seconds of ``cmd``, its result)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    while True:  # the re-parented ones, once they end
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, proc


def _one_build(pdb_dir: Path, workers: int, fork_server: bool) -> tuple[float, float]:
    """(CPU seconds of the build's process tree, wall seconds of the build's process)."""
    with tempfile.TemporaryDirectory(prefix="worker-start-") as tmp:
        cpu, wall, proc = run_tree([sys.executable, "-c", BUILD, str(pdb_dir), str(Path(tmp) / "store"), str(workers),
                                    "1" if fork_server else "0"])  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"the build failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts (default 1 2)")
    ap.add_argument("--repeat", type=int, default=5, help="builds per variant and worker count (default 5)")
    ap.add_argument("--pdb-dir", type=Path, default=REPO / "samples" / "structures",
                    help="structures to build (default: the repo's samples/structures)")  # fmt: skip
    add_out_argument(ap, "worker_start")
    args = ap.parse_args()
    if args.repeat < 1 or min(args.workers) < 1:
        ap.error("--repeat and --workers must be at least 1")
    if not args.pdb_dir.is_dir():
        ap.error(f"--pdb-dir {args.pdb_dir}: not a directory")
    _become_subreaper()
    bench = Bench("worker_start", workers=args.workers, repeat=args.repeat, pdb_dir=str(args.pdb_dir),
                  inputs=len([p for p in args.pdb_dir.iterdir() if p.is_file()]))  # fmt: skip
    for workers in args.workers:
        _one_build(args.pdb_dir, workers, True)  # warm-up: the page cache, the pyc files
        runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for rep in range(args.repeat):
            for fork_server in (False, True) if rep % 2 == 0 else (True, False):
                runs[fork_server].append(_one_build(args.pdb_dir, workers, fork_server))
        spawned, forked = runs[False], runs[True]
        cpu_s, cpu_f = statistics.median(c for c, _ in spawned), statistics.median(c for c, _ in forked)
        wall_s, wall_f = statistics.median(w for _, w in spawned), statistics.median(w for _, w in forked)
        bench.add(workers=workers, spawned_cpu_s=cpu_s, forked_cpu_s=cpu_f, cpu_saved_s=cpu_s - cpu_f,
                  spawned_wall_s=wall_s, forked_wall_s=wall_f, wall_saved_s=wall_s - wall_f,
                  cpu_spawned_over_forked=cpu_s / cpu_f, wall_spawned_over_forked=wall_s / wall_f)  # fmt: skip
        bench.params.setdefault("runs", {})[str(workers)] = {
            "spawned": [{"cpu_s": round(c, 3), "wall_s": round(w, 3)} for c, w in spawned],
            "forked": [{"cpu_s": round(c, 3), "wall_s": round(w, 3)} for c, w in forked],
        }
    bench.finish(args.out)


if __name__ == "__main__":
    main()
