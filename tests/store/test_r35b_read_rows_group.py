"""Review R35b s49 #10: ``LocalStore.read_rows()`` with an unknown group is a typed error naming the
groups, not a bare ``KeyError`` from the reader's offsets table."""

from __future__ import annotations

from pathlib import Path

import pytest

import featurecache
from featurecache.errors import FeatureCacheError, InvalidRequest
from featurecache.store.layout import ENTRY_GROUPS


def test_an_unknown_group_is_an_invalid_request_naming_the_groups(two_entry_store: Path) -> None:
    with featurecache.open_store(two_entry_store) as store:
        entry_id = store.entries.column("id")[0].as_py()
        rows, _ = store.read_rows(entry_id, "tokens", [(0, 3)])  # a known group reads
        assert list(rows[:3]) == [0, 1, 2]
        for fields in (None, ["element"]):
            with pytest.raises(InvalidRequest) as info:
                store.read_rows(entry_id, "nope", [(0, 3)], fields=fields)
            assert isinstance(info.value, FeatureCacheError)
            message = str(info.value)
            assert "unknown group 'nope'" in message and all(g in message for g in ENTRY_GROUPS), message
