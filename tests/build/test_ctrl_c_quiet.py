"""Ctrl-C during a real build prints our one line and nothing of Dask's shutdown.

Before, the interrupted shutdown logged what distributed does to the cancelled tasks: each worker's
``distributed.worker.state_machine - WARNING - Async instruction for <Task cancelled ...>``, the
nanny's "Worker process still alive after 4.0 seconds, killing", asyncio's "Task exception was
never retrieved ... AllExit" tracebacks of the client's interrupted gather, tornado's callback
tracebacks. The interrupt is sent to the build's whole process group (what a terminal's Ctrl-C
does) at a deterministic moment: once the first part of a stage is committed, with that stage's
other tasks still running on the workers. Real CLI builds on the embedded LocalCluster, started in
a session of their own with SIGINT at its default (as a terminal's foreground job)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from featurecache.store.index import complete_parts
from featurecache.store.layout import COMPONENT_PART_PREFIX, STRUCTURE_PART_PREFIX
from tests.conftest import CCD, REPO, STRUCTURES

INTERRUPTED = "interrupted: every finished part of"
#: what Dask's, tornado's and asyncio's shutdown noise shows (a logger name of distributed's
#: format, a level of the CLI's log format, a traceback, the exceptions of cancelled tasks)
NOISE = (
    "Traceback",
    "CancelledError",
    "AllExit",
    "distributed.",
    " WARNING ",
    " ERROR ",
    "Exception in callback",
)
#: the build's own warning about the inputs, given before any interrupt (the test corpus holds
#: 1A8O.cif beside 1A8O.pdb: review R26b s44 #8), is not shutdown noise
OWN_INPUT_WARNING = "structure(s) given by several files"


def noise_lines(lines: list[str]) -> list[str]:
    """The lines of ``lines`` that show :data:`NOISE`, the build's own input warning left out."""
    return [line for line in lines if any(n in line for n in NOISE) and OWN_INPUT_WARNING not in line]


@contextmanager
def _sigint(handler: Any) -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _parts(out: Path, prefix: str) -> int:
    return sum(1 for p in complete_parts(out) if p.name.startswith(prefix))


@pytest.mark.parametrize(
    ("prefix", "ccd"),
    [(STRUCTURE_PART_PREFIX, False), (COMPONENT_PART_PREFIX, True)],
    ids=["first-structure-part", "first-component-part"],
)
def test_ctrl_c_prints_one_line_and_no_dask_noise(tmp_path: Path, prefix: str, ccd: bool) -> None:
    """SIGINT to the build's process group once its first structure part (one input per part:
    62 still to come) or its first component part (conformers still being computed) is committed:
    exit 130, the "interrupted" line last, no traceback and no log line of Dask's shutdown; the
    committed parts are kept."""
    out = tmp_path / "s"
    cmd = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(STRUCTURES), "--out", str(out),
           "--workers", "2", "--part-size", "1", "--no-progress"]  # fmt: skip
    if ccd:
        cmd += ["--ccd", str(CCD)]
    with _sigint(signal.SIG_IGN), _sigint(signal.default_int_handler):  # SIGINT at its default in the child
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while _parts(out, prefix) < 1:
            assert proc.poll() is None, (
                f"the build ended before its first {prefix} part (exit {proc.returncode})"
            )
            assert time.monotonic() < deadline, f"no {prefix} part committed within 180 s"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, f"the interrupt should stop the build (exit {proc.returncode}): {err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith(INTERRUPTED), err
    noise = noise_lines(lines)
    assert noise == [], err
    assert _parts(out, prefix) >= 1
