"""``/v1/entries`` pagination ends where the entries end (review R27a s45, L2): walked over a real
``featurecache serve`` (the session's uvicorn server over the sample store), with page sizes that
divide the entry count, every page holds at least one entry, the walk sees every id once, in the
store's order, and the last page's ``next_offset`` is None (no empty page after a full one)."""

from __future__ import annotations

import httpx
import pytest

from featurecache.store.reader import LocalStore


def _walk(url: str, limit: int) -> list[list[str]]:
    pages: list[list[str]] = []
    offset: int | None = 0
    while offset is not None:
        doc = httpx.get(f"{url}/v1/entries", params={"offset": offset, "limit": limit}).json()
        pages.append([item["id"] for item in doc["items"]])
        offset = doc["next_offset"]
        assert len(pages) <= 100, "the walk does not end"
    return pages


def test_pages_of_a_size_dividing_the_entry_count_end_without_an_empty_page(
    lookup_url: str, reference: LocalStore
) -> None:
    ids = list(reference.ids)
    n = len(ids)
    sizes = [k for k in range(1, n + 1) if n % k == 0]
    assert n >= 4 and len(sizes) >= 3  # the sample store: 6 entries, sizes 1, 2, 3, 6
    for limit in sizes:
        pages = _walk(lookup_url, limit)
        assert all(pages), (limit, pages)  # no empty page
        assert len(pages) == n // limit, limit
        assert [i for p in pages for i in p] == ids, limit


@pytest.mark.parametrize("offset_from_end, limit", [(1, 1), (2, 2), (2, 5)])
def test_the_last_page_has_no_next_offset(
    lookup_url: str, reference: LocalStore, offset_from_end: int, limit: int
) -> None:
    n = len(reference.ids)
    doc = httpx.get(f"{lookup_url}/v1/entries", params={"offset": n - offset_from_end, "limit": limit}).json()
    assert doc["next_offset"] is None
    assert [i["id"] for i in doc["items"]] == list(reference.ids)[n - offset_from_end :]
    assert doc["total"] == n
