"""A build without ``--msa-dir`` says that its polymer chains get the single-sequence MSA (review
R27b s45 #2), as one without ``--ccd`` says that its ligands keep only the file's atoms: before,
forgetting ``--msa-dir`` was silent (the only sign a summary row "0 of 3"), a quiet loss for an
AF3-style training set. A re-run without ``--msa-dir`` over a store whose chains have MSAs from
files keeps them, and counts only the chains without one. Real files, real builds (LocalCluster)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, build_store

NO_MSA_DIR = "no msa_dir (--msa-dir):"


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and NO_MSA_DIR in r.getMessage()
    ]


def test_a_build_without_msa_dir_says_which_chains_get_the_single_sequence(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    store = tmp_path / "store"

    with caplog.at_level(logging.WARNING):
        summary = build_store(store, pdb, workers=1)
    assert summary.stages["msa"]["polymer chains with an MSA from files"] == "0 of 4"
    (line,) = _lines(caplog)
    assert line == ("no msa_dir (--msa-dir): 4 polymer chains (2 entries) get the single-sequence MSA (the query row "
                    "only); pass msa_dir (--msa-dir)"), line  # fmt: skip

    # with --msa-dir: no such line (1psm A, 2q2k A and the chain of 2q2k A's sequence get their files)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        summary = build_store(store, pdb, msa_dir=SAMPLES / "msas" / "openfold", workers=1)
    assert _lines(caplog) == []
    assert summary.stages["msa"]["polymer chains with an MSA from files"] == "3 of 4"

    # again without: the MSAs from files are kept; only the chain without one is counted
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        summary = build_store(store, pdb, workers=1)
    assert summary.stages["msa"]["MSAs written (from files / single sequence)"] == "0 / 0"
    assert summary.stages["msa"]["polymer chains with an MSA from files"] == "3 of 4"
    (line,) = _lines(caplog)
    # (and that those are kept as they are, naming their --msa-dir: review R41d s51 #1)
    of = SAMPLES.resolve() / "msas" / "openfold"
    assert line == ("no msa_dir (--msa-dir): 1 polymer chain (1 entry) gets the single-sequence MSA (the query row only); "
                    f"3 others keep the MSA an earlier build stored from files of --msa-dir {of} as it is, not read "
                    "again (a change to the files, or to how this featurecache reads them, is not applied); pass "
                    f"msa_dir (--msa-dir {of}) to read the files again"), line  # fmt: skip
