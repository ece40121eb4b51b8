"""Review R38a s50 leftovers #3: ``prune --sources-gone PDB --msa-dir M`` where every file under M
lies in a directory that cannot be listed stops (exit 2, "no MSA file ... not mounted? emptied?"):
that line names the directory and why it cannot be listed, which it did not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.build.test_r38a_unreadable_dirs import DROP, _build, _no_dac
from tests.conftest import SAMPLES


def test_prune_refusal_names_the_unlistable_msa_subdirectory(tmp_path: Path) -> None:
    _no_dac()
    pdb, msa, out = tmp_path / "pdb", tmp_path / "msa", tmp_path / "store"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    shutil.copytree(SAMPLES / "msas" / "openfold" / "2q2k_A", msa / "locked" / "2q2k_A")
    r = _build(pdb, out, msa)
    assert r.returncode == 0, r.stderr[-2000:]
    (msa / "locked").chmod(0)
    try:
        args = [sys.executable, "-m", "featurecache.cli", "prune", str(out), "--sources-gone", str(pdb),
                "--msa-dir", str(msa), "--dry-run"]  # fmt: skip
        r = subprocess.run([*DROP, *args], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "250"})  # fmt: skip
    finally:
        (msa / "locked").chmod(0o755)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 2, r.stderr[-2000:]
    line = " ".join(r.stderr.split())
    assert "no MSA file" in line and "nothing removed" in line, line
    assert f"cannot be listed: {msa}/locked/ (Permission denied)" in line, line
