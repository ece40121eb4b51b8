"""Ctrl-C before a build has written its store (review R4 LOW 9): the line said "every finished part
of STORE is kept; run the same command again to resume" about a store that did not exist. It now
says nothing was written. Deterministic moment: the build waits for a Dask scheduler that accepts
the connection and never answers (a listening socket), before it takes the store's lock or
creates it; SIGINT is sent to its process group, as a terminal's Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, SAMPLES


def test_ctrl_c_before_the_store_exists_says_nothing_was_written(tmp_path: Path) -> None:
    out = tmp_path / "store"
    with socket.socket() as silent:  # a "scheduler" that never answers the handshake
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        args = ["build", "--pdb-dir", str(SAMPLES / "structures"), "--out", str(out), "--no-progress",
                "--scheduler", f"tcp://127.0.0.1:{port}"]  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-m", "featurecache.cli", *args], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
        held = []  # accepted connections stay open and unanswered
        try:
            deadline = time.monotonic() + 60
            while not held:  # until the build has connected: it then waits for an answer
                assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
                if _readable(silent):
                    held.append(silent.accept()[0])
            time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGINT)
            _stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            for conn in held:
                conn.close()
    assert proc.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == f"interrupted before the build wrote {out}: nothing was written"
    assert not out.exists()


def _readable(sock: socket.socket) -> bool:
    import select

    return bool(select.select([sock], [], [], 0.2)[0])
