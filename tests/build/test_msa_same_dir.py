"""A damaged MSA file that the build has already listed as failed: a re-run writes nothing for it
and says up to date, the failure stays listed, and the run still reports it in its exit status.
With ``--msa-dir`` = ``--pdb-dir`` the file was also a (failed) structure input: its structure
failure hid its MSA failure in the index, so every build wrote the MSA failure again in a new
``parts/m-*`` part (since test_mixed_input_dir.py's fix it is the MSA stage's input only)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

import featurecache
from tests.conftest import MSAS, STRUCTURES, build_store

DAMAGED = "1psm_A/bfd_uniclust_hits.a3m.gz"


def _inputs(tmp_path: Path) -> Path:
    """Real 1psm and 3zee structures, 3zee's real MSA and 1psm's real MSA gzipped and cut in half
    (a gzip stream without its end), all in one directory."""
    d = tmp_path / "inputs"
    (d / "1psm_A").mkdir(parents=True)
    (d / "3zee_A").mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", d)
    shutil.copy(STRUCTURES / "3zee.cif", d)
    shutil.copy(MSAS / "openfold/3zee_A/bfd_uniclust_hits.a3m", d / "3zee_A")
    packed = gzip.compress((MSAS / "openfold/1psm_A/bfd_uniclust_hits.a3m").read_bytes())
    (d / DAMAGED).write_bytes(packed[: len(packed) // 2])
    return d


def _msa_parts(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "parts").glob("m-*") if p.is_dir())


@pytest.mark.parametrize("layout", ["same dir", "separate dirs"])
def test_a_known_msa_failure_is_up_to_date(tmp_path: Path, layout: str) -> None:
    inputs = _inputs(tmp_path)
    if layout == "same dir":
        pdb_dir = inputs
        # the non-structure files under --pdb-dir are under --msa-dir too: the MSA stage's inputs, not
        # (failed) structure inputs (test_mixed_input_dir.py; before session 18's fix they were 2 more)
        assert sum(1 for p in inputs.rglob("*") if p.is_file() and p.suffix not in (".cif",)) == 2
        n_not_structures = 0
    else:
        pdb_dir = tmp_path / "pdb"
        pdb_dir.mkdir()
        for cif in inputs.glob("*.cif"):
            shutil.copy(cif, pdb_dir)
        n_not_structures = 0
    store = tmp_path / "store"
    first = build_store(store, pdb_dir, workers=1, msa_dir=inputs)
    assert first.failed_by_stage.get("msa") == 1
    parts = _msa_parts(store)
    assert len(parts) == 1

    again = build_store(store, pdb_dir, workers=1, msa_dir=inputs)
    assert _msa_parts(store) == parts  # before (same dir): a new m- part on every build
    assert again.n_built == 0 and again.n_failed == 0
    assert again.n_skipped == again.n_inputs == 2 + n_not_structures
    assert again.stages["msa"]["MSAs written (from files / single sequence)"] == "0 / 0"
    assert again.stages["msa"]["MSA files failed"] == 0
    # still failing: the exit status is 1 (cli: n_failed or n_failed_earlier); the structure
    # failures of the non-structure files and the MSA file's failure
    assert again.n_failed_earlier == n_not_structures + 1
    listed = {(f["path"], f["stage"]) for f in featurecache.open_store(store).failures.to_pylist()}
    assert (DAMAGED, "msa") in listed  # before (same dir): hidden by its structure failure
    assert len(listed) == n_not_structures + 1
