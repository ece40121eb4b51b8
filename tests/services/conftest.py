"""Fixtures of the lookup-service tests: a real ``featurecache serve`` (2 uvicorn workers) over the
committed sample store, and the store opened directly as the reference."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from featurecache import open_store
from featurecache.store.reader import LocalStore


@pytest.fixture(scope="session")
def lookup_url(sample_store: Path) -> Iterator[str]:
    from services.lookup.server import background_server

    with background_server(sample_store, workers=2) as url:
        yield url


@pytest.fixture(scope="session")
def reference(sample_store: Path) -> LocalStore:
    return open_store(sample_store)


@pytest.fixture
def store_copy(sample_store: Path, tmp_path: Path) -> Path:
    """A copy of the sample store (``tmp_path / "store"``) that a test may change, serve or write over."""
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    return store
