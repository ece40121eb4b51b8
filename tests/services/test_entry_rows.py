"""``POST /v1/entries/{entry_id}:rows``: some rows of one entry's group (what the training client
reads of a large entry's atoms once it has cropped its tokens), over a real ``featurecache serve``
(2 uvicorn workers) on the committed sample store.

The oracle is the store opened directly: the group read whole (``LocalStore.read_group``), indexed
by the rows the test computes from the ranges itself (their union, ascending), byte for byte, field
by field; the chunk boundaries come from the index (the entry's ``atom_start`` in its part and
``layout.CHUNK_ROWS``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from lookup_helpers import metric_samples, metric_sum

from featurecache.store import arrow_io
from featurecache.store.layout import CHUNK_ROWS, ENTRY_GROUPS
from featurecache.store.reader import LocalStore

ROWS_COUNTER = "featurecache_lookup_entry_rows_served_total"


def _post(url: str, entry_id: str, body: Any, **kw: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/entries/{entry_id}:rows", json=body, timeout=30, **kw)


def _rows(url: str, entry_id: str, body: dict[str, Any]) -> arrow_io.Record:
    r = _post(url, entry_id, body)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == arrow_io.MEDIA_TYPE
    (record,) = arrow_io.decode(r.content)
    return record


def _union(ranges: list[list[int]]) -> np.ndarray:
    return np.unique(np.concatenate([np.arange(a, b) for a, b in ranges] or [np.zeros(0, np.int64)]))


def _check(record: arrow_io.Record, whole: np.ndarray, want_rows: np.ndarray, group: str) -> None:
    rows = record.arrays["rows"]
    assert rows.dtype == np.int64 and rows.tobytes() == want_rows.astype(np.int64).tobytes()
    names = [n for n in record.arrays if n != "rows"]
    assert names == [f"{group}/{f}" for f in whole.dtype.names or ()]  # every stored field, in order
    for name in names:
        f = name.partition("/")[2]
        want = np.ascontiguousarray(whole[f][want_rows])
        got = record.arrays[name]
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes(), name


def test_rows_are_those_of_the_whole_group(lookup_url: str, reference: LocalStore) -> None:
    """Ranges unsorted, overlapping, touching, empty; each group; every field, byte for byte."""
    rng = np.random.default_rng(5)
    checked = 0
    for eid in reference.ids:
        for group in ENTRY_GROUPS:
            whole = reference.read_group(eid, group)
            n = len(whole)
            cases = [[[0, n]], [[n, n]], [[0, 0], [n, n]]]
            if n > 2:
                cases += [[[n - 1, n], [0, 1], [0, 2]], [[1, n - 1], [0, 1]]]
            for _ in range(3):
                starts = rng.integers(0, n + 1, size=4)
                cases.append([[int(a), int(min(n, a + rng.integers(0, 40)))] for a in starts])
            for ranges in cases:
                record = _rows(lookup_url, eid, {"group": group, "ranges": ranges})
                _check(record, whole, _union(ranges), group)
                assert record.attrs["id"] == eid and record.attrs["group"] == group
                assert record.attrs["count"] == n
                checked += 1
    assert checked > 100


def test_a_range_across_a_chunk_boundary(lookup_url: str, reference: LocalStore) -> None:
    """Entries whose atoms cross an inner chunk of their part's array (CHUNK_ROWS rows): a range
    across the boundary, and two ranges in one chunk (the rows between them are not sent)."""
    starts = dict(zip(reference.entries.column("id").to_pylist(), reference.entries.column("atom_start").to_pylist(),
                      strict=True))  # fmt: skip
    crossed = 0
    for eid in reference.ids:
        whole = reference.read_group(eid, "atoms")
        first = (starts[eid] // CHUNK_ROWS + 1) * CHUNK_ROWS - starts[
            eid
        ]  # entry-local row of the next boundary
        if first >= len(whole):
            continue
        ranges = [[first - 5, first + 7], [first + 20, first + 30], [max(0, first - 300), first - 200]]
        record = _rows(lookup_url, eid, {"group": "atoms", "ranges": ranges})
        _check(record, whole, _union(ranges), "atoms")
        assert len(record.arrays["rows"]) == 12 + 10 + min(100, first - 200)
        crossed += 1
    assert crossed >= 2  # the premise: the sample store has such entries


def test_no_ranges_answers_the_fields_the_part_stores(lookup_url: str, reference: LocalStore) -> None:
    eid = reference.ids[0]
    record = _rows(lookup_url, eid, {"group": "tokens", "ranges": []})
    assert record.arrays["rows"].shape == (0,)
    assert [n for n in record.arrays if n != "rows"] == [
        f"tokens/{f}" for f in reference.stored_fields(eid, "tokens")
    ]
    assert all(a.shape[0] == 0 for a in record.arrays.values())
    stored = record.attrs["stored_fields"]
    assert stored == {g: list(reference.stored_fields(eid, g)) for g in ENTRY_GROUPS}
    part = reference.entries.column("part")[reference.row_of(eid)].as_py()
    assert record.attrs["part"] == part


def test_some_fields(lookup_url: str, reference: LocalStore) -> None:
    eid = max(reference.ids, key=lambda i: reference.row_count(i, "atoms"))
    whole = reference.read_group(eid, "atoms")
    record = _rows(
        lookup_url, eid, {"group": "atoms", "ranges": [[10, 20]], "fields": ["ref_space_uid", "coords"]}
    )
    assert list(record.arrays) == ["rows", "atoms/coords", "atoms/ref_space_uid"]  # the group's order
    assert record.arrays["atoms/coords"].tobytes() == whole["coords"][10:20].tobytes()
    assert record.arrays["atoms/ref_space_uid"].tobytes() == whole["ref_space_uid"][10:20].tobytes()


@pytest.mark.parametrize(
    "entry, body, status, says",
    [
        ("no-such-entry", {"group": "atoms", "ranges": []}, 404, "no entry 'no-such-entry'"),
        ("%2Ehidden", {"group": "atoms", "ranges": []}, 422, "malformed entry id"),
        (None, {"group": "atom", "ranges": []}, 422, "unknown group 'atom'"),
        (None, {"group": "atoms", "ranges": [], "fields": ["xyz"]}, 422, "no field(s) ['xyz']"),
        (None, {"group": "atoms", "ranges": [[5, 3]]}, 422, "range 0 [5, 3) is start > stop"),
        (
            None,
            {"group": "atoms", "ranges": [[0, 1], [0, 10**9]]},
            422,
            "range 1 [0, 1000000000) is outside 0..",
        ),
        (None, {"group": "atoms", "ranges": [[-1, 3]]}, 422, "greater than or equal to 0"),
        (None, {"group": "atoms", "ranges": [[0, 2**70]]}, 422, "less than or equal to"),
        (None, {"group": "atoms", "ranges": [[0.5, 3]]}, 422, "valid integer"),
        (None, {"group": "atoms", "ranges": [[True, 3]]}, 422, "valid integer"),
        (None, {"group": "atoms", "ranges": [[1, 2, 3]]}, 422, "ranges"),
        (None, {"group": "atoms"}, 422, "ranges"),
        (None, {"group": "atoms", "ranges": [], "rows": 3}, 422, "rows"),
    ],
)
def test_refusals(
    lookup_url: str, reference: LocalStore, entry: str | None, body: dict[str, Any], status: int, says: str
) -> None:
    r = _post(lookup_url, entry or reference.ids[0], body)
    assert r.status_code == status, (r.status_code, r.text)
    assert says in r.text, r.text


def test_the_one_entry_route_still_answers_get_and_head_there(lookup_url: str, reference: LocalStore) -> None:
    """GET and HEAD on the path are GET /v1/entries/{id} for the id 'ID:rows' (404), as on
    /v1/msas/{key}:slice; a 405 there lists POST among the methods."""
    eid = reference.ids[0]
    get = httpx.get(f"{lookup_url}/v1/entries/{eid}:rows")
    head = httpx.head(f"{lookup_url}/v1/entries/{eid}:rows")
    assert get.status_code == head.status_code == 404 and head.content == b""
    assert f"no entry '{eid}:rows'" in get.text
    put = httpx.put(f"{lookup_url}/v1/entries/{eid}:rows", json={})
    assert put.status_code == 405 and "POST" in put.headers["allow"].split(", "), put.headers


def test_advertised_documented_and_counted(lookup_url: str, reference: LocalStore) -> None:
    service = httpx.get(f"{lookup_url}/v1/service").json()
    assert "entry_rows" in service["capabilities"]
    assert httpx.get(f"{lookup_url}/v1/info").json()["service"]["capabilities"] == service["capabilities"]
    op = httpx.get(f"{lookup_url}/openapi.json").json()["paths"]["/v1/entries/{entry_id}:rows"]["post"]
    assert op["summary"] and {"200", "404", "413", "422"} <= set(op["responses"])
    assert "capabilities" in op["description"]

    def served(group: str) -> float:
        return metric_sum(metric_samples(httpx.get(f"{lookup_url}/metrics").text), ROWS_COUNTER, group=group)

    eid = reference.ids[-1]
    before = served("atoms"), served("bonds")
    _rows(lookup_url, eid, {"group": "atoms", "ranges": [[0, 7], [3, 12], [40, 41]]})
    _rows(lookup_url, eid, {"group": "atoms", "ranges": []})
    assert (served("atoms"), served("bonds")) == (before[0] + 13, before[1])


@pytest.fixture(scope="module")
def small_limits(sample_store: Path, reference: LocalStore) -> Iterator[str]:
    """A service whose max_response_bytes lets 100 atom rows through (35 record bytes + 8 for the row
    number each: 4300) and not 101, and whose max_body_bytes is 2000."""
    from services.lookup.server import background_server

    assert ENTRY_GROUPS["atoms"].itemsize == 35  # the premise of the limit's arithmetic
    env = {"FEATURECACHE_MAX_RESPONSE_BYTES": str(100 * 43), "FEATURECACHE_MAX_BODY_BYTES": "2000"}
    with background_server(sample_store, workers=1, env=env) as url:
        yield url


def test_limits(small_limits: str, reference: LocalStore) -> None:
    eid = max(reference.ids, key=lambda i: reference.row_count(i, "atoms"))
    whole = reference.read_group(eid, "atoms")
    ok = [[0, 60], [1000, 1040], [30, 50]]  # 100 rows (overlaps counted once)
    _check(_rows(small_limits, eid, {"group": "atoms", "ranges": ok}), whole, _union(ok), "atoms")
    over = _post(small_limits, eid, {"group": "atoms", "ranges": [*ok, [2000, 2001]]})
    assert over.status_code == 413, over.text
    doc = over.json()
    assert doc["limit"] == "max_response_bytes" and doc["max"] == 4300 and doc["got"] == 101 * 43, doc
    # fewer fields, more rows
    fields = _post(
        small_limits, eid, {"group": "atoms", "ranges": [[0, 150]], "fields": ["coords"]}
    )  # 150 * 20 bytes
    assert fields.status_code == 200 and len(arrow_io.decode(fields.content)[0].arrays["rows"]) == 150
    # 400 rows of one byte (+ 8) would fit the answer; the body (~4 kB) does not fit max_body_bytes
    ranges = [[i, i + 1] for i in range(0, 800, 2)]
    body = _post(small_limits, eid, {"group": "atoms", "ranges": ranges, "fields": ["charge"]})
    assert body.status_code == 413 and body.json()["limit"] == "max_body_bytes", body.text
