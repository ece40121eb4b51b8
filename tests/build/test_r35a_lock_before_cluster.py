"""A new store's build takes its lock before its Dask cluster starts, and a build that ends before it
wrote the store leaves nothing it made (review R35a s49 #7).

Before, the lock was taken once the cluster had started (seconds): meanwhile ``info`` on the new
store said "does not exist (no featurecache store there)" and ``prune`` "is not a featurecache store",
while the build was running. Now they name the build. A build refused or failed before it wrote the
store (no ``zarr.json``) removes the lock file and the directories it created; before, a refusal
after the lock (the workers' path check, a downgrade) left OUT with its lock file.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from featurecache.build import run as build_run
from featurecache.build.run import run_build
from featurecache.errors import StoreError
from featurecache.store.root import LOCK_FILE
from tests.conftest import SAMPLES, build_store, cli_in_process


def _one_input(tmp_path: Path) -> Path:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb / "1psm.cif")
    return pdb


def test_info_and_prune_name_the_build_while_its_cluster_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdb, out = _one_input(tmp_path), tmp_path / "store"
    seen: dict[str, Any] = {}
    real = build_run._make_client

    def reading_first(*args: Any, **kwargs: Any) -> Any:
        seen["info"] = cli_in_process("info", str(out))
        seen["prune"] = cli_in_process("prune", str(out), "--dry-run")
        return real(*args, **kwargs)

    monkeypatch.setattr(build_run, "_make_client", reading_first)
    build_store(out, pdb, workers=1)
    for name in ("info", "prune"):
        r = seen[name]
        said = " ".join(r.stderr.split())
        assert r.returncode == 3, (name, r.returncode, r.stderr)
        # before: "does not exist (no featurecache store there)" / "is not a featurecache store"
        assert f"a build is running on this store (pid {os.getpid()}" in said, (name, r.stderr)
        assert "has not written the store yet" in said and "does not exist" not in said, (name, r.stderr)
    assert cli_in_process("info", str(out)).returncode == 0


def test_a_build_that_fails_before_writing_the_store_leaves_nothing_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdb = _one_input(tmp_path)
    with socket.socket() as s:  # a port nothing listens on: the scheduler cannot be reached
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    new = tmp_path / "new"
    with pytest.raises(StoreError):
        run_build(
            pdb_dir=pdb, out=new / "deeper" / "store", scheduler=f"tcp://127.0.0.1:{closed}", progress=False
        )
    assert not new.exists()  # OUT and the directories made for it are gone

    # refused after the cluster started (the workers' path check): before, OUT was left with its lock
    def refused(*args: Any, **kwargs: Any) -> None:
        raise StoreError("refusing to build: a worker does not see the store; nothing was written")

    monkeypatch.setattr(build_run, "_check_worker_paths", refused)
    from tests.clusters import shared_scheduler

    with pytest.raises(StoreError, match="refusing to build"):
        run_build(pdb_dir=pdb, out=new / "store", scheduler=shared_scheduler(1), progress=False)
    assert not new.exists()
    # an OUT that was there (empty, or with an earlier build's lock file) stays as it was
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(StoreError, match="refusing to build"):
        run_build(pdb_dir=pdb, out=empty, scheduler=shared_scheduler(1), progress=False)
    assert empty.is_dir() and list(empty.iterdir()) == []
    (empty / LOCK_FILE).write_text("")
    with pytest.raises(StoreError, match="refusing to build"):
        run_build(pdb_dir=pdb, out=empty, scheduler=shared_scheduler(1), progress=False)
    assert [p.name for p in empty.iterdir()] == [LOCK_FILE]
