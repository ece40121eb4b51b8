"""A Ctrl-C while the embedded LocalCluster's workers start. They ignored SIGINT only once their
plugin ran (after seconds of imports): one that came meanwhile killed a worker with a
KeyboardInterrupt traceback ("Nanny failed to start": the build crashed, exit 1, with a
traceback). Now they start with SIGINT blocked and discard one that came meanwhile.

The interrupt is sent from inside a starting worker, by a worker preload module (what a worker
imports before it registers, before any plugin runs): deterministic, where a timed Ctrl-C from
outside is a race. Real CLI builds, started in a session of their own with SIGINT at its default
(as a terminal's foreground job), whatever this session has."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import featurecache
from tests.conftest import REPO, SAMPLES


@contextmanager
def _sigint(handler: Any) -> Iterator[None]:
    """This session's SIGINT handler meanwhile (a child started meanwhile inherits an ignored
    SIGINT as ignored, a handled one at its default)."""
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _build(tmp_path: Path, preload: str, workers: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``featurecache build`` of one sample structure, each worker importing a preload module whose
    body is ``preload`` first."""
    module = tmp_path / "interrupt_preload.py"
    module.write_text(f"import os, signal\n{preload}\n")
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    out = tmp_path / "store"
    cmd = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(pdb), "--out", str(out),
           "--workers", str(workers), "--no-progress"]  # fmt: skip
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__PRELOAD": repr([str(module)])}
    with _sigint(signal.SIG_IGN), _sigint(signal.default_int_handler):  # SIGINT at its default in the child
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=180)
        # the workers leave with the build: nothing of its process group is left after a few seconds
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("processes of the build's group outlived it by 20 s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), out


def _interrupted_line(out: Path) -> str:
    """The build's one line for an interrupt while its workers start: the cluster starts before
    the store is created, so there is none yet and nothing was written (6b1cd89)."""
    assert not out.exists(), sorted(p.name for p in out.iterdir())
    return f"interrupted before the build wrote {out}: nothing was written"


def test_sigint_to_a_starting_worker_is_discarded(tmp_path: Path) -> None:
    """The worker's own process gets SIGINT while it imports: it starts anyway and the build
    completes (before: the worker died with a KeyboardInterrupt traceback, the build crashed)."""
    r, out = _build(tmp_path, "os.kill(os.getpid(), signal.SIGINT)", workers=1)
    assert r.returncode == 0, r.stderr
    assert "KeyboardInterrupt" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert featurecache.open_store(out).ids == ["102m"]


def test_ctrl_c_while_the_workers_start(tmp_path: Path) -> None:
    """SIGINT to the whole process group (what a terminal's Ctrl-C sends) while the workers
    start: the build stops with its one line and exit 130, and no worker prints a traceback
    (before: a KeyboardInterrupt traceback and more from each worker)."""
    r, out = _build(tmp_path, "os.killpg(0, signal.SIGINT)", workers=2)
    assert r.returncode == 130, r.stderr
    assert _interrupted_line(out) in r.stderr.splitlines(), r.stderr
    assert "KeyboardInterrupt" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def _sigterm_the_build(marker: Path) -> str:
    """A worker preload that finds the build's process (the CLI, up its parents: a worker forked by
    the fork server is the server's child) and sends it SIGTERM, while the embedded cluster starts;
    the first worker to start only (``marker``)."""
    return f"""import contextlib, psutil
try:
    os.close(os.open({str(marker)!r}, os.O_CREAT | os.O_EXCL))
except FileExistsError:
    pass
else:
    for p in psutil.Process().parents():
        with contextlib.suppress(psutil.Error):
            if "featurecache.cli" in " ".join(p.cmdline()):
                os.kill(p.pid, signal.SIGTERM)
                break"""


def test_sigterm_to_the_build_while_its_workers_start(tmp_path: Path) -> None:
    """SIGTERM to the build's process alone (``kill PID``, ``timeout``) while its cluster starts:
    exit 143 with the one line, nothing else on stderr, nothing of the build left (before: the
    SIGTERM's exception left a half-started cluster that Dask's exit handler failed to close,
    with a traceback; with the fork server, workers it forked after the build had gone printed a
    FileNotFoundError traceback each)."""
    r, out = _build(tmp_path, _sigterm_the_build(tmp_path / "sent"), workers=2)
    assert r.returncode == 143, r.stderr
    assert r.stderr.strip().splitlines()[-1] == _interrupted_line(out), r.stderr
    assert "Traceback" not in r.stderr and "Error" not in r.stderr, r.stderr


def test_sigterm_to_the_process_group_while_the_workers_start(tmp_path: Path) -> None:
    """SIGTERM to the whole group while the workers start (the worker that sends it, the fork
    server and the build all get it): exit 143 with the one line and no traceback."""
    r, out = _build(tmp_path, "os.killpg(0, signal.SIGTERM)", workers=2)
    assert r.returncode == 143, r.stderr
    assert r.stderr.strip().splitlines()[-1] == _interrupted_line(out), r.stderr
    assert "Traceback" not in r.stderr and "Error" not in r.stderr, r.stderr
