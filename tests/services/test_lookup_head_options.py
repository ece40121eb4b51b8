"""HEAD and OPTIONS, as probes send them (``curl -I``, uptime monitors; HAProxy's ``option httpchk``
sends OPTIONS): HEAD on a GET route answers as GET would, headers and all, without a body; OPTIONS
on ``/v1/health`` and ``/v1/ready`` answers 204 with the methods they take. Before: 405 on every
route (review R2 s24 #6). A real ``featurecache serve`` with a token, raw HTTP on a socket (so that a
body sent after a HEAD's headers would show)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from featurecache.store.reader import LocalStore
from services.lookup.server import background_server

TOKEN = "head-probe-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def url(sample_store: Path) -> Iterator[str]:
    with background_server(sample_store, workers=1, token=TOKEN) as served:
        yield served


def _raw(
    url: str, method: str, target: str, headers: dict[str, str] | None = None
) -> tuple[int, dict, bytes]:
    """Status, headers (lower-case names) and every byte after the headers until the server closes."""
    parts = urlsplit(url)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {parts.hostname}:{parts.port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), fields, rest


def _same_headers(got: dict, want: dict) -> None:
    for name in ("content-type", "content-length", "x-featurecache-index", "retry-after", "www-authenticate"):
        assert got.get(name) == want.get(name), (name, got, want)


def test_head_answers_like_get_without_a_body(url: str, reference: LocalStore) -> None:
    entry_id = sorted(reference.ids)[0]
    cases = [  # path, headers, the status GET gives (checked below, not assumed)
        ("/v1/health", {}, 200),  # public
        ("/v1/ready", AUTH, 200),
        ("/v1/ready", {}, 401),  # HEAD needs the token as GET does
        ("/v1/info", AUTH, 200),
        (f"/v1/entries/{entry_id}", AUTH, 200),  # an Arrow stream
        ("/v1/entries/no-such-entry", AUTH, 404),
    ]
    for path, headers, status in cases:
        get_status, get_headers, get_body = _raw(url, "GET", path, headers)
        assert get_status == status and get_body, (path, get_status, get_body[:200])
        head_status, head_headers, head_body = _raw(url, "HEAD", path, headers)
        assert head_status == status, (path, head_status, head_body[:200])  # before: 405
        assert head_body == b"", (path, head_body[:200])
        _same_headers(head_headers, get_headers)
    # httpx agrees (a client library, not only raw bytes)
    r = httpx.head(f"{url}/v1/health", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"


def test_options_on_the_probe_paths(url: str) -> None:
    for path, headers in (("/v1/health", {}), ("/v1/ready", AUTH)):
        status, fields, body = _raw(url, "OPTIONS", path, headers)
        assert status == 204, (path, status, body[:200])  # before: 405
        assert {m.strip() for m in fields["allow"].split(",")} == {"GET", "HEAD", "OPTIONS"}, fields
        assert body == b""
    assert _raw(url, "OPTIONS", "/v1/ready")[0] == 401  # the token is still needed off the public path


def test_other_methods_are_still_refused(url: str) -> None:
    for method, path in (("POST", "/v1/health"), ("DELETE", "/v1/ready"), ("PUT", "/v1/info")):
        status, fields, _ = _raw(url, method, path, {**AUTH, "content-length": "0"})
        assert status == 405, (method, path, status)
        assert "GET" in fields.get("allow", ""), (method, path, fields)
    # a POST-only route does not answer HEAD as a GET it does not have
    assert _raw(url, "HEAD", "/v1/entries:batch", AUTH)[0] == 405
