"""A reader whose store was pruned after it opened it (review R5, session 35): the read of an entry
whose part was deleted says the part is gone and to open the store again, not only that a data
file is missing (which reads as damage). A real store (the sample), a real reader, a real
deletion of the part directory as `featurecache prune` does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest

from featurecache import open_store
from featurecache.errors import StoreError


def test_reading_an_entry_of_a_part_deleted_since_the_store_was_opened(
    sample_store: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    reader = open_store(store)
    entry_id = reader.ids[0]
    part = (
        pc.filter(reader.entries, pc.equal(reader.entries.column("id"), entry_id)).column("part")[0].as_py()
    )
    reader.entry(entry_id)  # read once: its arrays are open
    other = open_store(store)  # a second process-like reader that never read it
    shutil.rmtree(store / "parts" / part)
    for r in (reader, other):
        with pytest.raises(StoreError) as got:
            r.entry(entry_id)
        message = str(got.value)
        assert (
            f"the whole part {part} is gone from {store}" in message and "open the store again" in message
        ), message
