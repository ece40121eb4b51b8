"""The upgrade to a new featurizer names the --msa-dir it needs (review R41d s51 #1). The version
note of a store built by an older featurizer said `featurecache build --pdb-dir P --out S` "(with
the --msa-dir, --ccd and options of their build)"; run without --msa-dir, that build rebuilt the
entries but kept every stored MSA as it was (its files not read again, "MSAs up to date"), said
nothing of it when every chain had an MSA, and recorded ``--msa-dir none``, after which the note
could name no directory. Now the note is the build with the options the store records (as
``verify --repair`` prints it), and a build without --msa-dir over MSAs from files says they are
kept as they are, naming their --msa-dir. Real files, a store built by the code of featurizer
0.10.0 (git archive of 71de681), real builds."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from featurecache.cli import app
from featurecache.const import FEATURIZER_VERSION
from tests.conftest import MSAS, SAMPLES, STRUCTURES, build_store, featurecache_at

#: the last commit of featurizer 0.10.0
OLD_COMMIT = "71de681975ebf249e55bf5ab5dd6343b7fa51806"
OLD_VERSION = "0.10.0"
NO_MSA_DIR = "no msa_dir (--msa-dir):"


def _version_note(store: Path) -> str:
    result = CliRunner().invoke(app, ["info", str(store)], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    (line,) = [ln for ln in result.output.splitlines() if "featurizer" in ln and ln.startswith("warning:")]
    return line


def test_upgrade_note_names_msa_dir_and_a_build_without_it_says_msas_are_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert OLD_VERSION != FEATURIZER_VERSION  # the premise: a featurizer bump
    pdb, msa, ccd = tmp_path / "pdb", tmp_path / "msa", SAMPLES / "ccd"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", pdb)  # protein + HEM, SO4 (in the sample CCD)
    shutil.copytree(MSAS / "Protenix" / "mmcif_msa" / "3", msa / "3")  # 102m's real MSA
    pdb, msa = pdb.resolve(), msa.resolve()
    store = tmp_path / "store"
    package = featurecache_at(OLD_COMMIT, tmp_path / "pkg")
    args = ["build", "--pdb-dir", str(pdb), "--msa-dir", str(msa), "--ccd", str(ccd), "--out", str(store),
            "--workers", "1", "--no-progress"]  # fmt: skip
    old = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                         cwd=package, env={**os.environ, "PYTHONPATH": str(package)}, timeout=300)  # fmt: skip
    assert old.returncode == 0, old.stdout + old.stderr

    # the note is the complete upgrade: before, `... --pdb-dir P --out S` (with the --msa-dir, --ccd
    # and options of their build)
    note = _version_note(store)
    assert f"of featurizer {OLD_VERSION}" in note, note
    assert f"`featurecache build --pdb-dir {pdb} --msa-dir {msa} --out {store} --ccd {ccd}`" in note, note

    # the build the note used to suggest (no --msa-dir): every chain keeps its 0.10.0 MSA from files;
    # before, no line said so (the chain has an MSA, so no single-sequence chain to warn about)
    with caplog.at_level(logging.WARNING):
        summary = build_store(store, pdb, workers=1, ccd=ccd)
    assert summary.n_failed == 0 and summary.n_built == 1
    assert summary.stages["msa"]["MSAs written (from files / single sequence)"] == "0 / 0"
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and NO_MSA_DIR in r.getMessage()
    ]
    assert lines == [
        f"{NO_MSA_DIR} 1 polymer chain keeps the MSA an earlier build stored from files of --msa-dir {msa} as it "
        "is, not read again (a change to the files, or to how this featurecache reads them, is not applied); "
        f"pass msa_dir (--msa-dir {msa}) to read the files again"
    ], lines  # fmt: skip

    # the store now records --msa-dir none, and still holds the 0.10.0 MSA: the note still names the
    # directory (before: "with `featurecache build` from the same inputs")
    note = _version_note(store)
    assert f"1 MSA of {OLD_VERSION}" in note and f"1 entry of {FEATURIZER_VERSION}" in note, note
    assert f"`featurecache build --pdb-dir {pdb} --msa-dir {msa} --out {store} --ccd {ccd}`" in note, note
