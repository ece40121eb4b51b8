"""An MSA filed under the wrong entry (a copy of 1psm_A's alignment into the OpenFold directory
2q2k_A) is joined by its query's sequence, as every alignment is, to 1psm's chain; the build now
says so, naming the file, the chain its path names and the chain it joined, and counts it in the
MSA stage's summary (before: nothing was said, and 2q2k A was built without an MSA). A correctly
filed alignment is not noted. Real files, real build (LocalCluster)."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import MSAS, STRUCTURES, build_store

MISFILED = "filed under the wrong entry or chain"


def test_an_alignment_filed_under_another_entry_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(STRUCTURES / name, pdb / name)
    msa = tmp_path / "msa"
    (msa / "1psm_A").mkdir(parents=True)
    (msa / "2q2k_A").mkdir()
    shutil.copy(MSAS / "openfold" / "1psm_A" / "mgnify_hits.sto", msa / "1psm_A" / "mgnify_hits.sto")
    # 1psm A's alignment in 2q2k A's directory: its query is 1psm's sequence, not 2q2k's
    shutil.copy(
        MSAS / "openfold" / "1psm_A" / "bfd_uniclust_hits.a3m", msa / "2q2k_A" / "bfd_uniclust_hits.a3m"
    )
    with caplog.at_level(logging.WARNING):
        summary = build_store(tmp_path / "store", pdb, msa_dir=msa, workers=1)
    stage = summary.stages["msa"]
    assert stage["alignments joined (exact / by layout)"] == "2 / 0"  # both joined by sequence
    assert stage["polymer chains with an MSA from files"].startswith("1 of ")  # 1psm A only
    assert stage["alignments filed under another chain"] == 1
    notes = [r.getMessage() for r in caplog.records if MISFILED in r.getMessage()]
    assert len(notes) == 1, notes  # not the correctly filed 1psm_A/mgnify_hits.sto
    note = notes[0]
    # "A" is 2q2k's auth chain A and the label (subchain) id of its auth chain F: the layout join's
    # rule takes either, so both are named
    assert "2q2k_A/bfd_uniclust_hits.a3m" in note and "names 2q2k/A, 2q2k/F, but" in note, note
    assert "sequence of 1psm/A" in note and "2q2k/A, 2q2k/F get nothing from it" in note, note


def _with_unknown_residue(text: str) -> str:
    """1psm as '1psx': residue 10 (SER) written as UNK everywhere (the chain's sequence then has X
    there), as a file whose residue the tokenizer cannot name is."""
    out = []
    for line in text.splitlines():
        if line.startswith("data_"):
            line = "data_1PSX"
        if re.match(r"^1 10\s+SER n", line):
            line = line.replace("SER", "UNK")
        if line.startswith(("ATOM", "HETATM")):
            f = line.split()
            if f[5] == "SER" and f[8] == "10":
                line = re.sub(r"\bSER\b", "UNK", line)
        out.append(line)
    return "\n".join(out).replace("ASQDAEQ", "AXQDAEQ", 2) + "\n"


@pytest.mark.parametrize("layout", ["own directory", "a link to 1psm_A"])
def test_a_chain_its_path_names_still_joins_by_layout_and_nothing_is_noted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, layout: str
) -> None:
    """1psx_A/ holds the alignment of the canonical sequence (S at residue 10), correctly filed; the
    chain 1psx A has X there, and 1psm (S at 10) is in the store too. The query's exact match to
    1psm skipped the layout join, so 1psx A got nothing, and the note blamed the filing (review R6
    M2). Now 1psx A joins it by layout, as it does when 1psm is not in the store. Also when 1psx_A
    is a link to 1psm_A (one alignment filed for both chains): the path then names 1psm A too, whose
    exact match skipped the other's layout join (review R6b M2)."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", pdb / "1psm.cif")
    (pdb / "1psx.cif").write_text(_with_unknown_residue((STRUCTURES / "1psm.cif").read_text()))
    msa = tmp_path / "msa"
    own = "1psx_A" if layout == "own directory" else "1psm_A"
    (msa / own).mkdir(parents=True)
    shutil.copy(MSAS / "openfold" / "1psm_A" / "bfd_uniclust_hits.a3m", msa / own / "bfd_uniclust_hits.a3m")
    if own != "1psx_A":
        (msa / "1psx_A").symlink_to(own, target_is_directory=True)
    with caplog.at_level(logging.WARNING):
        summary = build_store(tmp_path / "store", pdb, msa_dir=msa, workers=1)
    stage = summary.stages["msa"]
    assert stage["alignments joined (exact / by layout)"] == "1 / 1"  # by its sequence, and by layout
    assert stage["alignments filed under another chain"] == 0
    assert not [r for r in caplog.records if MISFILED in r.getMessage()]
    assert stage["polymer chains with an MSA from files"] == "2 of 2"  # 1psm A by sequence, 1psx A by layout
