"""Review R40c s51 #4: ``prune --sources-gone PDB --msa-dir M`` where every stored MSA's file is gone
from M and a FIFO named ``queries.fasta`` is left there. The guard against an emptied or unmounted
``--msa-dir`` looks at a file's content when no name says it is an MSA (a ``.fasta`` name first),
but never at a listed path it could not read (7ba8c74: FIFOs, broken links, directories that cannot
be listed). Opening the FIFO would block until a writer comes, and the prune would hang. So the
prune stops at once: exit 2, "no MSA file ... nothing removed". A hang fails the test at its
timeout (the prune's process group is killed); it does not hang CI."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLES


def _cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``featurecache ARGS`` in a session of its own; past ``timeout`` its process group is killed and
    the test fails."""
    env = {**os.environ, "FEATURECACHE_DASHBOARD": "0", "COLUMNS": "250"}
    p = subprocess.Popen([sys.executable, "-m", "featurecache.cli", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)  # fmt: skip
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail(f"featurecache {args[0]}: still running after {timeout} s (blocked opening a FIFO?)")
    assert "Traceback" not in err, err[-3000:]
    return subprocess.CompletedProcess(args, p.returncode, out, err)


@pytest.mark.timeout(600)
def test_prune_msa_dir_guard_does_not_open_a_fifo_named_queries_fasta(tmp_path: Path) -> None:
    pdb, msa, out = tmp_path / "pdb", tmp_path / "msa", tmp_path / "store"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    shutil.copytree(SAMPLES / "msas" / "openfold" / "2q2k_A", msa / "2q2k_A")
    r = _cli("build", "--pdb-dir", str(pdb), "--msa-dir", str(msa), "--ccd", str(SAMPLES / "ccd"), "--out", str(out),
             "--workers", "1", "--no-progress", "--no-dashboard", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]

    shutil.rmtree(msa / "2q2k_A")
    os.mkfifo(msa / "queries.fasta")
    r = _cli("prune", str(out), "--sources-gone", str(pdb), "--msa-dir", str(msa), "--dry-run", timeout=90)
    assert r.returncode == 2, r.stderr[-2000:]
    line = " ".join(r.stderr.split())
    assert f"--msa-dir {msa}: no MSA file" in line, line
    assert "1 stored MSA was built from it (not mounted? emptied?" in line, line
    assert "nothing removed" in line, line
    assert (msa / "queries.fasta").exists()  # the FIFO, untouched
