"""``featurecache build`` forks its embedded cluster's workers from multiprocessing's fork server,
which imports the build's modules once (:mod:`featurecache.build.fork_server`), instead of spawning
each worker as a new interpreter that imports them again (~1.1 s of CPU a worker).

What the workers must keep from the spawned ones: SIGINT blocked from their first instruction
(``worker_plugin``: a Ctrl-C while they start killed them with a traceback), in the thread that
runs tasks too, and Dask's pre-spawn environment, which the libraries read when they load (Python's
hash seed, one BLAS thread). Real CLI builds and real LocalClusters; the probes run in processes of
their own, so that no fork server is left in this test session."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

import featurecache
from tests.conftest import REPO, SAMPLES

FORK_SERVER = "multiprocessing.forkserver import main"


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def test_the_cli_builds_on_workers_forked_by_its_fork_server(tmp_path: Path) -> None:
    """During a two-worker CLI build, its one child process is the fork server and the Dask workers
    are the server's children (spawned workers were the build's own children, each a
    ``multiprocessing.spawn`` interpreter); the server ends with the build."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    out = tmp_path / "store"
    cmd = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(pdb), "--out", str(out),
           "--workers", "2", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    build = psutil.Process(proc.pid)
    servers: dict[int, set[int]] = {}  # fork server pid -> the worker pids seen under it
    spawned: set[str] = set()
    try:
        while proc.poll() is None:
            try:
                children = build.children()
            except psutil.NoSuchProcess:
                break
            for child in children:
                line = _cmdline(child)
                if FORK_SERVER in line:
                    with_workers = servers.setdefault(child.pid, set())
                    with contextlib.suppress(psutil.NoSuchProcess):
                        with_workers.update(w.pid for w in child.children())
                elif "multiprocessing.spawn" in line or "--multiprocessing-fork" in line:
                    spawned.add(line)
            time.sleep(0.02)
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "Warning" not in stderr and "Traceback" not in stderr, stderr  # the workers say nothing
    assert featurecache.open_store(out).ids == ["102m"]
    assert len(servers) == 1, f"fork servers seen under the build: {servers}"
    assert not spawned, f"spawned worker interpreters under the build: {spawned}"
    (server, worker_pids), = servers.items()  # fmt: skip
    assert len(worker_pids) >= 2, f"the fork server's children seen: {worker_pids}"
    deadline = time.monotonic() + 20
    while psutil.pid_exists(server) and psutil.Process(server).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the fork server outlived the build by 20 s"
        time.sleep(0.1)


PROBE = r"""
import json, os, signal, sys

def state():
    import sys as s
    return {"ppid": os.getppid(), "pid": os.getpid(),
            "sigint_blocked": signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []),
            "preloaded": sorted(m for m in ("rdkit", "gemmi", "zarr", "featurecache.build.tasks") if m in s.modules),
            "hash": hash("featurecache"), "digest_at_start": __import__("featurecache")._digest}

def task_thread_sigint_blocked():
    return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])

if __name__ == "__main__":
    import featurecache
    from featurecache.build import fork_server
    from featurecache.build.run import _make_client, _shutdown
    from featurecache.signals import sigint_blocked
    with sigint_blocked():
        started = fork_server.start()
    result = {"started": started, "driver": os.getpid(), "digest": featurecache.source_digest()}
    if started:
        import psutil
        result["servers"] = [p.pid for p in psutil.Process().children()
                             if "multiprocessing.forkserver import main" in " ".join(p.cmdline())]
        client, cluster = _make_client(2, None)
        try:
            result["workers"] = list(client.run(state).values())
            result["task_thread_sigint_blocked"] = [client.submit(task_thread_sigint_blocked, pure=False, workers=[w]).result()
                                                    for w in client.scheduler_info()["workers"]]
        finally:
            _shutdown(client, cluster)
            fork_server.stop()
    print(json.dumps(result))
"""


def _probe(tmp_path: Path, env: dict[str, str]) -> dict:  # type: ignore[type-arg]
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    r = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=180,
                       env={**os.environ, "PYTHONPATH": str(REPO), **env})  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_forked_workers_start_as_spawned_ones_did(tmp_path: Path) -> None:
    """Each worker is a child of the fork server (not of the driver), starts with the build's
    modules already imported, SIGINT blocked in its main thread and in its task thread, and the
    hash seed a spawned worker gets from Dask (``distributed.nanny.pre-spawn-environ`` plus the
    Nanny's PYTHONHASHSEED 6640 where none is set): hashes equal to a fresh interpreter's under
    that seed."""
    result = _probe(tmp_path, {})
    assert result["started"] is True
    assert len(result["servers"]) == 1, result
    workers = result["workers"]
    assert len(workers) == 2
    seed = os.environ.get("PYTHONHASHSEED")
    fresh = subprocess.run([sys.executable, "-c", "print(hash('featurecache'))"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": "6640" if seed in (None, "0") else seed}, check=True)  # fmt: skip
    for w in workers:
        assert w["ppid"] == result["servers"][0] != result["driver"], (w, result)
        assert w["sigint_blocked"] is True, w
        assert w["preloaded"] == ["featurecache.build.tasks", "gemmi", "rdkit", "zarr"], w
        assert w["hash"] == int(fresh.stdout), (w, fresh.stdout)
        # the server took the digest of the code it loaded: the worker inherited it, not computed it
        assert w["digest_at_start"] == result["digest"], (w, result)
    assert result["task_thread_sigint_blocked"] == [True, True]


def test_a_start_method_configured_for_dask_is_kept(tmp_path: Path) -> None:
    """Dask configured for a start method other than its default ``spawn`` (here ``fork``, through
    its environment variable): no fork server is started and the configuration stands."""
    result = _probe(tmp_path, {"DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD": "fork"})
    assert result == {"started": False, "driver": result["driver"], "digest": result["digest"]}


API_BUILDS = r"""
import json, os, sys
from pathlib import Path
import dask
from featurecache.build.run import run_build

if __name__ == "__main__":
    pdb, out, tasks_py, label = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    methods = []
    for i, fork in enumerate((False, True, True, True, True)):
        if i == 3:  # the environment changed between two builds of this process
            os.environ["PROBE_USER_VARIABLE"] = "set before build 3"
        if i == 4:  # the package edited
            tasks_py.write_text(tasks_py.read_text() + "\nMARKER_EDITED = True\n")
        label.write_text(str(i))
        run_build(pdb_dir=pdb, out=out / str(i), workers=1, fork_server=fork, progress=False, dashboard=False)
        methods.append(dask.config.get("distributed.worker.multiprocessing-method"))
    print(json.dumps({"driver": os.getpid(), "methods": methods}))
"""

WORKER_PRELOAD = r"""
import json, os
import featurecache, featurecache.build.tasks as tasks
with open(os.environ["PROBE_OUT"], "a") as f:
    f.write(json.dumps({"build": open(os.environ["PROBE_LABEL"]).read(), "ppid": os.getppid(),
                        "edited": hasattr(tasks, "MARKER_EDITED"), "digest": featurecache.source_digest(),
                        "variable": os.environ.get("PROBE_USER_VARIABLE")}) + "\n")
"""


def test_run_build_spawns_by_default_and_reuses_its_fork_server_only_for_the_same_code_and_environment(
    tmp_path: Path,
) -> None:
    """Five ``run_build`` calls in one Python process, on a copy of the package: the default spawns
    its worker (a child of this process); ``fork_server=True`` forks it from a server, which the
    next such build reuses while nothing changed; after a change of the environment, and after an
    edit of the package, the build spawns its worker, which sees the new variable and runs the
    edited code (the server's would have run the code and environment it loaded, the edited code
    under the old digest). Dask's start method is back to ``spawn`` after every build."""
    package = tmp_path / "pkg"
    shutil.copytree(REPO / "featurecache", package / "featurecache",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    (tmp_path / "preload").mkdir()
    (tmp_path / "preload" / "probe_worker.py").write_text(WORKER_PRELOAD)
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    script = tmp_path / "builds.py"
    script.write_text(API_BUILDS)
    probe, label = tmp_path / "workers.jsonl", tmp_path / "label.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package), str(tmp_path / "preload")]),
           "DASK_DISTRIBUTED__WORKER__PRELOAD": '["probe_worker"]', "PROBE_OUT": str(probe),
           "PROBE_LABEL": str(label), "FEATURECACHE_DASHBOARD": "0"}  # fmt: skip
    r = subprocess.run([sys.executable, str(script), str(pdb), str(tmp_path / "stores"),
                        str(package / "featurecache" / "build" / "tasks.py"), str(label)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    workers = {int(w["build"]): w for w in map(json.loads, probe.read_text().splitlines())}
    assert sorted(workers) == [0, 1, 2, 3, 4], workers
    driver = result["driver"]
    assert [w["ppid"] == driver for _, w in sorted(workers.items())] == [True, False, False, True, True], (
        workers
    )
    assert workers[1]["ppid"] == workers[2]["ppid"]  # the same server
    variable = "set before build 3"
    assert [w["variable"] for _, w in sorted(workers.items())] == [None, None, None, variable, variable]
    assert [w["edited"] for _, w in sorted(workers.items())] == [False, False, False, False, True]
    assert workers[4]["digest"] != workers[1]["digest"] == workers[2]["digest"] == workers[3]["digest"]
    assert result["methods"] == ["spawn"] * 5
