"""Review R26c (session 44) #4: ``SamplerFilter(ids=...)`` left out the ids the store does not hold
without a word (an id of another store, of an old plan, or in other case: ``102M`` for ``102m``),
and when none was there the error named none of them."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pytest

from featurecache.client.sampler import Sampler, SamplerFilter
from featurecache.errors import InvalidRequest

ENTRIES = pa.table({"id": ["102m", "1a8o", "7ddo", "3u8v"]})


def test_ids_the_store_lacks_are_warned_about_once_by_name(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="featurecache.client.sampler"):
        s = Sampler(ENTRIES, filters=SamplerFilter(ids=["102m", "1abc", "7DDO", "1abc"]))
    assert s.entry_ids == ["102m"]
    warned = [r.getMessage() for r in caplog.records if "not in the store" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "2 of the 4 ids given are not in the store: 1abc, 7DDO (the store has 7ddo)" in warned[0]
    assert "case-sensitive" in warned[0] and "left out" in warned[0]


def test_ids_all_present_say_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="featurecache.client.sampler"):
        s = Sampler(ENTRIES, filters=SamplerFilter(ids=("3u8v", "102m")))
    assert s.entry_ids == ["102m", "3u8v"] and not caplog.records


def test_no_id_in_the_store_names_the_first_few() -> None:
    ids = ["102M", *(f"9x{i:02d}" for i in range(7))]
    with pytest.raises(InvalidRequest) as err:
        Sampler(ENTRIES, filters=SamplerFilter(ids=ids))
    said = str(err.value)
    assert "no entry of the store's 4 passes the sampler's filters (ids=8 ids)" in said
    assert (
        "8 of the 8 ids given are not in the store: 102M (the store has 102m), 9x00, 9x01, 9x02, 9x03, …"
        in said
    )
    assert "case-sensitive" in said


@pytest.mark.parametrize("ids", ["102m", b"102m"])
def test_one_string_as_ids_is_refused(ids: Any) -> None:
    """Review R26c (session 44) #6: ``ids="102m"`` was taken as the ids "1", "0", "2", "m"."""
    with pytest.raises(InvalidRequest, match=r"a list of entry ids, not one string: ids=\["):
        SamplerFilter(ids=ids)
