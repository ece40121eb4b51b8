"""``/v1/info`` answers at once in a fresh server process; the store's sizes follow when counted.

Summing the store's bytes walks every part not sized before: 11–49 s on a 200k-entry store in the
first seconds of a server process (session 16). The service starts that count in the background
when it opens (or reopens) the store; a ``/v1/info`` asked meanwhile must not wait for it (it did:
a dashboard or probe calling it right after start waited, or timed out), but answer with the
index's counts and the sizes marked pending.

The count is held back here by holding the lock that ``store_bytes`` takes for every part it sizes
(``featurecache.store.info._part_bytes_lock``): a count that cannot finish, as on a large store,
without making a large store or touching the product's code. Whether the answer came before the
count finished is read from the count's own ``done`` event (``services.lookup.sizes``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.compute as pc

from featurecache.store import info as store_info_module
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings

SAMPLE_STRUCTURES = Path(__file__).resolve().parents[2] / "samples" / "structures"


def _reference_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path``, by os.walk + lstat (the independent count)."""
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


def _reference_kinds(store: Path) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for p in (store / "parts").iterdir():
        if p.is_dir() and not p.name.startswith("."):
            kind = p.name.split("-")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def _index_table(store: Path, name: str) -> pa.Table:
    with pa.memory_map(str(store / "index" / f"{name}.arrow")) as f:
        return pa.ipc.open_file(f).read_all()


@contextmanager
def _sizes_held_back() -> Iterator[Callable[[], None]]:
    """Until the function it yields is called (or the block ends), no part can be sized: the count
    of a store not sized before in this process stops at its first part."""
    gate = store_info_module._part_bytes_lock
    assert gate.acquire(timeout=30), "another count holds the part-size lock"
    held = True

    def release() -> None:
        nonlocal held
        if held:
            held = False
            gate.release()

    try:
        yield release
    finally:
        release()


def test_info_answers_at_once_while_the_sizes_are_counted(sample_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)  # parts at new paths: sized afresh by this process
    server = ThreadedServer(Settings(store_path=store))
    with _sizes_held_back() as release, server as url, httpx.Client(base_url=url, timeout=60.0) as http:
        # a service that waits for the count never answers here (the lock is held; session 16's
        # did: ReadTimeout). Imported after it, so the old code fails on that, not on the import.
        first = http.get("/v1/info")
        from services.lookup.sizes import size_count

        count = size_count(server.app.state.store.get())
        counting = not count.done.is_set()
        release()
        assert first.status_code == 200, first.text
        doc = first.json()
        assert counting, "the count finished before the answer: it was not answered while counting"
        assert doc["sizes_pending"] is True
        assert doc["bytes"] is None and doc["parts"] is None
        # the counts are there at once, from the index (read here with pyarrow alone)
        entries = _index_table(store, "entries")
        assert doc["counts"]["entries"] == entries.num_rows == len(list(SAMPLE_STRUCTURES.iterdir()))
        assert doc["counts"]["atoms"] == pc.sum(entries.column("atom_count")).as_py() > 0
        assert doc["counts"]["chains"] == _index_table(store, "chains").num_rows
        assert doc["versions"]["format_version"] is not None and doc["service"]["limits"]

        assert count.done.wait(timeout=60) and count.error is None
        later = http.get("/v1/info")
        assert later.status_code == 200
        done = later.json()
    assert "sizes_pending" not in done
    assert done["bytes"] == {
        "total": _reference_bytes(store),
        "parts": _reference_bytes(store / "parts"),
        "index": _reference_bytes(store / "index"),
    }
    assert done["parts"] == _reference_kinds(store)
    assert done["counts"] == doc["counts"]


def test_sizes_are_counted_when_the_store_opens(sample_store: Path, tmp_path: Path) -> None:
    """Without any ``/v1/info``, the count starts when the service opens the store; the first
    ``/v1/info`` after it finished has the sizes, from that count (no second one)."""
    from services.lookup import sizes

    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    server = ThreadedServer(Settings(store_path=store))
    with server as url, httpx.Client(base_url=url, timeout=60.0) as http:
        assert http.get("/v1/health").status_code == 200  # not /v1/info
        reader = server.app.state.store.get()
        count = sizes._counts.get(reader)
        assert count is not None, "no size count was started when the store was opened"
        assert count.done.wait(timeout=60) and count.error is None
        info = http.get("/v1/info")
        assert info.status_code == 200
        doc = info.json()
        assert sizes._counts.get(reader) is count
    assert "sizes_pending" not in doc
    assert doc["bytes"]["total"] == _reference_bytes(store)
    assert doc["counts"]["entries"] == len(list(SAMPLE_STRUCTURES.iterdir()))
