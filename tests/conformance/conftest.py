"""Every reader implementation — the local store reader and the HTTP lookup client over a real
``featurecache serve`` process on 127.0.0.1 — runs the same tests (test_reader_conformance.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from featurecache import open_store
from featurecache.store.base import FeatureReader
from featurecache.store.reader import LocalStore

IMPLEMENTATIONS = ("local", "http")


@pytest.fixture(scope="session")
def conformance_url(sample_store: Path) -> Iterator[str]:
    from services.lookup.server import background_server

    with background_server(sample_store) as url:
        yield url


@pytest.fixture(scope="session", params=IMPLEMENTATIONS)
def reader(request: pytest.FixtureRequest, sample_store: Path) -> Iterator[FeatureReader]:
    """The implementation under test."""
    impl: FeatureReader
    if request.param == "local":
        impl = open_store(sample_store)
    else:
        from featurecache.client.http import LookupClient

        impl = LookupClient(request.getfixturevalue("conformance_url"), retries=1)
    yield impl
    impl.close()


@pytest.fixture(scope="session")
def reference(sample_store: Path) -> LocalStore:
    """The store opened directly: what every implementation must agree with."""
    return open_store(sample_store)
