"""``run_build(fork_server=True)`` does not take over a fork server the program uses (review R35b
s49 #6), and leaves the program's environment alone.

The build's fork server is multiprocessing's one server of the process: started with SIGINT
blocked, the build's modules preloaded and Dask's pre-spawn environment (one BLAS thread, a fixed
hash seed), every later ``forkserver`` process of the program was forked from it with all of that,
and the variables stayed in ``os.environ``. Now the build spawns its workers instead (one logged
line says why) where the process already runs a fork server that is not featurecache's, or where
``forkserver`` is the process's start method; where it does start one, the pre-spawn variables
are the server's only.

Fresh interpreters (the point is the process's state), real builds of a sample structure on one
worker; a preload module makes the worker write down its parent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SAMPLES

#: Dask's pre-spawn variables (``distributed.nanny.pre-spawn-environ``) and the Nanny's hash seed
PRE_SPAWN = {
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MALLOC_TRIM_THRESHOLD_",
    "PYTHONHASHSEED",
}

PROGRAM = r"""
import json, logging, multiprocessing as mp, os, signal, sys
from pathlib import Path

def child(q):
    q.put({"pid": os.getpid(), "ppid": os.getppid(),
           "sigint_blocked": signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []),
           "omp": os.environ.get("OMP_NUM_THREADS"), "preloaded": "featurecache.build.fork_preload" in sys.modules})

def forkserver_child():
    ctx = mp.get_context("forkserver")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    got = q.get(timeout=60)
    p.join()
    return got

if __name__ == "__main__":
    mode, pdb, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("featurecache.build.fork_server").addHandler(handler)
    logging.getLogger("featurecache.build.fork_server").setLevel(logging.INFO)
    result = {"driver": os.getpid()}
    if mode == "running":  # the program's own fork server, started before the build
        result["before"] = forkserver_child()
    elif mode == "method":  # the program chose forkserver as its start method
        mp.set_start_method("forkserver")
    environ = dict(os.environ)
    if mode == "start":  # the server's start alone (a Nanny sets the variables itself to spawn)
        from featurecache.build import fork_server
        from featurecache.signals import sigint_blocked
        with sigint_blocked():
            result["started"] = fork_server.start()
        fork_server.stop()
    else:
        from featurecache.build.run import run_build
        run_build(pdb_dir=pdb, out=out, workers=1, fork_server=True, progress=False, dashboard=False)
    result["lines"] = lines
    result["environ_added"] = sorted(k for k in os.environ if k not in environ and k != "__DASK_PARENT_PID")
    result["after"] = forkserver_child()
    print(json.dumps(result))
"""

WORKER_PRELOAD = r"""
import os
with open(os.environ["PROBE_OUT"], "a") as f:
    f.write(str(os.getppid()) + "\n")
"""


def _run(tmp_path: Path, mode: str) -> tuple[dict, list[int]]:  # type: ignore[type-arg]
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    (tmp_path / "preload").mkdir()
    (tmp_path / "preload" / "probe_worker.py").write_text(WORKER_PRELOAD)
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    probe = tmp_path / "workers.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path / "preload")]),
           "DASK_DISTRIBUTED__WORKER__PRELOAD": '["probe_worker"]', "PROBE_OUT": str(probe),
           "FEATURECACHE_DASHBOARD": "0"}  # fmt: skip
    for key in PRE_SPAWN - {"PYTHONHASHSEED"}:
        env.pop(key, None)  # the program's environment has none of Dask's pre-spawn variables
    r = subprocess.run([sys.executable, str(script), mode, str(pdb), str(tmp_path / "store")], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    parents = [int(x) for x in probe.read_text().split()] if probe.exists() else []
    return json.loads(r.stdout.strip().splitlines()[-1]), parents


def test_a_fork_server_the_program_runs_is_not_taken_over(tmp_path: Path) -> None:
    """The program started multiprocessing's fork server before the build: the build's worker is
    spawned (a child of the program), one line says why, and the program's forkserver processes
    afterwards are as before (SIGINT not blocked, no featurecache preloaded, no BLAS variable)."""
    result, parents = _run(tmp_path, "running")
    assert parents == [result["driver"]], (parents, result)
    assert len(result["lines"]) == 1 and "already runs multiprocessing's fork server" in result["lines"][0], (
        result
    )
    after, before = result["after"], result["before"]
    assert after["ppid"] == before["ppid"]  # the program's server, still
    assert (after["sigint_blocked"], after["preloaded"], after["omp"]) == (False, False, None), after


def test_forkserver_as_the_start_method_is_not_taken_over(tmp_path: Path) -> None:
    """The program set ``forkserver`` as its start method (as Python 3.14 does by default): the
    build's worker is spawned, one line says why, and the program's first forkserver process after
    the build comes from a server of the program's (SIGINT not blocked, nothing of the build's
    preloaded)."""
    result, parents = _run(tmp_path, "method")
    assert parents == [result["driver"]], (parents, result)
    assert len(result["lines"]) == 1 and "start method is forkserver" in result["lines"][0], result
    after = result["after"]
    # (its environment is the program's after the build: whether the spawned worker's pre-spawn
    # variables are left in it is review R35b s49 #4, run_build's)
    assert (after["sigint_blocked"], after["preloaded"]) == (False, False), after


def test_the_servers_environment_is_not_left_in_the_programs(tmp_path: Path) -> None:
    """Nothing in the program's way: the fork server starts with Dask's pre-spawn variables (its
    children: one BLAS thread, the build's modules preloaded, SIGINT blocked) and leaves none of
    them in the program's ``os.environ`` (a Nanny sets them itself before it spawns a worker)."""
    result, parents = _run(tmp_path, "start")
    assert result["started"] is True and result["lines"] == [] and parents == [], result
    after = result["after"]
    assert after["ppid"] != result["driver"], result
    assert after["omp"] == "1" and after["preloaded"] and after["sigint_blocked"], after
    assert not set(result["environ_added"]) & PRE_SPAWN, result["environ_added"]
