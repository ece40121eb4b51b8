"""Small real stores for the report tests of review R33 (tests/report/test_r33_*.py), built once per
test run: file names that read as spreadsheet formulas, an MSA from files that holds the query row
alone, no --ccd, and a store of failures only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import MSAS, SAMPLES, STRUCTURES, build_store, session_store

#: an input whose entry id (its file name) a spreadsheet would evaluate as a formula
FORMULA_ENTRY = '=HYPERLINK("http:x","y")'
#: inputs that fail at parse (header-only PDBs) and whose names start with a formula character: a
#: tab and a carriage return too (legal in a Linux file name; review R40c s51 #7: without them the
#: CSV test's check of those two could not fail)
FORMULA_FAILURES = ("+cmd.pdb", "@sum.pdb", "-x.pdb", "\t=1+2.pdb", "\r=cmd.pdb")


@pytest.fixture(scope="session")
def r33_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Without --ccd: 2q2k (an MSA from files deeper than the query), 209d-assembly1 (chain C's
    MSA from files is the query row alone), :data:`FORMULA_ENTRY` (5y2e, no MSA from files: a
    single-sequence one is stored), and the three :data:`FORMULA_FAILURES`."""

    def build(out: Path) -> None:
        src = out.parent / "r33_inputs"
        shutil.rmtree(src, ignore_errors=True)
        pdb, msa = src / "pdb", src / "msa"
        pdb.mkdir(parents=True)
        msa.mkdir()
        shutil.copy(STRUCTURES / "2q2k.cif", pdb)
        shutil.copy(STRUCTURES / "209d-assembly1.cif", pdb)
        shutil.copy(STRUCTURES / "5y2e.cif", pdb / f"{FORMULA_ENTRY}.cif")
        for name in FORMULA_FAILURES:
            shutil.copy(STRUCTURES / "header.pdb", pdb / name)
        shutil.copytree(SAMPLES / "msas" / "openfold" / "2q2k_A", msa / "2q2k_A")
        shutil.copy(MSAS / "alphafold3-pytorch" / "209d-assembly1C_protein.a3m", msa)
        build_store(out, pdb, workers=1, msa_dir=msa)

    return session_store(tmp_path_factory, "r33", build)


@pytest.fixture(scope="session")
def r33_report(r33_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``featurecache report`` of :func:`r33_store`, written once for the modules that only read it
    (test_r33_csv_formulas, test_r33_msa_counts)."""
    from featurecache.report import write_report

    out = tmp_path_factory.mktemp("r33_report") / "report"
    write_report(r33_store, out)
    return out


@pytest.fixture(scope="session")
def failures_only_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two header-only PDBs: a store of no entry and two failures."""

    def build(out: Path) -> None:
        pdb = out.parent / "failures_only_inputs"
        shutil.rmtree(pdb, ignore_errors=True)
        pdb.mkdir(parents=True)
        for name in ("a.pdb", "b.pdb"):
            shutil.copy(STRUCTURES / "header.pdb", pdb / name)
        build_store(out, pdb, workers=1)

    return session_store(tmp_path_factory, "failures_only", build)
