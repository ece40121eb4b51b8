"""SamplerFilter's boundaries (review R27a s45, S1 S2): an entry released ON the date cutoff stays
("entries released after it are dropped": the docstring), an entry AT the resolution limit stays
(``max_resolution`` is a maximum, the same rule as the lookup service's ``/entries?max_resolution``,
whose ``<=`` test_listing_filters guards), and the token bounds are inclusive likewise."""

from __future__ import annotations

import pyarrow as pa

from featurecache.client.sampler import SamplerFilter


def _entries() -> pa.Table:
    return pa.table(
        {
            "id": ["before", "on", "after"],
            "release_date": ["2021-09-29", "2021-09-30", "2021-10-01"],
            "resolution": [2.9, 3.0, 3.1],
            "token_count": [99, 100, 101],
        }
    )


def test_an_entry_released_on_the_cutoff_date_is_kept() -> None:
    assert SamplerFilter(date_cutoff="2021-09-30").mask(_entries()).tolist() == [True, True, False]
    # a release date with a time part is compared by its date
    t = _entries().set_column(
        1, "release_date", pa.array(["2021-09-29", "2021-09-30T12:00:00", "2021-10-01"])
    )
    assert SamplerFilter(date_cutoff="2021-09-30").mask(t).tolist() == [True, True, False]


def test_an_entry_at_the_resolution_limit_is_kept() -> None:
    assert SamplerFilter(max_resolution=3.0).mask(_entries()).tolist() == [True, True, False]


def test_token_bounds_are_inclusive() -> None:
    assert SamplerFilter(min_tokens=100).mask(_entries()).tolist() == [False, True, True]
    assert SamplerFilter(max_tokens=100).mask(_entries()).tolist() == [True, True, False]
