"""``--scheduler`` at an address that accepts connections but is not a Dask scheduler: the build
ends with one line naming the address, exit 3, nothing written (before: it hung inside
``distributed.Client()``, which waits without a bound for the other side's handshake)."""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES

#: ``featurecache ARGS`` with the scheduler's answer window (run.SCHEDULER_ANSWER_S) set to 3 s
SHORT_WINDOW = (
    "import sys; import featurecache.build.run as run; run.SCHEDULER_ANSWER_S = 3.0; "
    "from featurecache.cli import app; sys.argv[0] = 'featurecache'; app()"
)


@contextlib.contextmanager
def _listener(close_at_once: bool) -> Iterator[str]:
    """A TCP listener on 127.0.0.1 that accepts every connection and never sends a byte: it holds
    each connection open, or (``close_at_once``) closes it at once, unanswered."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn = server.accept()[0]
            except TimeoutError:
                continue
            if close_at_once:
                conn.close()
            else:
                held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for c in held:
            c.close()
        server.close()


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """Accepts every connection, holds it and never sends a byte."""
    with _listener(close_at_once=False) as address:
        yield address


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """``python -m http.server``'s server (a real HTTP server) on 127.0.0.1."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = lambda *a: Quiet(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_scheduler_address_that_is_not_dask_ends_the_build(
    tmp_path: Path, silent_listener: str, http_server: str
) -> None:
    # an HTTP request really is answered there (the server is up)
    host, port = http_server.removeprefix("tcp://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
        assert s.recv(12).startswith(b"HTTP/1.")
    builds = {}
    for name, address in (("silent", silent_listener), ("http", http_server)):
        out = tmp_path / f"store-{name}"
        args = ["build", "--pdb-dir", str(SAMPLES / "structures"), "--out", str(out), "--scheduler", address,
                "--no-progress"]  # fmt: skip
        # neither answers (the HTTP server waits for the end of a request that never comes): the
        # build waits out the whole answer window, so the CLI runs with a shorter one (the 20 s
        # default only made the test slow)
        command = [sys.executable, "-c", SHORT_WINDOW, *args]
        proc = subprocess.Popen(
            command, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        builds[name] = (address, out, proc)
    results = {}
    try:
        for name, (_, _, proc) in builds.items():
            # generous: proves only that it does not hang (before: still waiting when killed)
            results[name] = proc.communicate(timeout=120)
    finally:
        for _, _, proc in builds.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for name, (address, out, proc) in builds.items():
        stderr = results[name][1]
        assert proc.returncode == 3, (name, stderr[-3000:])
        assert "Traceback" not in stderr, stderr[-3000:]
        (line,) = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
        assert address in line and "did not answer as a Dask scheduler" in line, line
        assert not out.exists()


@pytest.fixture
def lookup_service(tmp_path: Path) -> Iterator[str]:
    """``featurecache serve`` (the project's lookup service, uvicorn) over a one-entry store, on 127.0.0.1."""
    from services.lookup.server import background_server
    from tests.conftest import build_store

    pdb = tmp_path / "served-pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    build_store(tmp_path / "served", pdb, workers=1)
    with background_server(tmp_path / "served") as url:
        yield "tcp://" + url.removeprefix("http://")


@pytest.fixture
def closing_listener() -> Iterator[str]:
    """Accepts every connection and closes it at once, unanswered."""
    with _listener(close_at_once=True) as address:
        yield address


def test_an_address_that_answers_in_another_protocol_is_named_for_what_it_did(
    tmp_path: Path, lookup_service: str, closing_listener: str
) -> None:
    """The lookup service answers Dask's first bytes at once, with an HTTP reply (its first 8 bytes,
    read as a frame length, asked for exabytes: the error line quoted a MemoryError and said the
    address had not answered "within 20 s"); a listener that closes each connection answers nothing.
    Each error line names the address and what it did, without the decoder's error text."""
    host, port = lookup_service.removeprefix("tcp://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:  # the service answers HTTP there
        s.sendall(b"GET /v1/health HTTP/1.0\r\n\r\n")
        assert s.recv(12).startswith(b"HTTP/1.")
    said = {}
    for name, address in (("http", lookup_service), ("closing", closing_listener)):
        out = tmp_path / f"store-{name}"
        args = ["build", "--pdb-dir", str(SAMPLES / "structures"), "--out", str(out), "--scheduler", address,
                "--no-progress"]  # fmt: skip
        # the default answer window (20 s): neither waits for it, so neither may mention it
        proc = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "250"},
                              timeout=120)  # fmt: skip
        assert proc.returncode == 3, (name, proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        assert address in line, line
        for noise in ("within", "20 s", "MemoryError", "allocate", "EiB", "Error:"):
            assert noise not in line.removeprefix("error:"), (noise, line)
        assert not out.exists()
        said[name] = line
    assert "answered, but not in Dask's protocol" in said["http"] and "HTTP server?" in said["http"], said
    assert "closed it without answering as a Dask scheduler" in said["closing"], said
