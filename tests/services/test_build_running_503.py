"""While a build runs, a store whose index lacks a file says that a build is running, not to run
one (review R2 s24 #5). Near the end of a first build the chem stage puts its component part in
place before the index that lists it is written; in that moment the lookup service's 503 detail
(and ``info``) said "index file .../components.arrow is missing; ... re-running `featurecache
build` on this store rebuilds the index", to an operator whose build was running.

The state R2 saw, made exactly: the sample store (its component part in place) without
``index/components.arrow``, its build lock held by a real ``BuildLock`` in another process.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from featurecache import open_store
from featurecache.errors import StoreError
from tests.conftest import REPO

HOLD_LOCK = """
import sys
from featurecache.store.root import BuildLock
with BuildLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()  # until the test closes it
"""


@pytest.fixture
def lockless_components(sample_store: Path, tmp_path: Path) -> Path:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    assert any(p.name.startswith("c-") for p in (store / "parts").iterdir())
    (store / "index" / "components.arrow").unlink()
    return store


def test_a_missing_index_file_during_a_build_says_a_build_is_running(lockless_components: Path) -> None:
    from services.lookup.server import ThreadedServer
    from services.lookup.settings import Settings

    store = lockless_components
    with pytest.raises(StoreError) as no_build:
        open_store(store)
    assert "re-running `featurecache build`" in str(no_build.value)  # no build: the advice stands
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(store)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreError) as building:
            open_store(store)
        said = str(building.value)
        assert "a build is running on this store" in said and f"pid {holder.pid}" in said, said
        assert "components.arrow" in said and "re-run" not in said, said
        with ThreadedServer(Settings(store_path=store)) as url:
            resp = httpx.get(f"{url}/v1/ready", timeout=30)
        assert resp.status_code == 503, resp.text
        assert "a build is running on this store" in resp.text and "re-run" not in resp.text, resp.text
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
