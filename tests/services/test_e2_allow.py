"""A 405's ``allow`` header lists what the path really answers (s24 closing note: it named the
route's own methods only, without the HEAD the service answers on every GET route, nor OPTIONS on
``/v1/health`` and ``/v1/ready``).

A real ``featurecache serve`` on 127.0.0.1 over the sample store. Every path of the service (those
its own ``/openapi.json`` lists, path parameters filled with a real entry id, MSA key and table name,
plus the docs pages) gets every method; the methods that do not answer 405 are what ``allow`` must
say. That set is measured here, never taken from the service's code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from featurecache.store.reader import LocalStore
from services.lookup.payloads import msa_shapes
from services.lookup.server import background_server

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@pytest.fixture(scope="module")
def url(sample_store: Path) -> Iterator[str]:
    with background_server(sample_store, workers=1) as served:
        yield served


def _paths(url: str, reference: LocalStore) -> list[str]:
    spec = httpx.get(f"{url}/openapi.json", timeout=30).json()
    fill = {
        "{entry_id}": sorted(reference.ids)[0],
        "{key}": sorted(msa_shapes(reference))[0],
        "{name}": "entries",
    }
    paths = []
    for template in spec["paths"]:
        path = template
        for name, value in fill.items():
            path = path.replace(name, value)
        assert "{" not in path, f"a path parameter this test does not fill: {template}"
        paths.append(path)
    return [*paths, "/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"]


def _allow(header: str) -> set[str]:
    return {m.strip() for m in header.split(",") if m.strip()}


def test_allow_lists_every_method_the_path_answers(url: str, reference: LocalStore) -> None:
    paths = _paths(url, reference)
    assert {"/v1/health", "/v1/ready", "/v1/entries:batch"} <= set(paths), paths
    checked = 0
    with httpx.Client(base_url=url, timeout=30) as client:
        for path in paths:
            answered = set()
            statuses = {}
            for method in METHODS:
                r = client.request(method, path, headers={"content-length": "0"})
                statuses[method] = r.status_code
                if r.status_code != 405:
                    answered.add(method)
            assert "GET" in answered or "POST" in answered, (path, statuses)
            refused = [m for m in ("POST", "DELETE") if m not in answered]
            assert refused, (path, statuses)  # every path refuses DELETE at least
            for method in refused:  # a POST to each path (DELETE where POST is answered)
                r = client.request(method, path, headers={"content-length": "0"})
                assert r.status_code == 405, (path, method, r.status_code)
                assert _allow(r.headers.get("allow", "")) == answered, (path, method, r.headers, statuses)
                checked += 1
    assert checked >= len(paths)


def test_head_and_options_are_in_the_probe_paths_allow(url: str) -> None:
    """The two cases the note named, spelled out: GET routes answer HEAD, the probes OPTIONS."""
    r = httpx.post(f"{url}/v1/health", timeout=10)
    assert r.status_code == 405 and _allow(r.headers["allow"]) == {"GET", "HEAD", "OPTIONS"}, r.headers
    assert httpx.head(f"{url}/v1/health", timeout=10).status_code == 200
    assert httpx.options(f"{url}/v1/health", timeout=10).status_code == 204
    r = httpx.post(f"{url}/v1/info", timeout=10)
    assert r.status_code == 405 and _allow(r.headers["allow"]) == {"GET", "HEAD"}, r.headers
    # a POST-only route: HEAD is not answered there, and not listed
    r = httpx.put(f"{url}/v1/entries:batch", timeout=10)
    assert r.status_code == 405 and _allow(r.headers["allow"]) == {"POST"}, r.headers
    assert httpx.head(f"{url}/v1/entries:batch", timeout=10).status_code == 405
