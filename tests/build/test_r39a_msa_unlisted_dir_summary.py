"""Review R39a s50 #7 (first two bullets): a directory under ``--msa-dir`` that cannot be listed (a
failure row of stage ``msa``, review R38a s50 #2) was counted among the MSA files of the build
summary (``msa: files``), and its failure message, the directory's own, ended "…; the file is left
out", the suffix of a file's row. A directory is not counted as a file, and its row says what its
own reason says (none of its files is read, the MSAs stored from them are kept).

As root, permissions bite only without the DAC capabilities: the CLI runs under ``setpriv
--bounding-set -dac_override,-dac_read_search``; a user other than root gets them directly."""

from __future__ import annotations

import shutil
from pathlib import Path

from featurecache.store.reader import open_store
from tests.build.test_r38a_unreadable_dirs import _build, _no_dac
from tests.conftest import SAMPLES


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
