"""MSA columns of ligand tokens follow AF3: an empty MSA whose query is all gaps.

AF3 (``alphafold3/model/features.py``, ``MSA.compute_features``) gives every non-polymer chain
``Msa.from_empty(query_sequence='-' * n)`` for both its unpaired and paired MSA, so a ligand token's
column is the gap (class 31) in every row, the query row included; ``msa_mask`` is 1 wherever a
row exists, deletions 0, and the profile (``data3.get_profile_features``) one-hot at the gap.
Expected values come from that rule and from gemmi's count of the ligand atoms in the file.
"""

from __future__ import annotations

from typing import Any

import gemmi
import numpy as np

from featurecache.client.assemble import msa_features
from featurecache.const import GAP, NUM_RESTYPES, WATER_NAMES, MolType
from tests.conftest import STRUCTURES, removed_aids


def _ligand_heavy_atoms(path: str) -> int:
    """Heavy atoms of the non-polymer, non-water residues of the first model, read by gemmi (an X-ray
    structure's crystallization aids, AF3 SI Table 9, left out)."""
    st = gemmi.read_structure(str(STRUCTURES / path))
    st.setup_entities()
    aids = removed_aids(st)
    n = 0
    for ch in st[0]:
        for res in ch:
            if res.name in WATER_NAMES or res.name in aids or res.entity_type == gemmi.EntityType.Polymer:
                continue
            n += len({a.name for a in res if a.element.name not in ("H", "D")})
    return n


def _check_ligand_columns(out: dict[str, np.ndarray], lig: np.ndarray) -> None:
    assert (out["msa"][:, lig] == GAP).all()  # every row, the query included
    assert out["msa_mask"][:, lig].all()
    assert (out["msa_deletions"][:, lig] == 0).all()
    gap_one_hot = np.zeros(NUM_RESTYPES, np.float32)
    gap_one_hot[GAP] = 1.0
    np.testing.assert_array_equal(
        out["profile"][lig], np.broadcast_to(gap_one_hot, (int(lig.sum()), NUM_RESTYPES))
    )
    assert (out["deletion_mean"][lig] == 0).all()


def test_ligand_columns_are_gap_with_an_msa(client_reader: Any) -> None:
    """102m: myoglobin (an MSA of > 100 rows) + HEM (its SO4 is a crystallization aid, left out)."""
    e = client_reader.entry("102m")
    tok = e.tokens
    keep = np.arange(len(tok["restype"]))
    lig = tok["mol_type"] == MolType.LIGAND
    assert int(lig.sum()) == _ligand_heavy_atoms("102m.cif") > 0
    for seed in range(5):
        out = msa_features(
            tok, keep, e.chains, client_reader.msa, np.random.default_rng(seed), max_msa_rows=64
        )
        _check_ligand_columns(out, lig)
        assert out["msa"][0, ~lig].tolist() == tok["restype"][~lig].tolist()  # polymer query row kept


def test_ligand_columns_are_gap_without_msas(client_reader: Any) -> None:
    """721p: an H-Ras dimer with GNP + MG (the reviewer's repro), read without any MSA."""
    e = client_reader.entry("721p-assembly1")
    tok = e.tokens
    keep = np.arange(len(tok["restype"]))
    lig = tok["mol_type"] == MolType.LIGAND
    assert int(lig.sum()) == 66  # 2 x (GNP 32 heavy atoms + MG), counted in the file's HETATM records
    out = msa_features(tok, keep, e.chains, None, np.random.default_rng(0))
    assert out["msa"].shape == (1, keep.size)
    _check_ligand_columns(out, lig)
    # the protein columns still hold the single-sequence MSA: restype, one-hot profile
    prot = ~lig
    assert out["msa"][0, prot].tolist() == tok["restype"][prot].tolist()
    assert (out["profile"][prot].argmax(1) == tok["restype"][prot]).all()
