"""The service names the index that answered (``x-featurecache-index``) and a lookup client follows it
(real uvicorn on 127.0.0.1, real builds on the shared Dask cluster).

The case that made it needed: a store first built without MSA files (every chain depth 1), served,
then rebuilt in place with them. A long-lived client never asked for an MSA (a depth-1 chain needs
none, and a chain whose key the old ``msas`` table lacks is dropped without asking), so no MSA of
another shape ever told it its tables were old: it produced single-sequence MSAs forever, while a
fresh client got hundreds of rows.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from featurecache import open_store
from featurecache.build.run import run_build
from featurecache.client import http as client_http
from featurecache.client.crop import Cropper
from featurecache.client.http import LookupClient
from featurecache.client.job import SampleJob, ServiceSpec, SourceRef
from featurecache.client.sampler import SampleKey
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings
from tests.clusters import shared_scheduler
from tests.conftest import CCD, MSAS, STRUCTURES

ENTRY = "102m"
MSA_REL = "Protenix/mmcif_msa/3"  # 102m's MSA (Protenix layout), hundreds of rows stored
HEADER = "x-featurecache-index"
MAX_ROWS = 4096
ARRAYS = ("msa", "msa_mask", "msa_deletions", "profile", "deletion_mean", "restype")


def _build(inputs: Path, out: Path) -> None:
    summary = run_build(pdb_dir=inputs / "structures", out=out, msa_dir=inputs / "msas", ccd=CCD,
                        scheduler=shared_scheduler(1), part_size=4, progress=False)  # fmt: skip
    assert not summary.failures, summary.failures


def _job(source: SourceRef) -> SampleJob:
    return SampleJob(source, Cropper(max_tokens=64), seed=0, max_msa_rows=MAX_ROWS, augment_ref=False,
                     use_msa=True, hook=None)  # fmt: skip


def _depths(store: Path) -> set[int]:
    return set(open_store(store).msas.column("depth").to_pylist())


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """102m's structure and an MSA directory with no MSA in it (yet)."""
    (tmp_path / "structures").mkdir()
    shutil.copy(STRUCTURES / f"{ENTRY}.cif", tmp_path / "structures")
    (tmp_path / "msas").mkdir()
    return tmp_path


def _add_msas(inputs: Path) -> None:
    shutil.copytree(MSAS / MSA_REL, inputs / "msas" / MSA_REL)


def test_a_client_follows_a_rebuild_that_adds_msas_to_depth_1_chains(inputs: Path) -> None:
    store = inputs / "store"
    _build(inputs, store)
    assert _depths(store) <= {1}  # no MSA files: each chain's MSA is its query alone, if any
    with ThreadedServer(Settings(store_path=store, store_check_seconds=0.5)) as url:
        source = SourceRef(url)
        job = _job(source)
        for i in range(3):
            assert job(SampleKey(i, 0, i, ENTRY))["msa"].shape[0] == 1, i
        old_id = httpx.get(f"{url}/v1/health", timeout=10).headers[HEADER]

        _add_msas(inputs)
        _build(inputs, store)  # in place, under the running service
        deep = max(_depths(store))
        assert deep > 100  # the real MSA: hundreds of rows

        # the service takes the new index at its next check (0.5 s); each sample sends requests
        deadline = time.monotonic() + 30
        i = 3
        while True:
            key = SampleKey(i, 0, i, ENTRY)
            got = job(key)
            if got["msa"].shape[0] > 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
            i += 1
        assert httpx.get(f"{url}/v1/health", timeout=10).headers[HEADER] != old_id
        # before: a single-sequence MSA forever (generation 0: the client never refreshed)
        assert got["msa"].shape[0] > 1, f"sample {i} still has a single-sequence MSA"
        assert source.generation() == 1  # refreshed once, for the one new index
        fresh = _job(SourceRef(url))
        local = _job(SourceRef(str(store)))
        for j in (i, i + 1, i + 2):
            key = SampleKey(j, 0, j, ENTRY)
            got = job(key)
            want, direct = fresh(key), local(key)
            assert got["msa"].shape[0] > 1
            for name in ARRAYS:
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} of sample {j}")
                np.testing.assert_array_equal(got[name], direct[name], err_msg=f"{name} of sample {j}")
        assert source.generation() == 1  # no further refresh: every answer since is of that index
        source.get().close()


def test_every_server_of_one_index_names_it_the_same_and_a_rebuild_a_newer_one(inputs: Path) -> None:
    """Two servers (two StoreHolders, as two ``--workers``) of one store: one id; a rebuild: another,
    that sorts after it (what lets a client tell a worker still on the old index)."""
    store = inputs / "store"
    _build(inputs, store)
    settings = Settings(store_path=store, store_check_seconds=0)
    with ThreadedServer(settings) as a, ThreadedServer(settings) as b:
        ids = {
            httpx.get(f"{url}{path}", timeout=10).headers.get(HEADER)
            for url in (a, b) for path in ("/v1/health", "/v1/ready", "/v1/tables/entries", f"/v1/entries/{ENTRY}")
        }  # fmt: skip
        assert len(ids) == 1 and None not in ids, ids
        (old,) = ids
        missing = httpx.get(f"{a}/v1/entries/nope", timeout=10)
        assert missing.status_code == 404 and missing.headers[HEADER] == old  # errors name it too
        _add_msas(inputs)
        _build(inputs, store)
        new = {httpx.get(f"{url}/v1/tables/msas", timeout=10).headers.get(HEADER) for url in (a, b)}
        assert len(new) == 1 and old not in new, (old, new)
        assert client_http._index_order(new.pop()) > client_http._index_order(old)  # type: ignore[operator]


class _Alternating(httpx.BaseTransport):
    """Sends the requests in turn to the real servers ``urls`` (as the kernel hands the connections
    of a client to the workers of ``--workers N``): here one on the old index, one on the new."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = [httpx.URL(u) for u in urls]
        self.transport = httpx.HTTPTransport()
        self.n = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = self.urls[self.n % len(self.urls)]
        self.n += 1
        request.url = request.url.copy_with(host=target.host, port=target.port)
        return self.transport.handle_request(request)

    def close(self) -> None:
        self.transport.close()


def _alternating_client(urls: list[str]) -> LookupClient:
    client = LookupClient(urls[0], retry_budget_s=10)
    client._http.close()
    client._http = httpx.Client(base_url=urls[0], transport=_Alternating(urls), timeout=10)
    return client


@pytest.fixture
def old_and_new(inputs: Path) -> Iterator[tuple[str, str]]:
    """A server on the index built without MSAs (a copy keeping the files' mtimes: the worker that
    has not looked again) and one on the same store rebuilt with them."""
    store = inputs / "store"
    _build(inputs, store)
    shutil.copytree(store, inputs / "old")  # copy2: same sizes and mtimes, so the same index id
    _add_msas(inputs)
    _build(inputs, store)
    with (
        ThreadedServer(Settings(store_path=inputs / "old", store_check_seconds=0)) as old,
        ThreadedServer(Settings(store_path=store, store_check_seconds=0)) as new,
    ):
        yield old, new


@pytest.mark.parametrize("first", ["old", "new"])
def test_a_swap_seen_through_several_workers_refreshes_once_and_keeps_the_new_tables(
    old_and_new: tuple[str, str], first: str
) -> None:
    old, new = old_and_new
    assert httpx.get(f"{old}/v1/health").headers[HEADER] < httpx.get(f"{new}/v1/health").headers[HEADER]
    reference = LookupClient(new)
    deep = max(reference.msas.column("depth").to_pylist())
    reference.close()
    assert deep > 100
    client = _alternating_client([old, new] if first == "old" else [new, old])
    try:
        # the msas table is asked for first when the old server's turn comes (before: it was kept)
        client.entry(ENTRY, ["tokens"])
        if first == "old":
            client.info()  # the new server: a newer index than the first answer's
        for _ in range(6):  # answers from both, alternately
            assert max(client.msas.column("depth").to_pylist()) == deep  # never the old index's table
            client.entry(ENTRY, ["tokens"])
            client.info()
        # one refresh when the new index was first seen (none when it was seen first); never back
        assert client.generation == (1 if first == "old" else 0)
    finally:
        client.close()


def test_index_header_rules_without_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decisions alone, on answers as the service sends them: no header → nothing (a service
    older than the client); ids of another form → each new one refreshes once, a left one never;
    older answers alone for OLDER_INDEX_S → the client takes that index (a store put back)."""
    client = LookupClient("http://127.0.0.1:9")

    def answer(index: str | None) -> bool:
        return client._follow_index(httpx.Response(200, headers={HEADER: index} if index else {}))

    assert not answer(None) and client.generation == 0
    assert not answer("a") and client.generation == 0  # the first id the client sees is its own
    assert not answer("b") and client.generation == 1
    assert answer("a") and client.generation == 1  # left: an older worker; not followed back
    assert not answer("b") and not answer(None) and client.generation == 1
    assert not answer("c") and client.generation == 2
    t1, t2 = f"{10**18:016x}-00", f"{10**18 + 1:016x}-00"
    assert not answer(t2) and client.generation == 3
    assert answer(t1) and client.generation == 3  # never seen, but older: not followed
    monkeypatch.setattr(client_http, "OLDER_INDEX_S", 0.0)
    assert not answer(t1) and client.generation == 4  # only older answers for OLDER_INDEX_S: taken
    monkeypatch.setattr(client_http, "OLDER_INDEX_S", 3600.0)
    assert answer(t2) and client.generation == 4  # left when t1 was taken: not followed back
    client.refresh()  # the user's refresh: whatever answers next is the client's index, at once
    assert client.generation == 5
    assert not answer(t2) and client.generation == 5  # taken without waiting, no second refresh
    assert not answer("d") and client.generation == 6  # and a new id is followed as before
    client.close()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:secret@h:9", "https://h:9"),
        ("https://u:secret@h:9/api?x=1", "https://h:9/api?x=***"),  # query values masked too (R42c s52 #9)
        ("http://token@[::1]:8000/", "http://[::1]:8000/"),
        ("http://h:9", "http://h:9"),
    ],
)
def test_describe_never_shows_credentials_in_the_url(url: str, shown: str) -> None:
    for source in (SourceRef(url), SourceRef(ServiceSpec(LookupClient, {"url": url}))):
        text = source.describe()
        assert text == f"the lookup service at {shown}", text
        assert "secret" not in text and "token" not in text and "u:" not in text
