"""A path ending in ``/`` is a 404, not a 307 whose location is built from the request's Host header
(review R26d s44 #11: ``Host: evil.example`` on ``/v1/entries/`` answered ``location:
http://evil.example/v1/entries``). No route of the API ends in ``/``. Real uvicorn in a thread."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings


def test_a_trailing_slash_is_not_redirected_to_the_host_header(sample_store: Path) -> None:
    with ThreadedServer(Settings(store_path=sample_store)) as url:
        answer = get_raw(url, b"/v1/entries/")
    assert answer.startswith(b"HTTP/1.1 404"), answer[:300]
    assert b"evil.example" not in answer, answer[:300]


def get_raw(url: str, target: bytes) -> bytes:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
        answer = b""
        while data := s.recv(65536):
            answer += data
    return answer
