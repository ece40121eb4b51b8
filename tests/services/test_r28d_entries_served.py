"""``entries_served_total`` counts the entries of a batch that were sent, not the batch asked for
(review R28d s46 #6: a client that read 100 kB of a 240-entry batch and closed counted 240)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from lookup_helpers import metric_samples, metric_sum

from featurecache.store.reader import LocalStore
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings

SERVED = "featurecache_lookup_entries_served_total"


@pytest.fixture(scope="module")
def server(sample_store: Path) -> Iterator[str]:
    with ThreadedServer(Settings(store_path=sample_store, auth_token=None)) as url:
        yield url


def _served(url: str) -> float:
    return metric_sum(metric_samples(httpx.get(f"{url}/metrics").text), SERVED)


def _settled(url: str, timeout: float = 20.0) -> float:
    """The counter once it has not moved for a second (the server notices the disconnect)."""
    last, since, deadline = _served(url), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = _served(url)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > 1.0:
            break
    return last


def _largest(reference: LocalStore) -> str:
    entries = reference.entries
    counts = entries.column("atom_count").to_pylist()
    return str(entries.column("id")[counts.index(max(counts))].as_py())


def test_a_batch_read_whole_counts_each_entry(server: str, reference: LocalStore) -> None:
    ids = list(reference.ids)[:3] * 2
    before = _served(server)
    r = httpx.post(f"{server}/v1/entries:batch", json={"ids": ids})
    assert r.status_code == 200
    assert _settled(server) - before == len(ids)


def test_a_batch_cut_short_counts_only_what_was_sent(server: str, reference: LocalStore) -> None:
    n = 256  # max_batch_entries' default: tens of MB, far more than the sockets' buffers hold
    body = json.dumps({"ids": [_largest(reference)] * n}).encode()
    parts = urlsplit(server)
    before = _settled(server)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(
            f"POST /v1/entries:batch HTTP/1.1\r\nHost: {parts.netloc}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        got = 0
        while got < 100_000:
            chunk = s.recv(65536)
            assert chunk
            got += len(chunk)
    counted = _settled(server) - before
    assert 1 <= counted < n // 2, counted
