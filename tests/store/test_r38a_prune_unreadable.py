"""Review R38a s50 #1 (prune side): ``prune --sources-gone`` crashed with a traceback when a stored
entry's (or MSA's) source lay under a directory that could no longer be searched (``Path.exists``
raises PermissionError). A source that cannot be checked is not known to be gone: nothing built
from it is removed, and one warning names it.

As root, permissions bite only without the DAC capabilities: the CLI runs under ``setpriv
--bounding-set -dac_override,-dac_read_search``; a user other than root gets them directly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, build_store, store_snapshot

DROP = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


def _prune(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "250"}
    r = subprocess.run([*DROP, sys.executable, "-m", "featurecache.cli", "prune", *args],
                       capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r


def test_sources_under_an_unsearchable_directory_are_not_removed(tmp_path: Path) -> None:
    if DROP:
        if shutil.which("setpriv") is None:
            pytest.skip("as root, needs setpriv (util-linux) to drop the DAC capabilities")
        probe = subprocess.run([*DROP, "true"], capture_output=True, timeout=30)
        if probe.returncode != 0:
            pytest.skip(f"setpriv cannot drop the DAC capabilities here: {probe.stderr!r}")
    pdb, msa, store = tmp_path / "pdb", tmp_path / "msa", tmp_path / "store"
    (pdb / "locked").mkdir(parents=True)
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb / "locked")
    for entry, where in (("2q2k", msa / "keep"), ("1psm", msa / "locked")):
        (where / f"{entry}_A").mkdir(parents=True)
        shutil.copy(SAMPLES / "msas" / "openfold" / f"{entry}_A" / "mgnify_hits.sto", where / f"{entry}_A")
    summary = build_store(store, pdb, workers=1, msa_dir=msa, ccd=SAMPLES / "ccd")
    assert summary.n_failed == 0
    before = store_snapshot(store)
    (pdb / "locked").chmod(0)
    (msa / "locked").chmod(0)
    try:
        for extra in (["--dry-run"], []):
            r = _prune(str(store), "--sources-gone", str(pdb), "--msa-dir", str(msa), *extra)
            assert r.returncode == 0, r.stdout + r.stderr[-2000:]
            assert "cannot tell whether 2 paths still exist" in r.stderr, r.stderr
            assert str(pdb / "locked" / "1psm.cif") in r.stderr
            assert str(msa / "locked" / "1psm_A" / "mgnify_hits.sto") in r.stderr
            assert store_snapshot(store) == before  # nothing removed
    finally:
        (pdb / "locked").chmod(0o755)
        (msa / "locked").chmod(0o755)
