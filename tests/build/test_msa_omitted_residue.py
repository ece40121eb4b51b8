"""An MSA whose query leaves out a residue the chain keeps still joins it, column by column.

209d-assembly1's actinomycin peptide (chain C) keeps PXA (label_seq 6) as per-atom tokens; the
shipped alphafold3-pytorch MSA ``209d-assembly1C_protein.a3m`` has 10 columns, PXA left out
(``TXPGVTXPGV``). The build joins it by its layout name and inserts a gap column for PXA, so the
stored MSA has one column per residue of the chain and MSA column = sequence position. The real
file gets one extra hit row (with an insertion) so that a row other than the query shows where
the gap column goes; the expected rows are written out by hand from the a3m text.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.client.assemble import msa_features, sequence_positions
from featurecache.const import GAP, MSA_PROTEIN_LETTERS, UNK_PROTEIN
from tests.conftest import CCD, MSAS, STRUCTURES, build_store

A3M = MSAS / "alphafold3-pytorch" / "209d-assembly1C_protein.a3m"
#: the extra hit: 10 match columns, an insertion ("k") between its 5th and 6th
HIT = "TVPGAkTVPGV"


def _encode(letters: str) -> list[int]:
    return [GAP if c == "-" else MSA_PROTEIN_LETTERS.get(c, UNK_PROTEIN) for c in letters]


@pytest.fixture(scope="module")
def store_209d(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("msa209d")
    (root / "pdb").mkdir()
    shutil.copy(STRUCTURES / "209d-assembly1.cif", root / "pdb")
    msa_dir = root / "msas" / "alphafold3-pytorch"
    msa_dir.mkdir(parents=True)
    text = A3M.read_text()
    assert "TXPGVTXPGV" in text  # the real query: 10 columns, PXA left out
    (msa_dir / A3M.name).write_text(text.rstrip("\n") + f"\n>hit\n{HIT}\n")
    out = root / "store"
    summary = build_store(out, root / "pdb", workers=1, msa_dir=root / "msas", ccd=CCD)
    assert summary.n_built == 1, summary.failures
    return out


def test_msa_gets_a_gap_column_for_the_left_out_residue(store_209d: Path) -> None:
    import featurecache

    reader = featurecache.open_store(store_209d)
    try:
        chain = next(c for c in reader.entry_chains("209d-assembly1") if c["label_id"] == "C")
        assert chain["sequence"] == "TVPGVXTVPGV"  # PXA ("X") in place, 11 residues
        assert chain["msa_files"] == 1 and chain["msa_depth"] == 2
        full = reader.msa(chain["msa_key"])
        assert full.residues.shape == (2, 11)
        # row 0: the chain's sequence; row 1: the hit with a gap where PXA is
        assert full.residues[0].tolist() == _encode("TVPGVXTVPGV")
        assert full.residues[1].tolist() == _encode("TVPGA-TVPGV")
        # the insertion still precedes THR 7's column (index 6), the gap column has none
        assert full.deletions[1].tolist() == [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]

        e = reader.entry("209d-assembly1")
        tok = e.tokens
        keep = np.flatnonzero(tok["asym_id"] == chain["asym_id"])
        pxa = tok["residue_index"][keep] == 6
        assert pxa.sum() == 22
        out = msa_features(tok, keep, e.chains, reader.msa, np.random.default_rng(0), max_msa_rows=2)
        for seed in range(1, 20):  # until both rows are drawn
            if out["msa"].shape[0] == 2:
                break
            out = msa_features(tok, keep, e.chains, reader.msa, np.random.default_rng(seed), max_msa_rows=2)
        assert out["msa"].shape[0] == 2
        assert (out["msa"][0] == tok["restype"][keep]).all()  # query row = restype, PXA tokens UNK
        assert (out["msa"][1, pxa] == GAP).all()
        thr7 = tok["residue_index"][keep] == 7
        assert (out["msa"][1, thr7] == MSA_PROTEIN_LETTERS["T"]).all()
        assert (out["msa_deletions"][1, thr7] == 1).all()
    finally:
        reader.close()


def test_sequence_positions_count_residues_not_numbers() -> None:
    """Chain numbering with gaps (no entity sequence to fill them) and a per-atom residue: the
    MSA column is the residue's place in the chain sequence, counted by hand."""
    tokens: dict[str, Any] = {
        "asym_id": np.array([0, 0, 0, 0, 0, 1, 1, 1]),
        "residue_index": np.array([1, 2, 2, 2, 5, 3, 4, 9]),
    }
    assert sequence_positions(tokens).tolist() == [0, 1, 1, 1, 2, 0, 1, 2]
