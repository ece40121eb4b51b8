"""``LookupClient.refresh()`` while another thread's table fetch is in flight (RF3 2): the stale
table must not be stored over the new snapshot, and ``ids`` / ``entries`` / ``entry_meta`` /
``entry_chains`` must describe one snapshot. A real build extended under a real ``featurecache
serve``; the loader thread's fetch is held (an event, set after refresh) between the service's
answer and the client storing it: the window the review's race.py hit with a sleep."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from featurecache import open_store
from featurecache.build.run import run_build
from featurecache.client.http import LookupClient
from services.lookup.server import background_server
from tests.clusters import shared_scheduler

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
STRUCTURES = sorted((SAMPLES / "structures").iterdir())


def _build(store: Path, inputs: Path) -> None:
    run_build(pdb_dir=inputs, out=store, scheduler=shared_scheduler(1), part_size=8, progress=False)


def test_a_fetch_overtaken_by_refresh_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs, store = tmp_path / "in", tmp_path / "store"
    inputs.mkdir()
    for f in STRUCTURES[:3]:
        shutil.copy(f, inputs / f.name)
    _build(store, inputs)
    old_ids = set(open_store(store).ids)
    with background_server(store, workers=1) as url:
        client = LookupClient(url, retry_budget_s=5)
        answered, refreshed = threading.Event(), threading.Event()
        request = client.request

        def held(method: str, path: str, **kw: Any) -> httpx.Response:
            response = request(method, path, **kw)
            if threading.current_thread().name == "loader":
                answered.set()
                assert refreshed.wait(60)  # the answer is in; refresh() runs before it is stored
            return response

        monkeypatch.setattr(client, "request", held)
        loaders = [
            threading.Thread(target=client.table, args=(name,), name="loader")
            for name in ("entries", "chains")
        ]
        for t in loaders:
            answered.clear()
            t.start()
            assert answered.wait(60)
        for f in STRUCTURES[3:]:  # the store is extended under the service
            shutil.copy(f, inputs / f.name)
        _build(store, inputs)
        want = open_store(store)
        assert len(want.ids) == len(STRUCTURES) > len(old_ids)  # one entry per input file
        for _ in range(600):  # the service follows the store (checked on every request)
            if httpx.get(f"{url}/v1/info", timeout=10).json()["counts"]["entries"] == len(want.ids):
                break
            threading.Event().wait(0.1)
        client.refresh()
        assert sorted(client.ids) == sorted(want.ids)
        refreshed.set()
        for t in loaders:
            t.join(60)
        # before: the loaders stored the old 3-row tables over the new snapshot
        assert client.entries.num_rows == len(client.ids) == len(want.ids)
        assert client.chains.num_rows == want.chains.num_rows
        for eid in want.ids:
            assert client.entry_meta(eid)["id"] == eid
            assert client.entry_chains(eid) == want.entry_chains(eid), eid


def test_the_client_reads_the_token_file(
    sample_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RF3 3: FEATURECACHE_AUTH_TOKEN_FILE reaches the client as it reaches the server."""
    from featurecache.errors import FeatureCacheError

    token = "file-tok3n"
    secret = tmp_path / "tok"
    secret.write_text(token + " \n\n")
    monkeypatch.delenv("FEATURECACHE_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("FEATURECACHE_AUTH_TOKEN_FILE", raising=False)
    with background_server(sample_store, token=token) as url:
        monkeypatch.setenv("FEATURECACHE_AUTH_TOKEN_FILE", str(secret))
        assert sorted(LookupClient(url).ids) == sorted(open_store(sample_store).ids)  # before: 401
        monkeypatch.setenv("FEATURECACHE_AUTH_TOKEN_FILE", str(tmp_path / "missing"))
        with pytest.raises(
            FeatureCacheError, match=f"FEATURECACHE_AUTH_TOKEN_FILE={tmp_path / 'missing'}: cannot read"
        ):
            LookupClient(url)
        (tmp_path / "inner").write_text("a b")
        monkeypatch.setenv("FEATURECACHE_AUTH_TOKEN_FILE", str(tmp_path / "inner"))
        with pytest.raises(FeatureCacheError, match="whitespace or a control character"):
            LookupClient(url)
        monkeypatch.setenv("FEATURECACHE_AUTH_TOKEN", f" {token}\n")  # the variable wins, stripped
        assert len(LookupClient(url).ids) == len(open_store(sample_store).ids)
