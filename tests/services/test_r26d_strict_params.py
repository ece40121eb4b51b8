"""Indices are ASCII digits, JSON indices integers (review R26d s44 #7: ``rows=٣`` was read as row 3,
``rows=1_000`` as 1000, ``{"rows": [true]}`` and ``{"rows": ["1"]}`` as rows 1). Real uvicorn in a
thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from featurecache.store.reader import LocalStore
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings


@pytest.fixture(scope="module")
def url(sample_store: Path) -> Iterator[str]:
    with ThreadedServer(Settings(store_path=sample_store)) as url:
        yield url


@pytest.fixture(scope="module")
def msa_key(reference: LocalStore) -> str:
    key: str = reference.msas.column("key")[0].as_py()
    return key


@pytest.mark.parametrize("spec", ["\u0663", "1_000", "0:\u0665", "0,\u0661", "+1", "0x1", "1e2"])
def test_query_indices_are_ascii_digits(url: str, msa_key: str, spec: str) -> None:
    r = httpx.get(f"{url}/v1/msas/{msa_key}", params={"rows": spec})
    assert r.status_code == 422, (spec, r.status_code, r.text[:200])


def test_plain_indices_still_work(url: str, msa_key: str) -> None:
    for spec in ("3", "0:5", "0, 1,2", " 2 "):
        assert httpx.get(f"{url}/v1/msas/{msa_key}", params={"rows": spec}).status_code == 200, spec
    r = httpx.post(f"{url}/v1/msas/{msa_key}:slice", json={"rows": [0, 1]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("rows", [[True], ["1"], [1.0]])
def test_json_indices_are_integers(url: str, msa_key: str, rows: list[object]) -> None:
    r = httpx.post(f"{url}/v1/msas/{msa_key}:slice", json={"rows": rows})
    assert r.status_code == 422, (rows, r.status_code, r.text[:200])
