"""``prune --sources-gone`` logs its removal in words (review R27b s45 #10): "removed from the index:
1 entr(ies) and 0 MSA(s)" beside the stdout line "removed 1 entry whose files are gone". Real build
of the sample 1psm and 2q2k, one file removed, the real CLI (in process)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import SAMPLES, build_store, cli_in_process


def test_the_removal_line_says_entry_and_msas(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    store = tmp_path / "s"
    build_store(store, pdb, workers=1, part_size=1)
    (pdb / "1psm.cif").unlink()
    run = cli_in_process("prune", str(store), "--sources-gone", str(pdb))
    assert run.returncode == 0, run.stderr
    said = " ".join(run.stderr.split())
    assert "removed from the index: 1 entry and 0 MSAs whose source files are gone (part s-" in said, said
    assert "(ies)" not in said and "(s)" not in said, said
