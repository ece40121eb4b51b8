"""Review R26b s44 #1: after the input directory was renamed (or moved), a build of it that left
out ``--ccd`` was not refused: the check took the settings of the parts recording this
``--pdb-dir`` only, and every part recorded the old path, yet the build matched their entries by
relative path and rebuilt every one of them without CCD definitions (exit 0, no warning). The
entries a build takes decide, whatever directory their parts record."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.clusters import scheduler_args
from tests.conftest import SAMPLES, build_store, cli_in_process, store_snapshot


def test_a_renamed_directory_keeps_its_recorded_settings(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)  # heme: a CCD component
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    store = tmp_path / "store"
    first = build_store(store, pdb, workers=1, ccd=SAMPLES / "ccd")
    assert first.n_failed == 0 and first.n_built == 2
    renamed = tmp_path / "pdb_renamed"
    pdb.rename(renamed)
    before = store_snapshot(store)

    base = ["build", "--pdb-dir", str(renamed), "--out", str(store), *scheduler_args(1), "--no-progress"]
    left_out = cli_in_process(*base)
    assert left_out.returncode == 2, left_out.stdout + left_out.stderr
    assert f"it was built with --ccd {(SAMPLES / 'ccd').resolve()}" in left_out.stderr, left_out.stderr
    assert store_snapshot(store) == before

    # given, nothing is rebuilt: the renamed directory's entries are up to date
    again = build_store(store, renamed, workers=1, ccd=SAMPLES / "ccd")
    assert (again.n_built, again.n_skipped, again.n_failed) == (0, 2, 0)
