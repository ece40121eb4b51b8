"""Polymer chains made only of unknown residues are removed, as AF3 removes them (supplement §2.5.4:
"polymer chains with all unknown residues are removed"); a review's finding (R20 #1).

Before, such chains were kept: a protein chain of UNK tokens, a DNA chain of DN residues. The
inputs are real files with one polymer entity's residues renamed to its kind's unknown residue (UNK
for protein, DN for DNA) in ``_entity_poly_seq``, ``_pdbx_poly_seq_scheme`` and ``_atom_site``,
written to ``tmp_path``; which chains go and which stay comes from gemmi's reading of the file's
tables (entity ↔ label_asym_id ↔ auth_asym_id), not from featurecache.
"""

from __future__ import annotations

from pathlib import Path

import gemmi
import pytest

from featurecache.const import UNK_RNA, MolType
from featurecache.errors import EmptyStructureError
from featurecache.featurize.entry import featurize_bytes
from featurecache.tokenize.af3 import _Chain, _Residue
from featurecache.types import Structure
from tests.conftest import STRUCTURES


def _rename_entity(path: Path, entity_id: str, unknown: str, out: Path) -> dict[str, str]:
    """Write ``path`` with every residue of polymer entity ``entity_id`` named ``unknown``, to ``out``;
    returns label_asym_id -> auth_asym_id of that entity's chains."""
    doc = gemmi.cif.read(str(path))
    block = doc.sole_block()
    for prefix, entity_col, cols in (
        ("_entity_poly_seq.", "entity_id", ("mon_id",)),
        ("_pdbx_poly_seq_scheme.", "entity_id", ("mon_id", "pdb_mon_id", "auth_mon_id")),
        ("_atom_site.", "label_entity_id", ("label_comp_id", "auth_comp_id")),
    ):
        table = block.find(prefix, [entity_col, *cols])
        for row in table:
            if row[0] == entity_id:
                for k in range(1, len(cols) + 1):
                    if row[k] not in ("?", "."):
                        row[k] = unknown
    doc.write_file(str(out))
    return _entity_chains(block, entity_id)


def _entity_chains(block: gemmi.cif.Block, entity_id: str) -> dict[str, str]:
    """label_asym_id -> auth_asym_id of the chains of entity ``entity_id`` (``_atom_site``)."""
    table = block.find("_atom_site.", ["label_asym_id", "auth_asym_id", "label_entity_id"])
    return {row[0]: row[1] for row in table if row[2] == entity_id}


def _featurize(path: Path) -> Structure:
    return featurize_bytes(path.read_bytes(), path.name, path.stem)


@pytest.mark.parametrize(("entity_id", "unknown", "kept_entity"), [("2", "UNK", "1"), ("1", "DN", "2")])
def test_a_chain_of_unknown_residues_is_removed_with_a_warning(
    tmp_path: Path, entity_id: str, unknown: str, kept_entity: str
) -> None:
    """2q2k: DNA entity 1 (label A), protein entity 2 (labels B, C). Renaming one entity's residues
    to its unknown residue removes exactly that entity's chains; the other polymer chains keep the
    tokens they had."""
    src = STRUCTURES / "2q2k.cif"
    before = _featurize(src)
    gone = _rename_entity(src, entity_id, unknown, tmp_path / "2q2k_unknown.cif")
    kept = _entity_chains(gemmi.cif.read(str(src)).sole_block(), kept_entity)
    assert gone and kept and not set(gone) & set(kept)
    after = _featurize(tmp_path / "2q2k_unknown.cif")
    labels_after = {c.label_id for c in after.chains}
    assert not labels_after & set(gone), labels_after
    assert {c.label_id for c in before.chains} - set(gone) == labels_after
    for label in kept:
        (b,) = [c for c in before.chains if c.label_id == label]
        (a,) = [c for c in after.chains if c.label_id == label]
        assert (a.sequence, a.token_count, a.n_resolved) == (b.sequence, b.token_count, b.n_resolved)
    for label, auth in gone.items():
        named = [w for w in after.warnings if f"chain {auth} (label {label})" in w]
        assert len(named) == 1 and unknown in named[0] and "removed" in named[0], after.warnings


def test_an_entry_of_only_unknown_chains_fails_naming_them(tmp_path: Path) -> None:
    """4i6p: one protein entity (chains A, B) and waters. All UNK, nothing is left to train on."""
    gone = _rename_entity(STRUCTURES / "4i6p.cif", "1", "UNK", tmp_path / "4i6p_unk.cif")
    assert sorted(gone.values()) == ["A", "B"]
    with pytest.raises(EmptyStructureError, match=r"unknown residues \(chain A: UNK, chain B: UNK\)"):
        _featurize(tmp_path / "4i6p_unk.cif")


def _chain(mol_type: MolType, names: list[str]) -> _Chain:
    ch = _Chain("A", "A", mol_type)
    ch.residues = [_Residue(n, [], True, mol_type, UNK_RNA, "N", i, None) for i, n in enumerate(names, 1)]
    return ch


def test_unknown_is_the_unknown_residue_of_the_chains_kind() -> None:
    """RNA's unknown residue is N (no RNA file of the corpus is small enough to rewrite here)."""
    from featurecache.tokenize.af3 import _all_unknown

    assert _all_unknown(_chain(MolType.RNA, ["N", "N"]))
    assert not _all_unknown(_chain(MolType.RNA, ["N", "A"]))
    assert _all_unknown(_chain(MolType.DNA, ["DN"]))
    assert not _all_unknown(_chain(MolType.PROTEIN, ["UNK", "GLY"]))
    assert not _all_unknown(_chain(MolType.LIGAND, ["UNK"]))  # a ligand named UNK is no polymer chain
