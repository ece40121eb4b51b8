"""A request's target and header lines are capped before the token is checked (review R26d s44 #2):
one connection that sent ``GET /v1/entries/`` and then 400 MiB without a newline grew the server
by 400 MiB. Past ``FEATURECACHE_MAX_URL_BYTES`` the client gets 414, past
``FEATURECACHE_MAX_HEADER_BYTES`` 431, and the connection is closed; a request under the caps is
answered as before. The server is a real uvicorn (in a thread; the last test through ``featurecache
serve --workers 2``, whose workers get the caps from the environment)."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from services.lookup.server import ThreadedServer, background_server
from services.lookup.settings import Settings

TOKEN = "r26d-token"
FLOOD = 64 * 2**20  # what a test sends at most after the head's start (more than the sockets buffer)
CHUNK = 64 * 2**10


@pytest.fixture(scope="module")
def server(sample_store: Path) -> Iterator[str]:
    """Default caps (64 KiB each), with a token: the caps apply before it is checked."""
    with ThreadedServer(Settings(store_path=sample_store, auth_token=TOKEN)) as url:
        yield url


def flood(url: str, start: bytes, filler: bytes = b"a") -> tuple[int, bytes]:
    """Send ``start``, then ``filler`` in 64 KiB writes (up to :data:`FLOOD` bytes) until the server
    answers (the sockets' buffers hold megabytes: an answer says the server did not wait for the end
    of the head); returns the status and the answer's bytes."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(start)
        sent = 0
        chunk = filler * (CHUNK // len(filler))
        while sent < FLOOD:
            readable, _, _ = select.select([s], [], [], 0)
            if readable:
                break
            try:
                s.sendall(chunk)
            except OSError:  # closed by the server: its answer is read below
                break
            sent += len(chunk)
        else:
            readable, _, _ = select.select([s], [], [], 5)
            assert readable, f"no answer after {sent} bytes of the head: the server buffers all of it"
        answer = b""
        try:
            while data := s.recv(65536):
                answer += data
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split()[1]), answer


def test_a_long_target_is_refused_with_414(server: str) -> None:
    status, answer = flood(server, b"GET /v1/entries/")
    assert status == 414, answer[:300]
    assert (
        b"connection: close" in answer.lower()
        and b"request target (path and query) over 65536 bytes" in answer
    ), answer
    assert httpx.get(f"{server}/v1/health").status_code == 200


def test_long_header_lines_are_refused_with_431(server: str) -> None:
    # one header line that never ends (the parser keeps it inside itself, unseen by any callback)
    status, answer = flood(server, b"GET /v1/info HTTP/1.1\r\nHost: x\r\nX-Pad: ")
    assert status == 431, answer[:300]
    # many short ones
    status, answer = flood(server, b"GET /v1/info HTTP/1.1\r\nHost: x\r\n", b"X-A: b\r\n")
    assert status == 431, answer[:300]
    assert httpx.get(f"{server}/v1/health").status_code == 200


def test_requests_under_the_caps_are_answered(server: str) -> None:
    auth = {"authorization": f"Bearer {TOKEN}"}
    long_query = "x=" + "a" * 60_000
    assert httpx.get(f"{server}/v1/health?{long_query}").status_code == 200
    headers = {**auth, **{f"x-pad-{i}": "b" * 500 for i in range(100)}}  # about 52 KiB
    r = httpx.get(f"{server}/v1/ready", headers=headers)
    assert r.status_code == 200, r.text
    # keep-alive: the count starts again for every request of a connection
    with httpx.Client(headers=headers) as client:
        for _ in range(5):
            assert client.get(f"{server}/v1/ready?{long_query}").status_code == 200


def test_the_caps_are_settings_of_serve(sample_store: Path) -> None:
    env = {"FEATURECACHE_MAX_URL_BYTES": "1000", "FEATURECACHE_MAX_HEADER_BYTES": "2000"}
    with background_server(sample_store, workers=2, env=env) as url:
        assert httpx.get(f"{url}/v1/health?x={'a' * 900}").status_code == 200
        assert httpx.get(f"{url}/v1/health?x={'a' * 1100}").status_code == 414
        assert httpx.get(f"{url}/v1/health", headers={"x-pad": "b" * 1500}).status_code == 200
        assert httpx.get(f"{url}/v1/health", headers={"x-pad": "b" * 2500}).status_code == 431
