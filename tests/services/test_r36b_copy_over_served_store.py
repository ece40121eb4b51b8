"""A copy written in place over the served store does not crash the server (review R36b s49 #1).

``cp -r new/* store/`` (``cp -a``, ``rsync --inplace``) opens each file of the store it overwrites
with ``O_TRUNC`` and writes the new bytes into the same inode. The lookup server's index tables were
zero-copy views of the files' shared memory maps: the bytes changed under the open reader, whose
next requests read zeros or another index's bytes as offsets and strings (413 "entry 7DDO
(677765546570172342847 array bytes)", 500 UnicodeDecodeError), and pages cut off by the truncation
read as SIGBUS / SIGSEGV, which killed ``featurecache serve``. The server now reads the index tables
into memory: until its check sees the files changed it answers from the index it read, unchanged,
and it never crashes.

Here a real ``featurecache serve`` (a child process, as ``background_server`` starts it) serves a
copy of the sample store; every index table of another real store (two of its entries, one a part)
is written over the served one's in place, as ``cp`` does, while the server is up. The reader-level
test asserts what is deterministic: a mapped index's values change under its reader, one read into
memory does not.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from featurecache.store.layout import INDEX_DIR
from featurecache.store.reader import LocalStore
from services.lookup.server import background_server

#: the checks never come within the test's window unless the root zarr.json changes
ENV = {"FEATURECACHE_STORE_CHECK_SECONDS": "3600"}


def _write_over(store: Path, other: Path) -> list[str]:
    """Every ``index/*.arrow`` of ``other`` written over ``store``'s file of that name in place (the
    same inode, truncated, then written: what ``cp`` does to a file that exists). The names written."""
    names = []
    for src in sorted((other / INDEX_DIR).glob("*.arrow")):
        dst = store / INDEX_DIR / src.name
        if dst.exists():
            inode = dst.stat().st_ino
            with open(dst, "r+b") as f:
                f.truncate(0)
                f.write(src.read_bytes())
            assert dst.stat().st_ino == inode
            names.append(src.name)
    assert "entries.arrow" in names
    return names


def test_the_served_index_is_not_changed_by_a_copy_over_it(store_copy: Path, two_entry_store: Path) -> None:
    store = store_copy
    with background_server(store, env=ENV) as url, httpx.Client(base_url=url, timeout=30) as http:
        ids = LocalStore(store).ids
        assert len(ids) == 6, ids
        before = {}
        for eid in ids:
            r = http.get(f"/v1/entries/{eid}")
            assert r.status_code == 200, (eid, r.status_code, r.text[:300])
            before[eid] = r.content
        _write_over(store, two_entry_store)
        # the server looks at the index files again only at its next check: until then it answers
        # from the index it read, as it was (with a mapped index: zeros, another store's bytes,
        # absurd sizes, a dead server)
        for _ in range(3):
            for eid in ids:
                try:
                    r = http.get(f"/v1/entries/{eid}")
                except httpx.TransportError as exc:  # the server died (SIGSEGV / SIGBUS)
                    pytest.fail(f"GET /v1/entries/{eid} after the copy over the store: {exc!r}")
                assert r.status_code == 200, (eid, r.status_code, r.text[:300])
                assert r.content == before[eid], eid
        # a copy rewrites the root zarr.json too: the server opens the index now on disk, another
        # store's over these parts; whatever it reads of those, it answers, and stays up
        (store / "zarr.json").write_bytes((store / "zarr.json").read_bytes())
        ready = http.get("/v1/ready")
        assert ready.status_code == 200 and ready.json()["entries"] == 2, ready.text
        for eid in ids:
            r = http.get(f"/v1/entries/{eid}")
            assert r.status_code in (200, 404) or "detail" in r.json(), (eid, r.status_code, r.text[:300])
        assert http.get("/v1/health").status_code == 200


@pytest.mark.parametrize("memory_map", [True, False])
def test_an_index_read_into_memory_keeps_its_values(
    store_copy: Path, two_entry_store: Path, memory_map: bool
) -> None:
    reader = LocalStore(store_copy, memory_map=memory_map)
    columns = ("id", "atom_start", "atom_count", "token_count")
    before = reader.entries.select(columns).to_pylist()
    _write_over(store_copy, two_entry_store)
    try:
        after = reader.entries.select(columns).to_pylist()
    except (UnicodeDecodeError, SystemError, ValueError) as exc:  # a mapped index: the bytes changed
        after = [{"error": repr(exc)}]
    if memory_map:  # the default (the pages shared by a DataLoader's workers): never copy onto a store in use
        assert after != before
    else:
        assert after == before
        assert reader.entry(before[0]["id"]).atoms["coords"].shape[0] == before[0]["atom_count"]
