"""A shard file removed while a reader reads it is an error, never zeros (review R12 s39 H1).

zarr reads a shard file that is missing as the array's fill value, and so does the store's direct
reader (``store.shards.ShardReader``), as it must to read the shards zarr left unwritten. The reader
checked the files before the read; a store removed under it (``rm -rf`` while the lookup service or
a DataLoader worker reads) between that check and the read opening the file gave an entry of zeros
as data. The removal is put exactly there, on both read paths: in the call that runs the direct
read, and (for an array of another layout, read through zarr) in the call that runs zarr's read."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import featurecache
from featurecache.errors import StoreError
from featurecache.store import root
from featurecache.store.shards import ShardReader
from tests.conftest import STRUCTURES, build_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pdb = tmp_path_factory.mktemp("in")
    shutil.copy(STRUCTURES / "102m.cif", pdb / "102m.cif")
    out = tmp_path_factory.mktemp("store") / "s"
    build_store(out, pdb)
    return out


@pytest.mark.parametrize("path", ["direct", "zarr"])
def test_a_shard_removed_between_the_check_and_the_read_is_an_error(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    copy = tmp_path / "s"
    shutil.copytree(store, copy, symlinks=True)
    if path == "zarr":  # every array read as one of a layout the direct reader does not take
        monkeypatch.setattr(ShardReader, "of", classmethod(lambda cls, path, arr: None))
    s = featurecache.open_store(copy)
    (entry_id,) = s.ids
    want = s.entry(entry_id)
    assert np.abs(want.atoms["coords"]).max() > 1.0  # real coordinates, so zeros cannot pass as them
    part = s.entries.column("part").to_pylist()[0]
    shards = [
        p for p in (copy / "parts" / part).rglob("*") if p.is_file() and "c" in p.relative_to(copy).parts
    ]
    assert shards, "the part's arrays have shard files"

    def remove() -> None:
        for p in shards:
            p.unlink(missing_ok=True)

    if path == "direct":
        real_read = ShardReader.read

        def remove_then_read_directly(self: ShardReader, selection: tuple[slice, ...]) -> np.ndarray:
            remove()
            return real_read(self, selection)

        monkeypatch.setattr(ShardReader, "read", remove_then_read_directly)
    else:
        real_sync = root.sync

        def remove_then_read(coro):  # type: ignore[no-untyped-def]
            remove()
            return real_sync(coro)

        monkeypatch.setattr(root, "sync", remove_then_read)
    with pytest.raises(StoreError) as err:
        s.entry(entry_id)
    # it names the part whose file is gone
    assert part in str(err.value), err.value
