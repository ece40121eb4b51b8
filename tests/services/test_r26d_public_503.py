"""A 503 tells a client why in a fixed text per cause; the detail, which names the build's pid,
host and command line (paths and all), stays in the server's log (review R26d s44 #4: ``redact``
replaced only the served path, so a container's 503 read "a build is running on this store (pid
26285 on vm: featurecache build --pdb-dir /tmp/r26d/in1/pdb ...").

The build's state is made as tests/services/test_build_running_503.py makes it: the sample store
without ``index/components.arrow``, its build lock held by a real ``BuildLock`` in another process
whose command line names a path. The store is served through a symlink, as a container serves a
path spelled unlike the build's ``--out``. The server is a real uvicorn in a thread.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings
from tests.conftest import REPO

HOLD_LOCK = """
import sys
from featurecache.store.root import BuildLock
with BuildLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()  # until the test closes it
"""


def test_a_build_running_is_said_without_its_pid_host_or_paths(
    tmp_path: Path, sample_store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "secret-dir" / "store"
    shutil.copytree(sample_store, store)
    (store / "index" / "components.arrow").unlink()
    served = tmp_path / "served"
    served.symlink_to(store)  # a path spelled unlike the one the build names
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(store), "--pdb-dir", "/srv/private/pdb"],
                              cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with (
            caplog.at_level(logging.INFO, logger="services"),
            ThreadedServer(Settings(store_path=served)) as url,
        ):
            answers = [httpx.get(f"{url}{route}") for route in ("/v1/ready", "/v1/info", "/v1/entries")]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    for r in answers:
        assert r.status_code == 503 and r.headers.get("retry-after"), r.text
        detail = r.json()["detail"]
        assert detail == (
            "the store is not open: a build is running on this store and has not written its index yet: "
            "try again once it has"
        ), detail
        for secret in (str(holder.pid), str(tmp_path), "secret-dir", "/srv/private", "pdb-dir"):
            assert secret not in r.text, (secret, r.text)
    logged = "\n".join(rec.getMessage() for rec in caplog.records)
    assert f"pid {holder.pid}" in logged and str(served) in logged, logged  # for the operator


@pytest.mark.parametrize("state", ["missing", "empty", "not a store"])
def test_no_store_is_said_in_one_text(tmp_path: Path, state: str) -> None:
    store = tmp_path / "private-name"
    if state != "missing":
        store.mkdir()
    if state == "not a store":
        (store / "index").mkdir()
        (store / "notes.txt").write_text("x")
    with ThreadedServer(Settings(store_path=store)) as url:
        r = httpx.get(f"{url}/v1/ready")
    assert r.status_code == 503, r.text
    assert r.json()["detail"] == (
        "the store is not open: the store does not exist (yet): it is not built, was removed or is being rebuilt"
    ), r.text
    assert "private-name" not in r.text and "STORE" not in r.text, r.text
