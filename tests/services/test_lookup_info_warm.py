"""``/v1/info`` is computed in the background as soon as the service opens its store.

Its byte counts walk every part not sized before: seconds on a large store (11–49 s for the first
call on a 200k-entry store, session 16). The service starts that walk when it opens (or reopens)
the store, so the first ``/v1/info`` finds it cached; observed here through the cache itself,
before any request has asked for it.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx

from services.lookup import payloads
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings


def test_info_is_computed_when_the_store_opens(sample_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    payloads._cached_info.cache_clear()
    with ThreadedServer(Settings(store_path=store)) as url, httpx.Client(base_url=url) as http:
        assert http.get("/v1/health").status_code == 200  # not /v1/info
        deadline = time.monotonic() + 60
        while payloads._cached_info.cache_info().currsize == 0:
            assert time.monotonic() < deadline, "store info was not computed in the background"
            time.sleep(0.05)
        hits = payloads._cached_info.cache_info().hits
        info = http.get("/v1/info")
        assert info.status_code == 200 and info.json()["counts"]["entries"] > 0
        assert payloads._cached_info.cache_info().hits == hits + 1  # served from what was computed
