"""A part deleted *before* a process opened the store is not blamed on a prune "after this process
opened the store" with advice to open it again, which cannot help (review R25b s43 #3): the read
says the index lists a part that was missing already and points to verify. A part deleted after
the open keeps the prune wording (tests/store/test_part_gone.py). The sample store, real readers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.compute as pc
import pytest

from featurecache import open_store
from featurecache.errors import StoreError
from featurecache.store.verify import verify_store


def test_a_part_missing_when_the_store_was_opened_is_not_blamed_on_a_prune(
    sample_store: Path, tmp_path: Path
) -> None:
    store = Path(shutil.copytree(sample_store, tmp_path / "store"))
    first = open_store(store)
    entry_id = first.ids[0]
    part = pc.filter(first.entries, pc.equal(first.entries.column("id"), entry_id)).column("part")[0].as_py()
    shutil.rmtree(store / "parts" / part)
    with pytest.raises(StoreError) as got:
        open_store(store).entry(entry_id)  # opened after the part was deleted
    message = str(got.value)
    assert (
        f"the whole part {part} is gone from {store}: the index lists it, but it was missing already"
        in message
    )
    assert "open the store again" not in message and f"featurecache verify {store}" in message, message


def test_verify_of_a_component_part_deleted_beforehand(sample_store: Path, tmp_path: Path) -> None:
    store = Path(shutil.copytree(sample_store, tmp_path / "store"))
    shutil.rmtree(store / "parts" / "c-000000")
    problems = verify_store(store, workers=1)
    line = next((p for p in problems if p.startswith("components: unreadable")), "")
    assert "the whole part c-000000 is gone" in line and "missing already" in line, problems
    assert "open the store again" not in line, line
