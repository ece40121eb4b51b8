"""Review R39a s50 #7 (first two bullets): a directory under ``--msa-dir`` that cannot be listed (a
failure row of stage ``msa``, review R38a s50 #2) was counted among the MSA files of the build
summary (``msa: files``), and its failure message, the directory's own, ended "…; the file is left
out", the suffix of a file's row. A directory is not counted as a file, and its row says what its
own reason says (none of its files is read, the MSAs stored from them are kept).

As root, permissions bite only without the DAC capabilities: the CLI runs under ``setpriv
--bounding-set -dac_override,-dac_read_search``; a user other than root gets them directly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from featurecache.store.reader import open_store
from tests.conftest import SAMPLES

DROP = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


def _no_dac() -> None:
    """Skip where permissions cannot be made to bite (root without a working setpriv)."""
    if not DROP:
        return
    if shutil.which("setpriv") is None:
        pytest.skip("as root, needs setpriv (util-linux) to drop the DAC capabilities")
    probe = subprocess.run([*DROP, "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop the DAC capabilities here: {probe.stderr.decode(errors='replace')}")


def _build(pdb: Path, out: Path, msa: Path) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(pdb), "--msa-dir", str(msa),
            "--ccd", str(SAMPLES / "ccd"), "--out", str(out), "--workers", "1", "--no-progress",
            "--no-dashboard"]  # fmt: skip
    env = {**os.environ, "FEATURECACHE_DASHBOARD": "0", "COLUMNS": "250"}
    r = subprocess.run([*DROP, *args], capture_output=True, text=True, timeout=300, env=env)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r


def _summary_row(stdout: str, label: str) -> str:
    (line,) = [ln for ln in stdout.splitlines() if f" {label} " in ln]
    return line.split(label, 1)[1].strip(" │|")


def test_an_unlisted_msa_directory_is_no_file_and_its_row_says_so(tmp_path: Path) -> None:
    _no_dac()
    pdb, msa, out = tmp_path / "pdb", tmp_path / "msa", tmp_path / "store"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    for d in ("1psm_A", "2q2k_A"):
        (msa / d).mkdir(parents=True)
        shutil.copy(SAMPLES / "msas" / "openfold" / d / "mgnify_hits.sto", msa / d)
    r = _build(pdb, out, msa)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _summary_row(r.stdout, "msa: files") == "2"

    (msa / "2q2k_A").chmod(0)
    try:
        r = _build(pdb, out, msa)
    finally:
        (msa / "2q2k_A").chmod(0o755)
    assert r.returncode == 1, r.stderr[-2000:]
    fails = {f["path"]: f for f in open_store(out).failures.to_pylist()}
    assert set(fails) == {"2q2k_A/"}, fails
    message = fails["2q2k_A/"]["message"]
    assert message.startswith("cannot list the directory 2q2k_A/: Permission denied"), message
    assert message.endswith("make it readable (and searchable) and run the build again"), message
    assert "left out" not in message
    assert _summary_row(r.stdout, "msa: files") == "1"  # 1psm_A/mgnify_hits.sto; not the directory


def test_no_alignment_warning_names_an_unlisted_directory_as_no_file(tmp_path: Path) -> None:
    _no_dac()
    pdb, msa, out = tmp_path / "pdb", tmp_path / "msa", tmp_path / "store"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    (msa / "locked").mkdir(parents=True)
    (msa / "locked").chmod(0)
    try:
        r = _build(pdb, out, msa)
    finally:
        (msa / "locked").chmod(0o755)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "0 files; 1 directory that cannot be listed)" in " ".join(r.stderr.split()), r.stderr[-3000:]
    assert _summary_row(r.stdout, "msa: files") == "0"
