"""Opening a store path that is not a store says what is there instead: nothing, a file, or a
directory without the store's ``zarr.json`` (before: "not a featurecache store (no zarr.json)" for
all three, which sends a user with a typo in the path looking for a missing file inside it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from featurecache.client import FeatureDataset
from featurecache.errors import StoreError
from featurecache.store.reader import LocalStore

OPENERS: list[Callable[[Path], Any]] = [LocalStore, FeatureDataset]


@pytest.mark.parametrize("open_", OPENERS, ids=["LocalStore", "FeatureDataset"])
def test_a_path_that_does_not_exist(tmp_path: Path, open_: Callable[[Path], Any]) -> None:
    path = tmp_path / "nonexistent"
    with pytest.raises(StoreError) as err:
        open_(path)
    assert str(err.value).startswith(f"{path} does not exist"), err.value
    assert "zarr.json" not in str(err.value)


@pytest.mark.parametrize("open_", OPENERS, ids=["LocalStore", "FeatureDataset"])
def test_a_file(tmp_path: Path, open_: Callable[[Path], Any]) -> None:
    path = tmp_path / "store.zip"
    path.write_bytes(b"PK\x03\x04")
    with pytest.raises(StoreError) as err:
        open_(path)
    assert str(err.value).startswith(f"{path} is a file, not a featurecache store"), err.value
    assert "zarr.json" not in str(err.value) and "does not exist" not in str(err.value)


@pytest.mark.parametrize("open_", OPENERS, ids=["LocalStore", "FeatureDataset"])
def test_a_directory_without_zarr_json(tmp_path: Path, open_: Callable[[Path], Any]) -> None:
    path = tmp_path / "empty"
    path.mkdir()
    (path / "index").mkdir()  # something, but not a store's root metadata
    with pytest.raises(StoreError) as err:
        open_(path)
    assert str(err.value) == f"{path} is not a featurecache store (no zarr.json)"
