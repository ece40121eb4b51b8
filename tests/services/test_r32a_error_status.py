"""A lookup client's ServiceError for a 5xx answer carries the status the service answered
(review R32a s47 #6).

``ServiceError.status`` is "the HTTP status it answered, None when there was no answer"; the 500
of damaged data and the 503 the client gives up on came with ``status=None``. A real service over a
real copy of the sample store (one entry's bonds array deleted: a 500) and behind a proxy answering
503 (:class:`lookup_helpers.FaultProxy`); a closed port is no answer, still None."""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from lookup_helpers import FaultProxy

from featurecache import open_store
from featurecache.client.http import LookupClient
from featurecache.errors import ServiceError, ServiceUnavailable
from services.lookup.server import ThreadedServer, free_port
from services.lookup.settings import Settings


@pytest.fixture
def damaged(sample_store: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(url of a service over a copy of the sample store, id of an entry whose bonds are gone)."""
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    s = open_store(store)
    entry_id = s.ids[0]
    shutil.rmtree(store / "parts" / str(s.entries.column("part")[s.row_of(entry_id)].as_py()) / "bonds")
    with ThreadedServer(Settings(store_path=store, auth_token=None)) as url:
        yield url, entry_id


def _round_trip(exc: ServiceError) -> ServiceError:
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == str(exc)
    return back  # type: ignore[no-any-return]


def test_a_500_carries_its_status(damaged: tuple[str, str]) -> None:
    url, entry_id = damaged
    client = LookupClient(url, retries=2, backoff=0.01)
    with pytest.raises(ServiceError, match=r"500: entry .*: unreadable.*after 1 attempts") as info:
        client.entry(entry_id)
    client.close()
    assert not isinstance(info.value, ServiceUnavailable)
    assert info.value.status == 500
    assert _round_trip(info.value).status == 500


def test_a_503_given_up_on_carries_its_status(damaged: tuple[str, str]) -> None:
    url, _ = damaged
    with FaultProxy(url, fail=10) as proxy:
        client = LookupClient(proxy.url, retries=2, backoff=0.01)
        with pytest.raises(ServiceUnavailable, match=r"503.*injected failure") as info:
            client.info()
        client.close()
        assert proxy.connections == 3  # retried, then given up
    assert info.value.status == 503
    assert _round_trip(info.value).status == 503
    with pytest.raises(ServiceUnavailable) as none:  # no answer at all: still None
        LookupClient(f"http://127.0.0.1:{free_port()}", retries=0).info()
    assert none.value.status is None
