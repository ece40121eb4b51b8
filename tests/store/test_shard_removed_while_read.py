"""A shard file removed while a reader reads it is an error, never zeros (review R12 s39 H1).

zarr reads a shard file that is missing as the array's fill value. The reader checked the files
before the read; a store removed under it (``rm -rf`` while the lookup service or a DataLoader
worker reads) between that check and zarr opening the file gave an entry of zeros as data. The
removal is put exactly there: in the call that runs zarr's read, before it reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import featurecache
from featurecache.errors import StoreError
from featurecache.store import root
from tests.conftest import STRUCTURES, build_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pdb = tmp_path_factory.mktemp("in")
    shutil.copy(STRUCTURES / "102m.cif", pdb / "102m.cif")
    out = tmp_path_factory.mktemp("store") / "s"
    build_store(out, pdb)
    return out


def test_a_shard_removed_between_the_check_and_the_read_is_an_error(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "s"
    shutil.copytree(store, copy, symlinks=True)
    s = featurecache.open_store(copy)
    (entry_id,) = s.ids
    want = s.entry(entry_id)
    assert np.abs(want.atoms["coords"]).max() > 1.0  # real coordinates, so zeros cannot pass as them
    part = s.entries.column("part").to_pylist()[0]
    shards = [
        p for p in (copy / "parts" / part).rglob("*") if p.is_file() and "c" in p.relative_to(copy).parts
    ]
    assert shards, "the part's arrays have shard files"

    real_sync = root.sync

    def remove_then_read(coro):  # type: ignore[no-untyped-def]
        for p in shards:
            p.unlink(missing_ok=True)
        return real_sync(coro)

    monkeypatch.setattr(root, "sync", remove_then_read)
    with pytest.raises(StoreError) as err:
        s.entry(entry_id)
    # it names the part whose file is gone
    assert part in str(err.value), err.value
