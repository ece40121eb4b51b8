"""``featurecache build`` started with SIGINT ignored (``cmd &`` from a script: the shell ignores it
for the job, and exec keeps it so) says so in one line, as ``train`` does; before it said nothing
and a SIGINT sent to it was silently without effect (review R1 s27 #4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import featurecache
from tests.conftest import REPO, SAMPLES

VENV_BIN = Path(sys.executable).parent
NOTE = (
    "SIGINT is ignored by this process (as it was started, e.g. in the background): it does not stop the build; "
    "SIGTERM does"
)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_build_with_sigint_ignored_says_so_and_is_not_stopped_by_it(tmp_path: Path) -> None:
    out = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="400")
    proc = subprocess.Popen(
        [str(VENV_BIN / "featurecache"), "build", "--pdb-dir", str(SAMPLES / "structures"), "--out", str(out),
         "--workers", "1", "--part-size", "1", "--no-progress"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_ignore_sigint,
    )  # fmt: skip
    lines: list[str] = []
    noted = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "SIGINT is ignored" in line:
                noted.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        noted.wait(timeout=120)
        sent = proc.poll() is None
        if sent:  # the note is true: the SIGINT does not stop the build
            proc.send_signal(signal.SIGINT)
            time.sleep(0.5)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    stderr = " ".join("".join(lines).split())
    assert NOTE in stderr, stderr[-3000:]
    assert "SIGTERM is ignored" not in stderr  # only the signal that is
    assert sent, "the build ended before a SIGINT could be sent"
    assert proc.returncode == 0, stderr[-3000:]
    assert "interrupted" not in stderr
    n_inputs = len([p for p in (SAMPLES / "structures").iterdir() if p.is_file()])
    assert len(featurecache.open_store(out).entries) == n_inputs


def test_build_with_sigint_default_has_no_note(tmp_path: Path) -> None:
    """The note is not printed where Ctrl-C does stop the build (the usual case)."""
    res = subprocess.run(
        [str(VENV_BIN / "featurecache"), "build", "--pdb-dir", str(SAMPLES / "structures"), "--out",
         str(tmp_path / "store"), "--workers", "1", "--no-progress"],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="400"), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "is ignored by this process" not in res.stderr


def test_the_note_names_the_other_signal_only_while_that_one_stops_the_process() -> None:
    """Review RF2 s27 #4: deploy/compose.yaml's build service turns a SIGINT into a SIGTERM for the
    build (its shell's background child ignores SIGINT), so the note says what does stop it."""
    from featurecache.signals import ignored_signal_note

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert ignored_signal_note(signal.SIGINT, "the build").endswith(
            "it does not stop the build; SIGTERM does"
        )
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        assert ignored_signal_note(signal.SIGINT, "the build").endswith("it does not stop the build")
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        assert ignored_signal_note(signal.SIGTERM, "the run").endswith(
            "it does not stop the run; SIGINT (Ctrl-C) does"
        )
    finally:
        for s, h in before.items():
            signal.signal(s, h)
