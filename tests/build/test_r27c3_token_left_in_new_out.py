"""A new OUT that a killed build left with only its store token file (review R27c s45 #1
follow-up). The build writes OUT/.build-token-<random> before the store exists (the start check
of every worker) and deletes it before ``init_store``; a build killed in between left the file,
and every later build into OUT was refused: "exists and is not a featurecache store". Now such a
directory is empty as far as ``check_store_dir`` goes (as the lock file already was), and the next
build deletes the stale token file. A real build on the shared cluster."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from featurecache.build import tasks
from featurecache.build.run import run_build
from featurecache.errors import StoreError
from featurecache.store.root import BUILD_TOKEN_PREFIX, LOCK_FILE, check_store_dir
from tests.clusters import shared_scheduler
from tests.conftest import SAMPLES


def test_a_token_file_of_a_killed_build_does_not_make_a_new_out_not_a_store(tmp_path: Path) -> None:
    assert BUILD_TOKEN_PREFIX == tasks.STORE_TOKEN_PREFIX
    out = tmp_path / "store"
    out.mkdir()
    (out / LOCK_FILE).touch()
    stale = tasks.store_token_file(out, "0123456789abcdef" * 2)
    stale.write_text("0123456789abcdef" * 2)
    check_store_dir(out)

    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb / "1psm.cif")
    summary = run_build(pdb_dir=pdb, out=out, scheduler=shared_scheduler(1), progress=False)
    assert summary.n_built == 1 and summary.n_failed == 0
    assert not list(out.glob(BUILD_TOKEN_PREFIX + "*")), "the stale token file is deleted"


def test_another_file_still_makes_it_not_a_store(tmp_path: Path) -> None:
    out = tmp_path / "store"
    out.mkdir()
    tasks.store_token_file(out, "ab" * 16).write_text("ab" * 16)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="exists and is not a featurecache store"):
        check_store_dir(out)
