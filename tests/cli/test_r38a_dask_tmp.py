"""A DASK_TEMPORARY_DIRECTORY the build cannot make its scratch directory in stops it with exit 3 and
one line naming the cause, the directory and the variable (review R38a s50 #5: two chained
tracebacks and exit 1, which the help defines as "some inputs failed")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLES


def _build(tmp_path: Path, dask_tmp: Path, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    pdb = tmp_path / "pdb"
    pdb.mkdir(exist_ok=True)
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    env = {**os.environ, "DASK_TEMPORARY_DIRECTORY": str(dask_tmp), "FEATURECACHE_DASHBOARD": "0"}
    return subprocess.run([*prefix, sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(pdb),
                           "--out", str(tmp_path / "s"), "--workers", "1", "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip


def _check(r: subprocess.CompletedProcess[str], tmp_path: Path, dask_tmp: Path, cause: str) -> None:
    assert r.returncode == 3, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "Cluster closed without starting up" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: the build's embedded Dask cluster could not start: "), lines
    assert cause in lines[0], lines
    assert f"temporary directory is {dask_tmp} (DASK_TEMPORARY_DIRECTORY)" in lines[0], lines
    assert not (tmp_path / "s").exists()  # nothing written


def test_dask_temporary_directory_that_is_a_file(tmp_path: Path) -> None:
    dask_tmp = tmp_path / "afile"
    dask_tmp.write_text("not a directory\n")
    _check(_build(tmp_path, dask_tmp), tmp_path, dask_tmp, "Not a directory")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_dask_temporary_directory_not_writable(tmp_path: Path) -> None:
    dask_tmp = tmp_path / "ro"
    dask_tmp.mkdir(mode=0o555)
    # root without the capabilities that let it write anywhere: the mode bites (as for another user)
    nocap = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")
    _check(_build(tmp_path, dask_tmp, nocap), tmp_path, dask_tmp, "Permission denied")
