"""An answer read while the served store was swapped is not sent (review R12 s39 H1, H2).

The service compares the store's root ``zarr.json`` before each request reads, but a read takes a
while (a large entry, a streamed batch of hundreds): a store rebuilt, or a new build renamed into
place, during that read was read through the old reader, whose index offsets then picked the new
build's rows under the id asked for (and ``rm -rf`` gave zeros). Now the service looks again after
the read: a single answer is a 503 the client retries, a streamed batch is cut (``LookupClient``
reads its entries again one by one).

A real uvicorn server in a thread of this process (:class:`ThreadedServer`), so the swap can be put
exactly inside a read: the reader's array read renames the store away and a second real build into
its place, then reads.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from featurecache import open_store
from featurecache.store import arrow_io
from featurecache.store.root import PartArrays
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings
from tests.conftest import SAMPLES, build_store

#: in both builds, in part s-000000 of each; the second build leaves out 1A8O, which comes before it
#: in that part: its rows start 556 atoms earlier, in arrays of as many inner chunks (one shard
#: each, so the first build's reader decodes the second's shards without a checksum error)
ENTRY = "2q2k"
LEFT_OUT = "1A8O.pdb"


@pytest.fixture(scope="module")
def other_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second real build of the sample, as ``sample_store`` is built, without :data:`LEFT_OUT`."""
    inputs = tmp_path_factory.mktemp("other_in")
    for path in (SAMPLES / "structures").iterdir():
        if path.name != LEFT_OUT:
            shutil.copy(path, inputs / path.name)
    out = tmp_path_factory.mktemp("other") / "s"
    build_store(out, inputs, msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd")
    return out


@pytest.fixture
def served(tmp_path: Path, sample_store: Path, other_build: Path) -> Iterator[tuple[Path, Path]]:
    """(the served path, a copy of the other build beside it, ready to be renamed into place)."""
    store, new = tmp_path / "store", tmp_path / "new"
    shutil.copytree(sample_store, store, symlinks=True)
    shutil.copytree(other_build, new, symlinks=True)
    yield store, new


def _swap_on_read(monkeypatch: pytest.MonkeyPatch, store: Path, new: Path, at_call: int) -> list[int]:
    """From now on, the ``at_call``-th array read of any reader renames ``new`` into ``store``'s
    place first (blue/green), then reads. Returns the call counter."""
    calls = [0]
    real: Callable[..., Any] = PartArrays.read_many

    def read_many(self: PartArrays, *reads: Any) -> Any:
        calls[0] += 1
        if calls[0] == at_call:
            os.rename(store, store.with_name("old"))
            os.rename(new, store)
        return real(self, *reads)

    monkeypatch.setattr(PartArrays, "read_many", read_many)
    return calls


def _coords(body: bytes) -> list[np.ndarray]:
    return [r.arrays["atoms/coords"] for r in arrow_io.decode(body)]


def test_an_entry_read_while_the_store_was_swapped_is_a_503(
    served: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, new = served
    before, after = open_store(store), open_store(new)
    first, second = before.entry(ENTRY), after.entry(ENTRY)
    # the same part, the entry's rows elsewhere: read at the first build's offsets, the second
    # build's part gives other atoms than the entry's
    where = [(s.entries.column("part")[s.ids.index(ENTRY)].as_py(), s.entries.column("atom_start")[s.ids.index(ENTRY)].as_py()) for s in (before, after)]  # fmt: skip
    assert where[0][0] == where[1][0] and where[0][1] != where[1][1], where
    with ThreadedServer(Settings(store_path=store)) as url, httpx.Client(base_url=url) as http:
        params = {"arrays": "atoms/coords"}
        r = http.get(f"/v1/entries/{ENTRY}", params=params)  # opens the first build's arrays
        assert r.status_code == 200
        np.testing.assert_array_equal(_coords(r.content)[0], first.atoms["coords"])
        calls = _swap_on_read(monkeypatch, store, new, at_call=1)
        r = http.get(f"/v1/entries/{ENTRY}", params=params)
        assert calls[0] == 1
        assert r.status_code == 503, (r.status_code, r.content[:200])
        assert "retry-after" in r.headers and str(store) not in r.text
        # the retry reads the store now in place
        r = http.get(f"/v1/entries/{ENTRY}", params=params)
        assert r.status_code == 200
        np.testing.assert_array_equal(_coords(r.content)[0], second.atoms["coords"])


def test_a_batch_streamed_while_the_store_was_swapped_is_cut(
    served: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, new = served
    batch = {"ids": [ENTRY] * 12, "arrays": ["atoms/coords"]}
    with ThreadedServer(Settings(store_path=store)) as url, httpx.Client(base_url=url) as http:
        whole = http.post("/v1/entries:batch", json=batch)  # the first build's answer, in full
        assert whole.status_code == 200 and len(arrow_io.decode(whole.content)) == 12
        calls = _swap_on_read(monkeypatch, store, new, at_call=4)  # inside the stream
        body = bytearray()
        with (
            pytest.raises(httpx.RemoteProtocolError),
            http.stream("POST", "/v1/entries:batch", json=batch) as r,
        ):
            assert r.status_code == 200
            for piece in r.iter_raw():
                body += piece
        assert calls[0] >= 4
        # what was sent before the cut is the first build's answer, never the new build's rows
        assert 0 < len(body) < len(whole.content)
        assert whole.content.startswith(bytes(body))


def test_parts_removed_first_are_a_503_once(tmp_path: Path, sample_store: Path) -> None:
    """``rm -rf STORE`` can remove ``parts/`` before the root ``zarr.json`` and the index (the order
    of a directory listing): a read failing on a part that is gone then met an unchanged root and
    index and was judged damage, a 500 the client does not retry (review R12 s39 M1). A change of
    the ``parts`` directory is now answered as a store changing (503, retried) once; a part that
    stays gone under the same root and index is damage on the retry, as before."""
    store = tmp_path / "store"
    shutil.copytree(sample_store, store, symlinks=True)
    part = store / "parts" / open_store(store).entries.column("part")[0].as_py()
    with ThreadedServer(Settings(store_path=store)) as url, httpx.Client(base_url=url) as http:
        assert http.get(f"/v1/entries/{ENTRY}").status_code == 200
        shutil.rmtree(part)  # what rm -rf did first
        r = http.get(f"/v1/entries/{ENTRY}")
        assert r.status_code == 503, (r.status_code, r.text[:300])
        assert "retry-after" in r.headers and str(tmp_path) not in r.text
        r = http.get(f"/v1/entries/{ENTRY}")  # the retry: nothing else changed
        assert r.status_code == 500, (r.status_code, r.text[:300])
        assert f"entry {ENTRY}" in r.json()["detail"] and str(tmp_path) not in r.text
