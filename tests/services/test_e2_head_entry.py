"""HEAD on an entry answers the GET's headers without reading the entry's arrays (s24 closing note:
it computed the whole body, fetching every array, for the middleware to drop it).

Two real servers over the sample store: ``featurecache serve`` (raw HTTP on a socket, so a body
sent after a HEAD's headers would show), where HEAD and GET are compared for every entry and
several array selections, and a ThreadedServer in this process, where an audit hook sees which
files a HEAD opens. The GET's content-length is checked against the bytes it actually sent."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from featurecache.store.reader import LocalStore
from services.lookup.payloads import estimate_entry_bytes
from services.lookup.server import ThreadedServer, background_server
from services.lookup.settings import Settings
from tests.services.lookup_helpers import opened_files

#: array selections (query strings): every array, none, a group, fields of two groups, an unknown one
SELECTIONS = ("", "?arrays=", "?arrays=atoms", "?arrays=atoms/coords&arrays=bonds", "?arrays=tokens/nope")


@pytest.fixture(scope="module")
def limit(reference: LocalStore) -> int:
    """A max_response_bytes that some full entries of the sample store pass and some do not (so that
    the 413 answer is compared too); whether each does is seen from the GET, not assumed."""
    sizes = sorted(estimate_entry_bytes(reference, [i], None) for i in reference.ids)
    return sizes[len(sizes) // 2]


@pytest.fixture(scope="module")
def url(sample_store: Path, limit: int) -> Iterator[str]:
    with background_server(
        sample_store, workers=1, env={"FEATURECACHE_MAX_RESPONSE_BYTES": str(limit)}
    ) as served:
        yield served


def _raw(url: str, method: str, target: str) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and every byte after the headers until the server closes."""
    parts = urlsplit(url)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {parts.hostname}:{parts.port}", "Connection: close"]
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        chunks = []
        while chunk := s.recv(1 << 16):
            chunks.append(chunk)
    head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), fields, rest


def test_head_headers_equal_the_get_headers(url: str, reference: LocalStore) -> None:
    seen: dict[int, int] = {}
    for entry_id in [*sorted(reference.ids), "no-such-entry"]:
        for query in SELECTIONS:
            target = f"/v1/entries/{entry_id}{query}"
            get_status, get_headers, get_body = _raw(url, "GET", target)
            assert get_body, target
            assert int(get_headers["content-length"]) == len(get_body), (target, get_headers)
            head_status, head_headers, head_body = _raw(url, "HEAD", target)
            assert head_status == get_status, (target, head_status, get_status)
            assert head_body == b"", (target, head_body[:200])
            for name in ("content-type", "content-length", "x-featurecache-index", "retry-after"):
                assert head_headers.get(name) == get_headers.get(name), (target, name, head_headers)
            assert "transfer-encoding" not in head_headers, (target, head_headers)
            seen[get_status] = seen.get(get_status, 0) + 1
    # the comparison covered entries served, over the limit, unknown and a bad selection
    assert {200, 404, 413, 422} <= set(seen), seen
    assert seen[200] >= len(reference.ids), seen  # every entry at least with `?arrays=` (none)


def test_head_reads_no_array(sample_store: Path, reference: LocalStore) -> None:
    """A HEAD opens no file of the store's parts; the GET of the same entry does (so the hook sees
    the reads a HEAD would make)."""
    parts = str(sample_store / "parts")
    assert Path(parts).is_dir()
    entry_id = max(reference.ids, key=lambda i: estimate_entry_bytes(reference, [i], None))
    import httpx

    with ThreadedServer(Settings(store_path=sample_store)) as url:
        assert httpx.get(f"{url}/v1/ready", timeout=30).status_code == 200
        with opened_files() as opened:
            head = httpx.head(f"{url}/v1/entries/{entry_id}", timeout=30)
        assert head.status_code == 200, head.text
        assert not [p for p in opened if p.startswith(parts)], opened
        with opened_files() as opened:
            get = httpx.get(f"{url}/v1/entries/{entry_id}", timeout=30)
        assert get.status_code == 200
        assert [p for p in opened if p.startswith(parts)], opened
        assert head.headers["content-length"] == get.headers["content-length"] == str(len(get.content))
