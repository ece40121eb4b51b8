"""Workers lost during a build are named in its summary (review R27c s45 #8).

A worker killed mid-build (kill -9, or its nanny restarting it at its memory limit) has its tasks
run again elsewhere and the build finishes; before, the summary said nothing of it ("time ... on 2
worker(s)", the count at the start), and only the scheduler's log told an operator. Now a row
"workers lost" names each worker the scheduler removed during the build, and why."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.build.test_cluster import (
    _start_scheduler,
    _start_worker,
    _stop,
    _structure_parts,
    _wait_for_workers,
)
from tests.build.test_r27c_other_code_mid_build import _worker_pids
from tests.conftest import REPO, interrupt_inputs

VENV_BIN = Path(sys.executable).parent


def test_a_worker_killed_mid_build_is_named_in_the_summary(tmp_path: Path) -> None:
    inputs = interrupt_inputs(tmp_path / "in")
    out = tmp_path / "store"
    address, sched = _start_scheduler(tmp_path)
    procs = [sched]
    try:
        procs.append(_start_worker(address, tmp_path / "w1"))
        procs.append(_start_worker(address, tmp_path / "w2"))
        _wait_for_workers(address, 2)
        victim, pid = sorted(_worker_pids(address).items())[0]
        build = subprocess.Popen(
            [str(VENV_BIN / "featurecache"), "build", "--pdb-dir", str(inputs), "--out", str(out),
             "--scheduler", address, "--part-size", "1", "--no-progress"],
            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="400"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            for _ in range(2400):  # until the first structure part is in place
                if _structure_parts(out / "parts") or build.poll() is not None:
                    break
                time.sleep(0.05)
            assert build.poll() is None, "the build ended before a worker could be killed"
            os.kill(pid, signal.SIGKILL)  # its nanny starts another process, at another address
            stdout, stderr = build.communicate(timeout=300)
        finally:
            if build.poll() is None:
                build.kill()
                build.wait()
    finally:
        _stop(procs)
    assert build.returncode in (0, 1), stderr[-3000:]
    row = next((line for line in stdout.splitlines() if "workers lost" in line), "")
    assert (
        f"1: {victim} (its connection closed: the process ended (killed, out of memory, or restarted" in row
    ), stdout[-3000:]
    assert "the tasks they held ran again" in row
