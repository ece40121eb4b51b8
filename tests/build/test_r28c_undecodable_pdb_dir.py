"""A ``--pdb-dir`` whose path holds a byte that is not valid UTF-8 builds (review R28c s46 #2). Two
writes took the path as text that UTF-8 cannot encode (``os.fsdecode``'s lone surrogate), and the
build ended with a traceback and exit 1: the lock record (the command line, ``store.root``) and the
structure-digest cache (the resolved directory in an Arrow string, ``build.digest_cache``). Both
now write such a byte ``\\xNN``, as the index writes such a file name.

A real build (the session's one-worker cluster), then a real ``featurecache build`` in a process of
its own, of the repo's sample 1psm in a directory named ``in_\\xff_dir``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import featurecache
from featurecache.build.digest_cache import RACY_NS, cache_path
from featurecache.store.index import read_table
from featurecache.store.root import LOCK_FILE
from tests.conftest import SAMPLES, build_store


@pytest.fixture
def pdb(tmp_path: Path) -> Path:
    """``tmp_path/in_\\xff_dir/pdb`` holding 1psm.cif (skips where the file system refuses the name)."""
    raw = os.path.join(os.fsencode(tmp_path), b"in_\xff_dir", b"pdb")
    try:
        os.makedirs(raw)
    except OSError as exc:  # e.g. a file system that holds UTF-8 names only
        pytest.skip(f"the file system refuses a name that is not UTF-8: {exc}")
    out = Path(os.fsdecode(raw))
    shutil.copy(SAMPLES / "structures" / "1psm.cif", out)
    time.sleep(RACY_NS / 1e9 + 0.2)  # older than the digest cache's racy window: its digest is kept
    return out


def test_a_pdb_dir_whose_path_is_not_utf8_builds(pdb: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = build_store(store, pdb, workers=1)
    assert first.n_failed == 0 and first.n_built == 1
    assert featurecache.open_store(store).ids == ["1psm"]
    # the digests are kept under the directory as the index writes paths: the byte as \xff
    dirs = set(read_table(cache_path(store), memory_map=False).column("dir").to_pylist())
    assert dirs == {str(pdb.resolve()).replace("\udcff", "\\xff")}, dirs

    # the CLI: its lock record holds the command line, with the directory in it
    done = subprocess.run(
        [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", os.fsencode(pdb), "--out", str(store),
         "--workers", "1", "--no-progress"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "1psm" not in done.stdout or "skipped (up to date)" in done.stdout
    record = (store / LOCK_FILE).read_bytes().decode("utf-8")  # UTF-8 text
    assert "in_\\xff_dir" in record, record
    assert featurecache.open_store(store).ids == ["1psm"]
