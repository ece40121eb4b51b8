"""Ctrl-C (SIGINT to the terminal's whole process group) while the client's worker processes start."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from featurecache.client.loader import Done, ReadyFirst


class _CtrlCWhileStarting:
    """A job that sends SIGINT to the process unpickling it: in a spawned worker that is its
    start-up, before any of the pool's own code runs there (the seconds a Ctrl-C can land while the
    worker imports the job's modules); in this process, pickling it for a worker sends SIGINT here
    (a Ctrl-C while the pool starts its worker). Calling it returns the worker's pid."""

    def __init__(self) -> None:
        self.parent = os.getpid()

    def __call__(self, item: Any) -> int:
        return os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        os.kill(os.getpid(), signal.SIGINT)
        return {"parent": self.parent}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.parent = state["parent"]
        if os.getpid() != self.parent:
            os.kill(os.getpid(), signal.SIGINT)


def test_a_ctrl_c_while_worker_processes_start_kills_none_and_loses_no_sample(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Each spawned worker gets SIGINT while it starts: it lives on and computes its samples (it
    died with a KeyboardInterrupt traceback, each sample skipped as WorkerDied, each replacement
    alike), and the SIGINT this process got while starting each worker reaches its handler (held
    back while the worker starts, not lost)."""
    got: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    try:
        rf = ReadyFirst(_CtrlCWhileStarting(), pool="process", workers=2, window=0, mp_context="spawn")
        try:
            outs = list(rf.run((i, i) for i in range(6)))
        finally:
            rf.close()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert all(isinstance(o, Done) for o in outs), outs
    assert [o.seq for o in outs] == list(range(6))
    pids = {o.value for o in outs if isinstance(o, Done)}
    assert os.getpid() not in pids and len(pids) <= 2  # the two workers started, no replacement
    assert got == [signal.SIGINT, signal.SIGINT]  # one per worker started
    err = capfd.readouterr().err
    assert "KeyboardInterrupt" not in err and "Traceback" not in err, err
