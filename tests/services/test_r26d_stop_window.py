"""``docker stop`` with a stream in flight ends with serve's own exit, within Docker's and podman's
default 10 s, not in their SIGKILL (review R26d s44 #5: the graceful window was those very 10 s, so a
stop with a client that does not read its batch took 11 s and ended 137).

A real ``featurecache serve --workers 2``; 4 clients each post a 256-entry batch (about 30 MB) and
never read it, then serve gets SIGTERM: it must have exited 143 (SIGTERM's) well before 10 s.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from services.lookup.server import GRACEFUL_SHUTDOWN_S, free_port, wait_ready
from tests.conftest import REPO

#: docker's and podman's default seconds between a stop's SIGTERM and its SIGKILL
DOCKER_STOP_TIMEOUT_S = 10.0


def test_a_stop_with_unread_streams_ends_before_docker_kills(sample_store: Path) -> None:
    assert GRACEFUL_SHUTDOWN_S < DOCKER_STOP_TIMEOUT_S - 1  # room for the workers to stop and exit
    port = free_port()
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(port),
           "--workers", "2"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    held: list[socket.socket] = []
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=60)
        body = json.dumps({"ids": ["721p-assembly1"] * 256}).encode()
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(
                b"POST /v1/entries:batch HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert s.recv(1024).startswith(b"HTTP/1.1 200"), "the batch did not start"
            held.append(s)  # never read further: the stream stays in flight
        time.sleep(1.0)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for s in held:
            s.close()
    assert proc.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), proc.returncode
    assert took < DOCKER_STOP_TIMEOUT_S - 1, f"serve took {took:.1f} s to stop: docker would have killed it"
    assert took >= GRACEFUL_SHUTDOWN_S - 1, f"{took:.1f} s: the streams were not given their window"
