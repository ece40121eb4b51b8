"""Workers paused by Dask's memory manager (review R27c s45 #3).

A worker whose process memory is above ``distributed.worker.memory.pause`` (80 % of its
``--memory-limit``) starts no task until its memory falls. The reviewer's idle featurecache
workers sat above that line after the MSA stage: the build printed nothing for 10 minutes, and the
"no worker" warning never fired, as paused workers count as present. Now, after the same delay
(``FEATURECACHE_NO_WORKER_WARN_S``), the build warns naming each paused worker, its memory and
its limit, and what to do; the build keeps waiting, and goes on when a worker runs its tasks.

The paused worker here is a real one: ``--memory-limit 60MB`` without a nanny (no restart at
95 %), below what an idle worker process holds, so Dask pauses it as soon as it starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.build.test_cluster import DASK, _start_scheduler, _start_worker, _stop
from tests.conftest import REPO, SAMPLES

VENV_BIN = Path(sys.executable).parent


def _worker_status(address: str) -> dict[str, str]:
    """Worker address -> its status, as the scheduler has it ("running", "paused")."""
    from distributed import Client

    with Client(address, timeout="20s") as c:
        return {a: w["status"] for a, w in c.scheduler_info()["workers"].items()}


def test_a_build_held_by_paused_workers_says_so_and_goes_on_with_a_running_one(tmp_path: Path) -> None:
    address, sched = _start_scheduler(tmp_path)
    procs = [sched]
    err_path = tmp_path / "build.err"
    out = tmp_path / "store"
    try:
        (tmp_path / "w-small").mkdir()
        procs.append(subprocess.Popen(
            [DASK, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--memory-limit", "60MB"],
            stdout=(tmp_path / "w-small" / "worker.log").open("wb"), stderr=subprocess.STDOUT,
            cwd=tmp_path / "w-small", env=dict(os.environ, PYTHONPATH=str(REPO)),
        ))  # fmt: skip
        statuses: dict[str, str] = {}
        for _ in range(300):  # until it is paused (Client.wait_for_workers counts running ones only)
            statuses = _worker_status(address)
            if list(statuses.values()) == ["paused"]:
                break
            time.sleep(0.1)
        assert list(statuses.values()) == ["paused"], (tmp_path / "w-small" / "worker.log").read_text()[
            -2000:
        ]
        (small,) = statuses
        with err_path.open("w") as err:
            build = subprocess.Popen(
                [str(VENV_BIN / "featurecache"), "build", "--pdb-dir", str(SAMPLES / "structures"), "--out",
                 str(out), "--scheduler", address, "--no-progress"],
                cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="400",
                                       FEATURECACHE_NO_WORKER_WARN_S="2"),
                stdout=subprocess.DEVNULL, stderr=err, text=True,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and build.poll() is None:
                if "for paused workers" in err_path.read_text():
                    break
                time.sleep(0.2)
            assert build.poll() is None, err_path.read_text()[-3000:]
            procs.append(_start_worker(address, tmp_path / "w-good"))  # the build goes on with it
            build.wait(timeout=300)
        finally:
            if build.poll() is None:
                build.kill()
                build.wait()
    finally:
        _stop(procs)
    stderr = " ".join(err_path.read_text().split())
    assert re.search(
        rf"the build has waited \d+ s for paused workers of the Dask scheduler at {re.escape(address)}: worker "
        rf"{re.escape(small)} is paused at \d+ MiB of its 57 MiB memory limit \(Dask pauses a worker at "
        r"distributed.worker.memory.pause, 80 % of its limit, until its memory falls\); the build waits for them: "
        r"restart it with a larger --memory-limit \(dask worker --memory-limit\), or raise "
        r"distributed.worker.memory.pause",
        stderr,
    ), stderr[-3000:]
    back = f"the build's tasks run again on the Dask scheduler at {address}; the build goes on"
    assert back in stderr and stderr.index(back) > stderr.index("for paused workers"), stderr[-3000:]
    assert build.returncode == 0, stderr[-3000:]
