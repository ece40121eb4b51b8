"""A store that changes while it is served: extended in place, rebuilt from scratch.

Real builds into the served directory and a real ``featurecache serve --workers 2``. The service
must pick up the new index without a restart, and every request that cannot read the store while
it changes must get a JSON 503 (retryable) that names no path on the server, never a 500 or stale
data. (Data damaged in a store that did not change is a 500: test_lookup_damaged_store.py.)
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import numpy as np
from lookup_helpers import metric_samples

from featurecache import open_store
from featurecache.build.run import run_build
from featurecache.store.reader import LocalStore
from services.lookup.server import background_server
from tests.clusters import shared_scheduler

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
STRUCTURES = sorted((SAMPLES / "structures").iterdir())
#: longer than the service's full-check interval (Settings.store_check_seconds, 1 s by default)
SETTLE_SECONDS = 1.5


def _build(store: Path, inputs: Path, part_size: int = 8) -> LocalStore:
    run_build(pdb_dir=inputs, out=store, msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd", scheduler=shared_scheduler(1),
              part_size=part_size, progress=False)  # fmt: skip
    return open_store(store)


def _inputs(root: Path, files: list[Path]) -> Path:
    root.mkdir(exist_ok=True)
    for f in files:
        shutil.copy(f, root / f.name)
    return root


def _assert_same_entry(body: bytes, want: LocalStore, entry_id: str) -> None:
    from featurecache.store import arrow_io

    (record,) = arrow_io.decode(body)
    entry = want.entry(entry_id)
    for name, arr in record.arrays.items():
        g, _, f = name.partition("/")
        np.testing.assert_array_equal(arr, getattr(entry, g)[f], err_msg=f"{entry_id} {name}")


def _assert_unavailable(r: httpx.Response, hidden: Path) -> None:
    """A JSON 503 the client retries, naming no server path."""
    assert r.status_code == 503, (r.status_code, r.text[:300])
    assert r.headers["content-type"] == "application/json" and "detail" in r.json()
    assert "retry-after" in r.headers
    assert str(hidden) not in r.text, r.text


def _no_500(url: str) -> None:
    samples = metric_samples(httpx.get(f"{url}/metrics").text)
    five = {
        (dict(lab)["route"], dict(lab)["status"]): v
        for (n, lab), v in samples.items()
        if n == "featurecache_lookup_requests_total" and dict(lab)["status"] not in ("503",)
        and dict(lab)["status"].startswith("5")
    }  # fmt: skip
    assert not five, f"5xx other than 503: {five}"


def test_extending_the_served_store_is_picked_up(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path / "in", STRUCTURES[:3])
    store = tmp_path / "store"
    old = _build(store, inputs)
    with background_server(store, workers=2) as url, httpx.Client(base_url=url) as http:
        assert http.get("/v1/info").json()["counts"]["entries"] == len(old.ids)
        _inputs(inputs, STRUCTURES[3:])
        new = _build(store, inputs)  # the same directory, extended in place
        added = [i for i in new.ids if i not in old.ids]
        assert added and len(new.ids) == len(STRUCTURES)
        time.sleep(SETTLE_SECONDS)
        for _ in range(6):  # requests reach both workers
            assert http.get("/v1/info").json()["counts"]["entries"] == len(new.ids)
            ready = http.get("/v1/ready")
            assert ready.status_code == 200 and ready.json()["entries"] == len(new.ids)
            listing = http.get("/v1/entries", params={"limit": 100}).json()
            assert [item["id"] for item in listing["items"]] == new.ids
            for entry_id in added:
                r = http.get(f"/v1/entries/{entry_id}")
                assert r.status_code == 200, (entry_id, r.status_code, r.text[:300])
                _assert_same_entry(r.content, new, entry_id)
        _no_500(url)


def test_rebuilding_the_served_store_from_scratch(sample_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)  # the session's build of every sample structure (it built its own)
    old = open_store(store)
    assert len(old.ids) == len(STRUCTURES)
    assert len(list((store / "parts").glob("s-*"))) == 1  # one part holds every entry
    with background_server(store, workers=2) as url, httpx.Client(base_url=url) as http:
        for entry_id in old.ids:
            assert http.get(f"/v1/entries/{entry_id}").status_code == 200
        shutil.rmtree(store)
        for _ in range(4):  # at once: never the old index over missing (zero-filled) arrays
            _assert_unavailable(http.get(f"/v1/entries/{old.ids[-1]}"), tmp_path)
            _assert_unavailable(http.get("/v1/ready"), tmp_path)
        # the same part names, other contents: s-000000 now holds one entry
        new = _build(store, _inputs(tmp_path / "some", STRUCTURES[2:5]), part_size=1)
        time.sleep(SETTLE_SECONDS)
        gone = [i for i in old.ids if i not in new.ids]
        for _ in range(4):
            ready = http.get("/v1/ready")
            assert ready.status_code == 200 and ready.json()["entries"] == len(new.ids)
            assert http.get("/v1/info").json()["counts"]["entries"] == len(new.ids)
            for entry_id in new.ids:
                r = http.get(f"/v1/entries/{entry_id}")
                assert r.status_code == 200, (entry_id, r.status_code, r.text[:300])
                _assert_same_entry(r.content, new, entry_id)
            for entry_id in gone:
                r = http.get(f"/v1/entries/{entry_id}")
                assert r.status_code == 404 and str(tmp_path) not in r.text, r.text
        _no_500(url)
