"""A served store removed and built again from scratch is not ready until that build has ended.

The build publishes its index as it goes (so ``info`` and ``verify`` see the progress); before,
the service took the first build's empty index, then each partial one, for the store: ``/v1/ready``
said 200 with 0 entries, then with some, and ``/v1/entries/{id}`` answered 404 "no entry" for the
entries still to come (a training client gave up after 256 skipped samples). Now such an index is
flagged unfinished and the service answers 503 (retried) until the build ends.

Real builds (the session's cluster) into the served directory, a real ``featurecache serve``.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

import featurecache.build.run as build_run
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


def _build(store: Path, inputs: Path, part_size: int) -> LocalStore:
    run_build(pdb_dir=inputs, out=store, msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd", scheduler=shared_scheduler(1),
              part_size=part_size, progress=False)  # fmt: skip
    return open_store(store)


@pytest.mark.timeout(600)
def test_a_store_rebuilt_from_scratch_is_not_ready_until_its_build_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for f in STRUCTURES:
        shutil.copy(f, inputs / f.name)
    store = tmp_path / "store"
    first = _build(store, inputs, part_size=8)
    assert len(first.ids) == len(STRUCTURES)  # one entry per input file
    # the index refreshed after every part (INDEX_REFRESH_S is 15 s): every partial index is published
    monkeypatch.setattr(build_run, "INDEX_REFRESH_S", 0.0)
    seen: list[tuple[str, int, int | None]] = []  # (route, status, entries of a 200 /v1/ready)
    with background_server(store) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/v1/ready").json()["entries"] == len(STRUCTURES)
        shutil.rmtree(store)
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                r = http.get("/v1/ready")
                seen.append(
                    ("ready", r.status_code, r.json().get("entries") if r.status_code == 200 else None)
                )
                for entry_id in first.ids:
                    r = http.get(f"/v1/entries/{entry_id}")
                    seen.append((entry_id, r.status_code, None))
                    if r.status_code not in (200, 503):
                        seen.append(("detail: " + r.text[:200], r.status_code, None))

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            new = _build(store, inputs, part_size=1)  # the same inputs: the same entries, one part each
        finally:
            stop.set()
            poller.join()
        time.sleep(SETTLE_SECONDS)
        ready = http.get("/v1/ready")
        assert ready.status_code == 200 and ready.json()["entries"] == len(STRUCTURES), ready.text
        for entry_id in new.ids:
            assert http.get(f"/v1/entries/{entry_id}").status_code == 200
    assert sorted(new.ids) == sorted(first.ids)
    readies = [(status, n) for route, status, n in seen if route == "ready"]
    assert len(readies) >= 3, readies  # the poll ran while the store was built
    assert (503, None) in readies  # the store was gone or unfinished at first
    partial = [(status, n) for status, n in readies if status == 200 and n != len(STRUCTURES)]
    assert not partial, f"/v1/ready said ready with fewer entries than the finished build's: {partial[:5]}"
    other = [(route, status) for route, status, _ in seen if route != "ready" and status not in (200, 503)]
    assert not other, f"entries of the finished store answered other than 200 / 503 meanwhile: {other[:6]}"
