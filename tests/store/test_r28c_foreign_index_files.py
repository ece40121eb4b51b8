"""A file in ``index/`` whose name is none of featurecache's tables (``layout.INDEX_FILES``) is not
read: a warning, and every reader opens the store (review R28c s46 #7). Every ``index/*.arrow`` was
read, so one that did not (an editor's file, a partial copy) made info, verify, serve and training
refuse the store with "re-running build rebuilds the index", and the build left the file in place.

A real build (one worker) of the repo's sample 1psm; real CLI runs."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

import featurecache
from tests.conftest import SAMPLES, build_store, cli_in_process


@pytest.fixture
def store(tmp_path: Path) -> Path:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    out = tmp_path / "store"
    assert build_store(out, pdb, workers=1).n_failed == 0
    return out


def test_an_unreadable_file_of_another_name_in_index_is_left_out(
    store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stray = store / "index" / "extra.arrow"
    stray.write_text("junk\n")  # 5 bytes: no Arrow file
    with caplog.at_level(logging.WARNING, logger="featurecache.store.reader"):
        s = featurecache.open_store(store)
    assert s.ids == ["1psm"]
    warned = [r.getMessage() for r in caplog.records]
    assert any(f"{stray} is not a featurecache index table" in m for m in warned), warned
    commands = [("info",), ("verify", "--no-progress"), ("prune", "--dry-run")]
    for command, *options in commands:
        args = (command, str(store), *options)
        done = cli_in_process(*args)
        assert done.returncode == 0, (args, done.stdout + done.stderr)
    assert stray.read_text() == "junk\n"  # not the store's to delete
