"""A build leaves a file in ``index/`` whose name is none of featurecache's tables in place, with a
warning (review R28c s46 #8). The rebuild of the index deleted every ``index/*.arrow`` of another
index generation, so a user's backup copy (``entries.2025-backup.arrow``) went without a word.

Real builds (the session's one-worker cluster) of the repo's sample 1psm, then 1psm and 2q2k."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

import featurecache
from featurecache.store.index import index_generation, read_table
from tests.conftest import SAMPLES, build_store


def test_a_backup_copy_in_index_is_kept_by_the_build(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    assert build_store(store, pdb, workers=1).n_failed == 0
    backup = store / "index" / "entries.2025-backup.arrow"
    shutil.copy(store / "index" / "entries.arrow", backup)
    before = backup.read_bytes()

    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)  # a new entry: a new index generation
    with caplog.at_level(logging.WARNING, logger="featurecache.store.index"):
        done = build_store(store, pdb, workers=1)
    assert done.n_failed == 0 and done.n_built == 1
    assert backup.read_bytes() == before  # left as it was
    old = index_generation(read_table(backup, memory_map=False))
    assert old is not None and old != index_generation(read_table(store / "index" / "entries.arrow"))
    warned = [r.getMessage() for r in caplog.records]
    assert any(f"{backup} is not a featurecache index table: left in place" in m for m in warned), warned
    assert sorted(featurecache.open_store(store).ids) == ["1psm", "2q2k"]  # readers leave it out
