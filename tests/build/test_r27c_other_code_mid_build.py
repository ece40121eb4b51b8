"""A worker of another featurecache that joins mid-build (review R27c s45 #6).

The reviewer's worker ran an older commit whose ``build_structure_part`` had another signature:
each task failed with a TypeError before the task's version check ran, the driver took it for a
worker death, and 29 of 35 inputs were recorded as "the worker process died" failures. Now every
part task goes through ``tasks.run_part``, a signature that stays, which checks the worker before
it calls the part's function: exit 3 with the version-mismatch line naming the worker, and no
failure recorded (a TypeError, AttributeError or ImportError that a task still raises is read
the same way by the driver).

The older worker here is this checkout's package copied and aged as a later commit will see this
one: the same ``run_part``, a ``build_structure_part`` with another signature (it lacks the newest
keyword argument, which the driver before the fix passed)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.build.test_cluster import (
    _start_scheduler,
    _start_worker,
    _stop,
    _structure_parts,
    _wait_for_workers,
)
from tests.conftest import REPO, SAMPLES, interrupt_inputs

VENV_BIN = Path(sys.executable).parent


def _older_featurecache(dest: Path) -> Path:
    """A copy of this checkout's package as an older commit has it (see the module doc)."""
    shutil.copytree(
        REPO / "featurecache", dest / "featurecache", ignore=shutil.ignore_patterns("__pycache__")
    )
    tasks = dest / "featurecache" / "build" / "tasks.py"
    text = tasks.read_text()
    older = text.replace('ccd_config_hash: str = "", store_token: str = "",', 'ccd_config_hash: str = "",')
    assert older != text, "build_structure_part's signature changed: age the copy otherwise"
    tasks.write_text(older)
    return dest


def _worker_pid(address: str) -> tuple[str, int]:
    from distributed import Client

    with Client(address, timeout="20s") as c:
        ((worker, pid),) = c.run(os.getpid).items()
    return worker, pid


def test_a_worker_of_other_code_joining_mid_build_ends_it_with_exit_3_and_no_failure(tmp_path: Path) -> None:
    inputs = interrupt_inputs(tmp_path / "in")
    older = _older_featurecache(tmp_path / "older")
    out = tmp_path / "store"
    address, sched = _start_scheduler(tmp_path)
    procs = [sched]
    stopped: int | None = None
    try:
        procs.append(_start_worker(address, tmp_path / "w-good"))
        _wait_for_workers(address, 1)
        _, good_pid = _worker_pid(address)
        build = subprocess.Popen(
            [str(VENV_BIN / "featurecache"), "build", "--pdb-dir", str(inputs), "--out", str(out),
             "--scheduler", address, "--part-size", "1", "--no-progress"],
            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="400"),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            for _ in range(2400):  # until the first structure part is in place
                if _structure_parts(out / "parts") or build.poll() is not None:
                    break
                time.sleep(0.05)
            assert build.poll() is None, "the build ended before the older worker could join"
            # the good worker stopped: the queued parts go to the worker that joins now
            os.kill(good_pid, signal.SIGSTOP)
            stopped = good_pid
            procs.append(
                _start_worker(address, tmp_path / "w-older", dict(os.environ, PYTHONPATH=str(older)))
            )
            with contextlib.suppress(subprocess.TimeoutExpired):  # before the fix the good
                build.wait(timeout=60)  # worker's held parts wait for it: it goes on then
            os.kill(good_pid, signal.SIGCONT)
            stopped = None
            _, stderr = build.communicate(timeout=300)
        finally:
            if build.poll() is None:
                build.kill()
                build.wait()
        older_address = next(a for a, pid in _worker_pids(address).items() if pid != good_pid)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        _stop(procs)
    line = " ".join(stderr.split())
    assert build.returncode == 3, line[-3000:]
    assert f"refusing to write: worker {older_address} runs featurecache source" in line, line[-3000:]
    assert f"its featurecache source at {older / 'featurecache'} differs from the driver's" in line
    assert "install the driver's featurecache on every worker" in line
    assert "the worker process died" not in line and "Traceback" not in stderr
    # no input recorded as failed: the rerun on a good cluster builds them
    from featurecache.store.index import rebuild_index

    assert rebuild_index(out, finished=False)["failures"].num_rows == 0


def _worker_pids(address: str) -> dict[str, int]:
    from distributed import Client

    with Client(address, timeout="20s") as c:
        return dict(c.run(os.getpid))


def test_a_part_task_that_a_worker_cannot_call_is_other_code_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's side alone: a part task that fails with an AttributeError (here: a function
    its worker does not have) ends the build with exit 3 and records no input as failed (before:
    each input a "the worker process died" failure, retried one by one)."""
    from featurecache.build import run
    from featurecache.errors import StoreError
    from featurecache.store.index import rebuild_index
    from tests.clusters import shared_scheduler

    monkeypatch.setattr(
        run, "STRUCTURE_TASK", "featurecache.build.tasks:build_structure_part_of_a_later_commit"
    )
    out = tmp_path / "store"
    with pytest.raises(
        StoreError, match=r"refusing to go on: a worker ran other code .*failed with AttributeError"
    ):
        run.run_build(pdb_dir=SAMPLES / "structures", out=out, scheduler=shared_scheduler(1), progress=False)
    assert rebuild_index(out, finished=False)["failures"].num_rows == 0
