"""Fixtures of the deploy tests: the sample store opened directly, as the reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache import open_store
from featurecache.store.reader import LocalStore


@pytest.fixture(scope="session")
def reference(sample_store: Path) -> LocalStore:
    return open_store(sample_store)
