"""Review R38a s50 leftovers #1: an entry stored from a file under a ``--pdb-dir`` subdirectory that
has become unlistable is kept (R38a #2), and it is not reported as "sources gone" either: a source
that cannot be checked is not known to be gone (its directory is a failure row of its own).

Both ways a directory can fail to be listed (review R40c s51 #2): ``chmod 0`` (not searchable
either, so the file cannot be checked: ``discover.present`` is None) and ``chmod 0o111``
(searchable, not listable: the file is there to ``lstat``, but this build could not list it, so it
is no input; only its directory's failure row, ``under_unlisted``, keeps it from being "gone")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from featurecache.store.reader import open_store
from tests.build.test_r38a_unreadable_dirs import _build, _no_dac
from tests.conftest import SAMPLES


@pytest.mark.parametrize("mode", [0, 0o111], ids=["unsearchable", "searchable"])
def test_entries_under_an_unlistable_subdirectory_are_not_sources_gone(tmp_path: Path, mode: int) -> None:
    _no_dac()
    pdb, out = tmp_path / "pdb", tmp_path / "store"
    (pdb / "sub").mkdir(parents=True)
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    shutil.copy(SAMPLES / "structures" / "1A8O.pdb", pdb / "sub")
    r = _build(pdb, out)
    assert r.returncode == 0, r.stderr[-2000:]
    (pdb / "sub").chmod(mode)
    try:
        r = _build(pdb, out)
        assert r.returncode == 1, r.stderr[-2000:]  # the directory is a failure
        fails = open_store(out).failures.to_pylist()
        assert [(f["path"], f["stage"]) for f in fails] == [("sub/", "discover")], fails
        out_err = r.stdout + r.stderr
        # neither the warning nor the summary's row
        assert "whose source files are gone" not in out_err, out_err[-3000:]
        assert "sources gone" not in r.stdout, r.stdout[-3000:]
        assert set(open_store(out).entries.column("id").to_pylist()) == {"102m", "1A8O"}
    finally:
        (pdb / "sub").chmod(0o755)
    # the file really gone: reported as gone
    (pdb / "sub" / "1A8O.pdb").unlink()
    r = _build(pdb, out)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "1 stored entry whose source files are gone" in r.stdout + r.stderr
    assert "(1A8O)" in r.stderr or "1A8O" in r.stderr, r.stderr[-3000:]
