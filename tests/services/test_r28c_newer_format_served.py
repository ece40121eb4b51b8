"""A served store that becomes a newer format (a newer featurecache rebuilt it in place) is said to
be one, without inviting retries: 500, no ``retry-after``, the store's format and "upgrade the
server" (review R28c s46 #10: a 503 + ``retry-after`` "cannot be opened now", which
``LookupClient`` retried until its deadline, then reported as the service being unavailable).

A copy of the sample store under a real uvicorn (in a thread); its root ``zarr.json``
``format_version`` is raised while it is served.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest

from featurecache.client.http import LookupClient
from featurecache.const import STORE_FORMAT_VERSION
from featurecache.errors import ServiceError, ServiceUnavailable
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings

NEWER = STORE_FORMAT_VERSION + 1
#: a client that retried the answer would take its whole budget; one that does not, well under a second
RETRY_BUDGET_S = 10.0


def _raise_format(store: Path) -> None:
    meta = store / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["format_version"] = NEWER
    meta.write_text(json.dumps(doc))


def test_a_store_become_newer_is_a_500_the_client_raises_at_once(tmp_path: Path, sample_store: Path) -> None:
    store = tmp_path / "private-name"
    shutil.copytree(sample_store, store)
    with ThreadedServer(Settings(store_path=store)) as url:
        answered = LookupClient(url, retry_budget_s=RETRY_BUDGET_S)
        entry_id = answered.ids[0]
        answered.entry(entry_id)  # served as it was
        _raise_format(store)

        r = httpx.get(f"{url}/v1/entries/{entry_id}")
        ready = httpx.get(f"{url}/v1/ready")
        want = f"the store is format {NEWER}, newer than this server reads"
        assert r.status_code == 500 and "retry-after" not in r.headers, (r.status_code, r.headers, r.text)
        assert r.json()["detail"].startswith(want) and "upgrade the server" in r.text, r.text
        assert "private-name" not in r.text, r.text
        # not ready, and not told to come back
        assert ready.status_code == 503 and "retry-after" not in ready.headers, (ready.headers, ready.text)
        assert ready.json()["detail"].startswith(want), ready.text

        fresh = LookupClient(url, retry_budget_s=RETRY_BUDGET_S)
        for client in (answered, fresh):
            t0 = time.monotonic()
            with pytest.raises(ServiceError) as got:
                client.entry(entry_id)
            spent = time.monotonic() - t0
            assert not isinstance(got.value, ServiceUnavailable), got.value
            assert want in str(got.value) and "upgrade the server" in str(got.value), got.value
            assert spent < RETRY_BUDGET_S / 4, f"{spent:.1f} s: retried ({got.value})"
