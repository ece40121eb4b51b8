"""A store directory removed under a server whose path still leads to it (review R26d s44 #1).

In a container with the store directory itself bind-mounted (``-v /srv/store:/store:ro``), ``rm -rf``
and a rebuild on the host (or a new store renamed into place) leave ``/store`` on the old, deleted
directory: the new store is never seen, ``/v1/ready`` answered 503 forever and the HEALTHCHECK
(``/v1/health``) stayed healthy, so no restart policy ever remounted it. ``/proc/self/fd/N`` of a
directory this process holds open behaves as that mount does (the path leads to the directory
itself, not to its name), so it stands in for one here. The server is a real uvicorn in a thread.

Now: one ERROR line, ``/v1/ready`` 503 saying a restart is needed, ``/v1/health`` 503 (the
healthcheck module exits 1 naming it). A path that leads to the new directory (``featurecache serve``
on the host) still follows the rebuild and stays healthy.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.lookup import healthcheck
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings


@pytest.fixture
def pinned(tmp_path: Path, sample_store: Path) -> Iterator[tuple[Path, Path]]:
    """A copy of the sample store, and a path that leads to its directory as a bind mount does."""
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield store, Path(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def wait_for(url: str, status: int, timeout: float = 20.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(url, timeout=10)
        if r.status_code == status or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_a_removed_store_directory_under_a_pinned_path_is_unhealthy(
    pinned: tuple[Path, Path],
    sample_store: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, path = pinned
    settings = Settings(store_path=path, store_retry_seconds=0, store_check_seconds=0)
    with ThreadedServer(settings) as url:
        assert httpx.get(f"{url}/v1/ready").status_code == 200
        assert httpx.get(f"{url}/v1/health").status_code == 200
        shutil.rmtree(store)
        shutil.copytree(sample_store, store)  # rebuilt at the host's path: unseen through the pin
        assert os.stat(path).st_nlink == 0  # the premise: the path leads to the removed directory
        with caplog.at_level(logging.DEBUG, logger="services"):
            health = wait_for(f"{url}/v1/health", 503)
            assert health.status_code == 503, health.text
            assert health.json()["status"] == "unhealthy", health.text
            assert "must be restarted" in health.json()["detail"], health.text
            for _ in range(5):
                ready = httpx.get(f"{url}/v1/ready")
                assert ready.status_code == 503 and "must be restarted" in ready.json()["detail"], ready.text
                assert httpx.get(f"{url}/v1/entries").status_code == 503
                time.sleep(0.05)
            monkeypatch.setattr(healthcheck, "health_url", lambda pid=1: f"{url}/v1/health")
            assert healthcheck.main([]) == 1
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, [r.getMessage() for r in errors]
        assert "mount the store's parent directory" in errors[0].getMessage(), errors[0].getMessage()
        assert str(store.parent) not in health.text + ready.text


def test_a_store_rebuilt_at_a_path_that_follows_it_stays_healthy(tmp_path: Path, sample_store: Path) -> None:
    """``featurecache serve`` on the host: the path leads to whatever is there now."""
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    settings = Settings(store_path=store, store_retry_seconds=0, store_check_seconds=0)
    with ThreadedServer(settings) as url:
        assert httpx.get(f"{url}/v1/ready").status_code == 200
        shutil.rmtree(store)
        assert httpx.get(f"{url}/v1/health").status_code == 200
        assert httpx.get(f"{url}/v1/ready").status_code == 503
        shutil.copytree(sample_store, store)
        ready = wait_for(f"{url}/v1/ready", 200)
        assert ready.status_code == 200, ready.text
        assert httpx.get(f"{url}/v1/health").status_code == 200
