"""Token facts checked against their definitions, not against the tokenizer's own output (review R27a
s45, T4 and T3): ``is_resolved`` is "the centre atom is present" (AF3 SI §2.6, ``types.Token``);
``ref_space_uid`` is one id per residue, i.e. it changes exactly where (chain, residue) changes
(AF3 SI Table 5)."""

from __future__ import annotations

import gemmi
import numpy as np
import pytest

from featurecache.const import decode_atom_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import STRUCTURES, removed_aids


def _featurize(name: str) -> Structure:
    return featurize_bytes((STRUCTURES / name).read_bytes(), name, name)


# Two glycines: residue 1 has CA but not N; residue 2 has N but not CA. By the definition residue 1
# is resolved (its centre atom CA is there) and residue 2 is not, whatever else each one has.
TWO_GLY_CIF = """data_TWO
_entity.id 1
_entity.type polymer
_entity_poly.entity_id 1
_entity_poly.type 'polypeptide(L)'
loop_
_entity_poly_seq.entity_id
_entity_poly_seq.num
_entity_poly_seq.mon_id
1 1 GLY
1 2 GLY
loop_
_atom_site.group_PDB
_atom_site.id
_atom_site.type_symbol
_atom_site.label_atom_id
_atom_site.label_alt_id
_atom_site.label_comp_id
_atom_site.label_asym_id
_atom_site.label_entity_id
_atom_site.label_seq_id
_atom_site.Cartn_x
_atom_site.Cartn_y
_atom_site.Cartn_z
_atom_site.occupancy
_atom_site.B_iso_or_equiv
_atom_site.auth_seq_id
_atom_site.auth_asym_id
_atom_site.pdbx_PDB_model_num
ATOM 1 C CA . GLY A 1 1 1.46 0.00 0.00 1.0 10.0 1 A 1
ATOM 2 C C  . GLY A 1 1 2.01 1.42 0.00 1.0 10.0 1 A 1
ATOM 3 O O  . GLY A 1 1 1.25 2.39 0.00 1.0 10.0 1 A 1
ATOM 4 N N  . GLY A 1 2 3.33 1.55 0.00 1.0 10.0 2 A 1
ATOM 5 C C  . GLY A 1 2 5.30 3.00 0.00 1.0 10.0 2 A 1
ATOM 6 O O  . GLY A 1 2 5.50 4.20 0.00 1.0 10.0 2 A 1
"""


def test_hand_written_two_residues_resolved_by_their_centre_atom() -> None:
    s = featurize_bytes(TWO_GLY_CIF.encode(), "two.cif", "two")
    assert s.tokens["is_resolved"].tolist() == [True, False]
    # the facts the expectation rests on, as the file states them
    for t, has_n in zip(s.tokens, (False, True), strict=True):
        sl = slice(t["atom_start"], t["atom_start"] + t["atom_count"])
        present = {
            decode_atom_name(n)
            for n, p in zip(s.atoms["name"][sl], s.atoms["is_present"][sl], strict=True)
            if p
        }
        assert ("N" in present) == has_n and ("CA" in present) != has_n


def test_1lzh_ca_only_model_is_all_resolved() -> None:
    # SOURCES.tsv: "CA-only model, 2 chains 258 res": every residue's centre atom (CA) is there
    s = _featurize("1lzh.pdb.gz")
    assert len(s.tokens) == 258
    assert s.tokens["is_resolved"].all()
    assert int(s.atoms["is_present"].sum()) == 258  # CA only: N, C, O … are all absent


@pytest.mark.parametrize("name", ["1lzh.pdb.gz", "pdb1gdr.ent", "7pzb.pdb", "3JQH.cif", "2q2k.cif"])
def test_is_resolved_is_the_centre_atoms_presence(name: str) -> None:
    s = _featurize(name)
    assert np.array_equal(s.tokens["is_resolved"], s.atoms["is_present"][s.tokens["centre_atom"]])


def test_hand_written_two_residues_have_one_ref_space_uid_each() -> None:
    s = featurize_bytes(TWO_GLY_CIF.encode(), "two.cif", "two")
    uid = s.atoms["ref_space_uid"]
    tok = s.atoms["token_index"]
    assert len(set(uid[tok == 0].tolist())) == 1 and len(set(uid[tok == 1].tolist())) == 1
    assert uid[tok == 0][0] != uid[tok == 1][0]


@pytest.mark.parametrize("name", ["102m.cif", "2q2k.cif", "721p-assembly1.cif"])
def test_ref_space_uid_changes_exactly_where_chain_and_residue_change(name: str) -> None:
    """The residues are counted with gemmi from the file (label_asym, residue) in the first model,
    waters and a default build's crystallization aids (AF3 SI Table 9, ``removed_aids``) left out:
    as many uids over present atoms as residues with atoms in the file."""
    s = _featurize(name)
    tok = s.tokens[s.atoms["token_index"]]
    residue = np.stack([tok["asym_id"], tok["residue_index"]], axis=1)
    pairs = {tuple(r) for r in residue.tolist()}
    uid = s.atoms["ref_space_uid"]
    # a bijection between (chain, residue) and uid
    assert (
        len(pairs)
        == len(set(uid.tolist()))
        == len({(*r, u) for r, u in zip(residue.tolist(), uid.tolist(), strict=True)})
    )
    st = gemmi.read_structure(str(STRUCTURES / name))
    st.remove_hydrogens()
    aids = removed_aids(st)
    resolved_residues = {
        (ch.name, r.subchain, r.seqid.num, r.seqid.icode)
        for ch in st[0]
        for r in ch
        if not r.is_water() and r.name not in aids and len(r)
    }
    present_uids = set(uid[s.atoms["is_present"]].tolist())
    assert len(present_uids) == len(resolved_residues)
