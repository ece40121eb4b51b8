"""The lookup image's HEALTHCHECK (``python3 -m services.lookup.healthcheck``) checks the address the
server was started with, read from its command line: a real ``featurecache serve`` on a port other
than 8000 is healthy, a process whose port answers nothing is not."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from services.lookup.healthcheck import serve_address
from services.lookup.server import free_port, wait_ready


@pytest.mark.parametrize(
    "argv, address",
    [
        (["featurecache", "serve", "/store"], ("127.0.0.1", 8000)),
        (["featurecache", "serve", "/store", "--host", "0.0.0.0", "--port", "9000"], ("127.0.0.1", 9000)),
        (["featurecache", "serve", "/store", "--port=9100", "--host=10.1.2.3"], ("10.1.2.3", 9100)),
        (["featurecache", "serve", "/store", "--port", "9000", "--port", "9200"], ("127.0.0.1", 9200)),
        (["featurecache", "serve", "/store", "--host", "::"], ("::1", 8000)),
        (["/sbin/docker-init", "--", "featurecache", "serve", "/store", "--port", "7000"], ("127.0.0.1", 7000)),
    ],
)  # fmt: skip
def test_serve_address(argv: Sequence[str], address: tuple[str, int]) -> None:
    assert serve_address(argv) == address


def _healthcheck(pid: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.lookup.healthcheck", str(pid)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_healthcheck_against_a_real_server(sample_store: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(port)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ)
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=60, path="/v1/health")
        assert port != 8000
        ok = _healthcheck(server.pid)
        assert ok.returncode == 0, ok.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_healthcheck_fails_when_nothing_answers_on_the_served_port() -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "--port", str(free_port())]
    idle = subprocess.Popen(argv)
    try:
        down = _healthcheck(idle.pid)
        assert down.returncode == 1 and "unhealthy" in down.stderr
    finally:
        idle.terminate()
        idle.wait(timeout=30)
    assert _healthcheck(idle.pid).returncode == 1  # no such process
