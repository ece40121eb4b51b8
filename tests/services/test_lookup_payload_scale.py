"""Work per request that grew with the store: the release-date filter of ``/v1/entries`` and the
index tables of ``/v1/tables/{name}``.

At 200k entries the date filter built a Python string per row on every page (99 ms vs 8 ms
unfiltered) and each table request held the serialized table twice (83 MB each for entries; 8
concurrent requests took the server from 668 MiB to 1.6 GB). Python-heap allocations
(``tracemalloc``) are what these tests bound: a per-row Python object or a whole-table ``bytes``
shows there whatever the machine's speed.
"""

from __future__ import annotations

import datetime
import random
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from featurecache.store import arrow_io
from featurecache.store.reader import LocalStore
from services.lookup.listing import EntryQuery
from services.lookup.payloads import TABLE_CHUNK_BYTES, table_stream


def _peak(fn: Callable[[], Any]) -> int:
    """Peak Python-heap bytes allocated while ``fn`` runs."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _dates(n: int) -> list[str | None]:
    rng = random.Random(7)
    out: list[str | None] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.05:
            out.append(None)
        elif r < 0.1:
            out.append("")
        else:
            d = datetime.date(1975, 1, 1) + datetime.timedelta(days=rng.randrange(365 * 50))
            out.append(d.isoformat() + ("T12:00:00" if r < 0.2 else ""))
    return out


def _reference(dates: list[str | None], lo: str | None, hi: str | None) -> np.ndarray:
    def ok(d: str | None) -> bool:
        if not d:
            return False
        day = datetime.date.fromisoformat(d[:10])
        return (lo is None or day >= datetime.date.fromisoformat(lo)) and (
            hi is None or day <= datetime.date.fromisoformat(hi)
        )

    return np.array([ok(d) for d in dates], dtype=bool)


@pytest.mark.parametrize(
    ("lo", "hi"),
    [("2000-01-01", None), (None, "1999-12-31"), ("1990-03-04", "2010-10-10"), ("2030-01-01", None)],
)
def test_release_date_filter_matches_dates_and_makes_no_object_per_row(
    lo: str | None, hi: str | None
) -> None:
    n = 100_000
    dates = _dates(n)
    table = pa.table({"release_date": pa.chunked_array([dates[: n // 2], dates[n // 2 :]], pa.string())})
    query = EntryQuery(released_after=lo, released_before=hi)
    got = query.mask(table)
    assert got.dtype == bool and np.array_equal(got, _reference(dates, lo, hi))
    # a str per row is ~50 bytes (5 MB here); the mask itself is 100 kB
    assert _peak(lambda: query.mask(table)) < 1_000_000


def test_a_large_table_is_streamed_not_held_whole() -> None:
    n = 300_000
    rng = np.random.default_rng(3)
    table = pa.table({
        "id": pa.array([f"e{i:07d}" for i in range(n)]),
        "atom_count": rng.integers(0, 10**5, n),
        "resolution": rng.random(n),
    })  # fmt: skip
    pieces: Iterator[bytes] = table_stream(table, None, chunk_bytes=256 << 10)
    sizes: list[int] = []
    peak = _peak(lambda: sizes.extend(len(p) for p in pieces))
    assert sum(sizes) > table.nbytes > 5_000_000
    assert peak < table.nbytes / 4  # a whole-table bytes (or two) would be >= nbytes
    default = list(table_stream(table, None))  # about TABLE_CHUNK_BYTES per record batch
    assert max(len(p) for p in default) <= TABLE_CHUNK_BYTES * 1.5
    data = b"".join(table_stream(table, None))
    assert ipc.open_stream(pa.py_buffer(data)).read_all().equals(table)
    cols = b"".join(table_stream(table, ["resolution", "id"]))
    assert ipc.open_stream(pa.py_buffer(cols)).read_all().equals(table.select(["resolution", "id"]))
    empty = table.slice(0, 0)
    assert ipc.open_stream(pa.py_buffer(b"".join(table_stream(empty, None)))).read_all().equals(empty)


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal schemas and values, NaN equal to NaN (``Table.equals`` says NaN != NaN)."""
    return a.schema == b.schema and repr(a.to_pylist()) == repr(b.to_pylist())


def test_tables_route_sends_the_index_tables(lookup_url: str, reference: LocalStore) -> None:
    for name in ("entries", "chains", "msas"):
        r = httpx.get(f"{lookup_url}/v1/tables/{name}")
        assert r.status_code == 200 and r.headers["content-type"] == arrow_io.MEDIA_TYPE
        assert reference.table(name).num_rows > 0
        assert _same(arrow_io.read_table(r.content), reference.table(name))
    r = httpx.get(f"{lookup_url}/v1/tables/chains", params={"columns": "entry_id,asym_id"})
    assert _same(arrow_io.read_table(r.content), reference.chains.select(["entry_id", "asym_id"]))
    assert httpx.get(f"{lookup_url}/v1/tables/nope").status_code == 404
