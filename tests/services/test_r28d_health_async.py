"""``/v1/health`` answers while every thread of the server's threadpool is busy (review R28d s46 #7:
it and its dependency ran in the threadpool, behind data requests)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings

#: more data requests than anyio's default threadpool has threads (40)
BLOCKED = 48


def test_health_answers_with_the_threadpool_full(sample_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = ThreadedServer(Settings(store_path=sample_store, auth_token=None))
    with server as url:
        release, entered = threading.Event(), threading.Semaphore(0)
        holder = server.app.state.store
        snapshot = holder.snapshot

        def stuck_snapshot(*args: Any, **kwargs: Any) -> Any:  # a data request's dependency, in a thread
            entered.release()
            release.wait(30)
            return snapshot(*args, **kwargs)

        monkeypatch.setattr(holder, "snapshot", stuck_snapshot)
        with ThreadPoolExecutor(BLOCKED) as pool:
            try:
                pending = [pool.submit(httpx.get, f"{url}/v1/info", timeout=60) for _ in range(BLOCKED)]
                for _ in range(40):  # the threadpool is full
                    assert entered.acquire(timeout=20)
                r = httpx.get(f"{url}/v1/health", timeout=3)
                assert r.status_code == 200 and r.json() == {"status": "ok"}
            finally:
                release.set()
            assert all(f.result().status_code == 200 for f in pending)
