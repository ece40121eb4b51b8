"""LookupClient's transport: retries on dropped connections and 5xx, no retry on 4xx, clear errors,
tokens, pickling; and the selection encoding it shares with the server's parser."""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from lookup_helpers import FaultProxy, metric_samples, metric_sum
from pydantic import SecretStr

from featurecache.client.http import LookupClient, _index_spec
from featurecache.errors import AuthenticationError, InvalidRequest, NotFound, ServiceError
from featurecache.store.reader import LocalStore
from services.lookup.params import parse_index_spec, resolve_indices
from services.lookup.server import ThreadedServer, free_port
from services.lookup.settings import Settings

TOKEN = "client-test-token"


@pytest.fixture(scope="module")
def local_server(sample_store: Path) -> Iterator[str]:
    with ThreadedServer(Settings(store_path=sample_store, auth_token=None)) as url:
        yield url


def test_retries_dropped_connections(local_server: str, reference: LocalStore) -> None:
    entry_id = reference.ids[0]
    with FaultProxy(local_server, drop=2) as proxy:
        client = LookupClient(proxy.url, retries=3, backoff=0.01)
        entry = client.entry(entry_id, ["atoms/coords"])
        client.close()
        assert proxy.connections == 3  # two dropped, the third answered
    np.testing.assert_array_equal(entry.atoms["coords"], reference.entry(entry_id).atoms["coords"])


def test_retries_5xx(local_server: str, reference: LocalStore) -> None:
    with FaultProxy(local_server, fail=2) as proxy:
        client = LookupClient(proxy.url, retries=2, backoff=0.01)
        assert client.info()["counts"]["entries"] == len(reference.ids)
        client.close()
        assert proxy.connections == 3


def test_gives_up_with_a_service_error(local_server: str) -> None:
    with FaultProxy(local_server, fail=10) as proxy:
        client = LookupClient(proxy.url, retries=2, backoff=0.01)
        with pytest.raises(ServiceError, match=r"503.*injected failure.*after 3 attempts"):
            client.info()
        assert proxy.connections == 3
    closed = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServiceError, match=r"ConnectError.*after 2 attempts"):
        LookupClient(closed, retries=1, backoff=0.01).info()
    with pytest.raises(ConnectionError):  # ServiceError is a ConnectionError
        LookupClient(closed, retries=0).entry("x")


def test_4xx_is_not_retried(local_server: str, reference: LocalStore) -> None:
    route = "/v1/entries/{entry_id}"
    before = metric_samples(httpx.get(f"{local_server}/metrics").text)
    client = LookupClient(local_server, retries=4, backoff=0.01)
    with pytest.raises(NotFound, match="absent-entry"):
        client.entry("absent-entry")
    with pytest.raises(InvalidRequest, match=r"422.*malformed entry id"):
        client.entry("..")
    after = metric_samples(httpx.get(f"{local_server}/metrics").text)
    name = "featurecache_lookup_requests_total"
    assert (
        metric_sum(after, name, route=route, status="404")
        - metric_sum(before, name, route=route, status="404")
        == 1
    )
    assert (
        metric_sum(after, name, route=route, status="422")
        - metric_sum(before, name, route=route, status="422")
        == 1
    )


def test_token(sample_store: Path, reference: LocalStore, monkeypatch: pytest.MonkeyPatch) -> None:
    with ThreadedServer(Settings(store_path=sample_store, auth_token=SecretStr(TOKEN))) as url:
        with pytest.raises(AuthenticationError, match=r"401.*missing bearer token"):
            LookupClient(url, retries=0).info()
        with pytest.raises(PermissionError, match="invalid bearer token"):
            LookupClient(url, token="wrong", retries=0).entry(reference.ids[0])
        assert LookupClient(url, token=TOKEN).ids == reference.ids
        monkeypatch.setenv("FEATURECACHE_AUTH_TOKEN", TOKEN)
        client = LookupClient(url)
        # a loader worker rebuilds the client from its pickle: the token travels with it
        monkeypatch.delenv("FEATURECACHE_AUTH_TOKEN")
        clone = pickle.loads(pickle.dumps(client))
        assert clone.url == url and clone.ids == reference.ids


def test_store_that_appears_later(tmp_path: Path, sample_store: Path, reference: LocalStore) -> None:
    store = tmp_path / "later"
    with ThreadedServer(Settings(store_path=store, store_retry_seconds=0)) as url:
        assert httpx.get(f"{url}/v1/health").status_code == 200
        ready = httpx.get(f"{url}/v1/ready")
        assert ready.status_code == 503 and "does not exist" in ready.json()["detail"]
        with pytest.raises(ServiceError, match=r"503.*not open"):
            LookupClient(url, retries=0).info()
        shutil.copytree(sample_store, store)
        assert httpx.get(f"{url}/v1/ready").status_code == 200
        assert LookupClient(url, retries=0).ids == reference.ids


@pytest.mark.parametrize(
    "sel, size",
    [
        (None, 7), (slice(None, None), 7), (slice(2, 5), 7), (slice(3, None), 7), (slice(None, 0), 7),
        ([], 7), ([0], 7), ([6], 7), ([0, 1, 2, 5, 6], 7), ([4, 2, 2, 0], 7), (np.arange(0, 100, 3), 100),
        (np.array([1, 2, 3, 10, 11, 50]), 60),
    ],
)  # fmt: skip
def test_selection_encoding_round_trips(sel: object, size: int) -> None:
    spec = _index_spec(sel)  # type: ignore[arg-type]
    got = resolve_indices(parse_index_spec(spec, "rows"), size, "rows")
    want = (
        np.arange(size)
        if sel is None
        else np.arange(size)[sel]
        if isinstance(sel, slice)
        else np.asarray(sel, np.int64)
    )
    np.testing.assert_array_equal(got, want)


def test_selection_encoding_refuses_what_it_cannot_say() -> None:
    with pytest.raises(InvalidRequest, match="step"):
        _index_spec(slice(0, 10, 2))
    with pytest.raises(InvalidRequest, match="negative"):
        _index_spec([3, -1])


def test_extra_index_tables_are_served(tmp_path: Path, sample_store: Path) -> None:
    """Tables other stages add to index/ (e.g. plan.arrow) reach remote readers too."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    extra = pa.table({"id": ["a", "b"], "max_tokens": pa.array([384, 640], pa.int32())})
    with pa.OSFile(str(store / "index" / "plan.arrow"), "wb") as sink, ipc.new_file(sink, extra.schema) as w:
        w.write_table(extra)
    with ThreadedServer(Settings(store_path=store)) as url:
        client = LookupClient(url, retries=0)
        assert client.table("plan").equals(extra)
        assert "plan" in client.service_info["tables"]
        with pytest.raises(NotFound, match="no table 'nope'"):
            client.table("nope")
