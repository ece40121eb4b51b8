"""`featurecache show` of an id whose input failed says so; an empty id suggests nothing (review R33 s47 #8)."""

from __future__ import annotations

import shutil
from pathlib import Path

import featurecache
from tests.conftest import SAMPLES, build_store, cli_in_process


def test_show_of_a_failed_input_names_the_failure_and_an_empty_id_suggests_nothing(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    (pdb / "broken.cif").write_text("data_broken\n_cell.length_a 10\n")  # no atoms: fails at parse
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1).n_failed == 1
    failure = featurecache.open_store(store).failures.to_pylist()[0]
    assert failure["path"] == "broken.cif", failure  # the premise: the index lists its failure

    r = cli_in_process("show", str(store), failure["entry_id"])
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"broken.cif failed at {failure['stage']}: {failure['error_class']}" in r.stderr, r.stderr
    assert "--failures" in r.stderr

    r = cli_in_process("show", str(store), "")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "did you mean" not in r.stderr, r.stderr
