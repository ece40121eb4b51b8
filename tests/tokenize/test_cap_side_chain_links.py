"""A residue bonded to a polymer chain's end residue through its SIDE CHAIN is a ligand, not a cap.

Without an entity sequence, a residue after the last (before the first) polymer residue of a
polymer subchain stays in the chain when it is bonded into it (7a4d's ACE/NH2 caps,
``tests/tokenize/test_polymer_caps.py``). Only a backbone bond continues a chain: the end residue's
C (after a protein chain) or N (before it), as the chain's own peptide bonds do. A ligand bonded to
the end residue's side chain — an acyl-enzyme's ester on a C-terminal SER OG, a glycan on ASN ND2,
an inhibitor on CYS SG — is a ligand that a rewritten assembly put into the polymer's subchain
(721p does this with its MG/GNP). AF3 keeps such a ligand separate, joined to the polymer by a
polymer–ligand bond (a token bond). Before this rule, any ``covale`` ``_struct_conn`` row between
the two residues made the ligand part of the chain: it took the chain's ids, a residue_index, the
protein mol_type, and its bond became polymer–polymer (no token bond).

Inputs are derived from real files:

- 1GBT (guanidinobenzoyl-trypsin, an acyl-enzyme): GBS 704 is bonded to SER 195 OG by the file's
  ``covale`` row (1.24 Å). Chain A is cut after SER 195 and ``_entity_poly_seq`` is removed. GBS
  is placed in chain A's subchain right after SER 195, as a rewritten assembly would. The oracle
  is the same cut file with GBS kept in its own non-polymer subchain E, which is how the
  deposited file declares it.
- 7a4d-assembly1: chain E's NH2 (or ACE) cap, with its ``covale`` row moved to a side-chain atom of
  its LEU (LEU 41 CD1, LEU 2 CB). The cap is also moved 1.47 Å from that atom, continuing the side
  chain outwards, away from the backbone.

Expected values come from the files (``gemmi.cif``) and distances measured here, not from the
featurizer.
"""

from __future__ import annotations

import gemmi
import numpy as np
import pytest

from featurecache.const import MolType
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import STRUCTURES
from tests.tokenize.test_polymer_caps import _atom_at, _atom_site, _bonded_atoms, _chain

#: AF3's longest covalent bond (``_struct_conn`` rows longer than this are dropped). The tests use
#: it as an independent bound: an atom farther than this from the end residue's backbone C / N is
#: not bonded to it.
MAX_BOND = 2.4

GBT = "1GBT.cif"
SER195_LABEL_SEQ = 177  # 1GBT chain A: SER auth 195 is label_seq_id 177


def _gbt_cut(ligand_in_chain: bool) -> str:
    """1GBT with chain A's residues after SER 195 removed and no entity sequence (as 7a4d's
    rewritten assembly has none). GBS follows SER 195 in ``_atom_site``, either in chain A's
    polymer subchain (``ligand_in_chain``, and its ``_struct_conn`` partner relabelled the same
    way) or in its own non-polymer subchain E, as deposited."""
    lines = (STRUCTURES / GBT).read_text().splitlines()
    at = [i for i, ln in enumerate(lines) if ln.startswith(("ATOM ", "HETATM "))]
    first, last = at[0], at[-1]
    rows = lines[first : last + 1]
    assert all(ln.startswith(("ATOM ", "HETATM ")) for ln in rows)  # one contiguous _atom_site loop
    polymer = [ln for ln in rows if ln.startswith("ATOM ") and int(ln.split()[8]) <= SER195_LABEL_SEQ]
    gbs = [ln for ln in rows if ln.split()[5] == "GBS"]
    others = [ln for ln in rows if ln.startswith("HETATM") and ln.split()[5] != "GBS"]
    assert len(gbs) == 12 and all(" GBS E 4 . " in ln for ln in gbs)
    head, tail = lines[:first], lines[last + 1 :]
    if ligand_in_chain:
        gbs = [ln.replace(" GBS E 4 . ", " GBS A 1 . ") for ln in gbs]
        (conn,) = [i for i, ln in enumerate(head) if ln.startswith("covale1 ")]
        assert " E GBS .   CD " in head[conn]
        head = [*head[:conn], head[conn].replace(" E GBS .   CD ", " A GBS .   CD "), *head[conn + 1 :]]
    doc = gemmi.cif.read_string("\n".join(head + polymer + gbs + others + tail) + "\n")
    doc.sole_block().find_mmcif_category("_entity_poly_seq.").erase()
    out = doc.as_string()
    assert "_entity_poly_seq." not in out
    return out


def _gbt_atoms(text: str) -> tuple[dict[str, tuple[float, ...]], dict[str, tuple[float, ...]]]:
    """(SER 195 atoms, GBS atoms) by name, read from ``_atom_site`` by auth numbering."""
    block = gemmi.cif.read_string(text).sole_block()
    ser: dict[str, tuple[float, ...]] = {}
    gbs: dict[str, tuple[float, ...]] = {}
    cols = ["auth_seq_id", "auth_comp_id", "label_atom_id", "Cartn_x", "Cartn_y", "Cartn_z"]
    for row in block.find("_atom_site.", cols):
        xyz = tuple(float(row.str(i)) for i in (3, 4, 5))
        if (row.str(0), row.str(1)) == ("195", "SER"):
            ser[row.str(2)] = xyz
        elif row.str(1) == "GBS":
            gbs[row.str(2)] = xyz
    return ser, gbs


def _dist(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return float(np.linalg.norm(np.subtract(a, b)))


def test_1gbt_premise_gbs_is_bonded_to_the_ser_side_chain_only() -> None:
    text = _gbt_cut(ligand_in_chain=True)
    block = gemmi.cif.read_string(text).sole_block()
    cols = ["conn_type_id", "ptnr1_auth_comp_id", "ptnr1_label_atom_id", "ptnr2_label_asym_id",
            "ptnr2_auth_comp_id", "ptnr2_label_atom_id"]  # fmt: skip
    rows = [tuple(r.str(i) for i in range(6)) for r in block.find("_struct_conn.", cols)]
    assert [r for r in rows if r[0] == "covale"] == [("covale", "SER", "OG", "A", "GBS", "CD")]
    ser, gbs = _gbt_atoms(text)
    assert _dist(ser["OG"], gbs["CD"]) <= MAX_BOND
    assert min(_dist(ser["C"], xyz) for xyz in gbs.values()) > MAX_BOND  # nothing on the backbone C
    # SER 195 is now chain A's last residue, and GBS directly follows it in chain A's subchain
    order = [
        (r.str(0), r.str(1), r.str(2))
        for r in block.find("_atom_site.", ["label_asym_id", "label_seq_id", "label_comp_id"])
        if r.str(0) == "A"
    ]
    assert max(int(seq) for _, seq, _ in order if seq) == SER195_LABEL_SEQ
    last_ser = max(i for i, row in enumerate(order) if row == ("A", str(SER195_LABEL_SEQ), "SER"))
    assert {comp for _, _, comp in order[last_ser + 1 :]} == {"GBS"}


def _ligand_view(s: Structure) -> list[tuple[str, str, int]]:
    return [(c.auth_id, c.sequence, c.token_count) for c in s.chains if c.mol_type == MolType.LIGAND]


def test_1gbt_acyl_ligand_on_the_terminal_ser_side_chain_stays_a_ligand() -> None:
    moved = _gbt_cut(ligand_in_chain=True)
    s = featurize_bytes(moved.encode(), GBT, "1gbt")
    ref = featurize_bytes(_gbt_cut(ligand_in_chain=False).encode(), GBT, "1gbt")
    # chain A is the 177 residues up to SER 195, as in the file that declares GBS a ligand
    a, tok = _chain(s, "A")
    assert a.mol_type == MolType.PROTEIN and len(a.sequence) == SER195_LABEL_SEQ
    assert a.sequence.endswith("S") and int(tok["residue_index"][-1]) == SER195_LABEL_SEQ
    assert tok["is_standard"].all()
    # GBS is a ligand chain of 12 atom tokens, as in the declared file
    assert ("A", "GBS", 12) in _ligand_view(s)
    assert _ligand_view(s) == _ligand_view(ref)
    # its ester bond to SER OG is a polymer–ligand token bond
    ser, gbs = _gbt_atoms(moved)
    og, cd = _atom_at(s, ser["OG"]), _atom_at(s, gbs["CD"])
    assert s.tokens["mol_type"][s.atoms["token_index"][cd]] == MolType.LIGAND
    assert frozenset((og, cd)) in _bonded_atoms(s)
    # and the rest matches the declared file token for token, bond for bond
    for key in ("residue_index", "restype", "mol_type", "is_standard", "entity_id", "sym_id"):
        np.testing.assert_array_equal(s.tokens[key], ref.tokens[key])
    np.testing.assert_array_equal(s.atoms["coords"], ref.atoms["coords"])
    assert _bonded_atoms(s) == _bonded_atoms(ref)


#: cap -> (its label_seq_id, the LEU's, the cap's bonded atom, the LEU side-chain atom it is moved
#: to, the atom before that one). LEU 2 of chain E has no atoms beyond CB in the file.
CAP_ON_SIDE_CHAIN = {"ACE": (1, 2, "C", "CB", "CA"), "NH2": (42, 41, "N", "CD1", "CG")}


def _cap_on_side_chain(cap: str) -> str:
    """7a4d with chain E's ``cap`` (ACE 1 before LEU 2, NH2 42 after LEU 41) bonded to a side-chain
    atom of that LEU instead (:data:`CAP_ON_SIDE_CHAIN`): its ``covale`` row names that atom for
    the LEU partner, and the cap is moved rigidly so that its bonded atom is 1.47 Å (a C–N / C–C
    single bond) from it, continuing the side chain's last bond outwards."""
    cap_seq, leu_seq, cap_atom, side, before = CAP_ON_SIDE_CHAIN[cap]
    doc = gemmi.cif.read(str(STRUCTURES / "7a4d-assembly1.cif"))
    block = doc.sole_block()
    changed = 0
    for row in block.find(
        "_struct_conn.",
        ["ptnr1_auth_comp_id", "ptnr1_auth_asym_id", "ptnr1_label_atom_id",
         "ptnr2_auth_comp_id", "ptnr2_auth_asym_id", "ptnr2_label_atom_id"],
    ):  # fmt: skip
        for k in (0, 3):
            other = 3 - k
            if row.str(k) == cap and row.str(k + 1) == "E" and row.str(other) == "LEU":
                assert row.str(other + 2) in ("N", "C")  # the backbone atom, as deposited
                row[other + 2] = side
                changed += 1
    assert changed == 1
    site = _atom_site(doc.as_string())
    leu = dict(site[("E", leu_seq)][1])
    cap_xyz = dict(site[("E", cap_seq)][1])
    d = np.subtract(leu[side], leu[before])
    shift = np.asarray(leu[side]) + 1.47 * d / np.linalg.norm(d) - np.asarray(cap_xyz[cap_atom])
    for row in block.find("_atom_site.", ["label_asym_id", "label_seq_id", "Cartn_x", "Cartn_y", "Cartn_z"]):
        if row.str(0) == "E" and row.str(1) == str(cap_seq):
            for i in range(3):
                row[2 + i] = f"{float(row.str(2 + i)) + shift[i]:.3f}"
    return doc.as_string()


@pytest.mark.parametrize("cap", ["ACE", "NH2"])
def test_7a4d_cap_bonded_to_a_leu_side_chain_is_a_ligand(cap: str) -> None:
    text = _cap_on_side_chain(cap)
    cap_seq, leu_seq, cap_atom, side, _ = CAP_ON_SIDE_CHAIN[cap]
    site = _atom_site(text)
    leu = dict(site[("E", leu_seq)][1])
    cap_atoms = dict(site[("E", cap_seq)][1])
    bonded = cap_atoms[cap_atom]
    assert _dist(bonded, leu[side]) <= MAX_BOND  # the row passes AF3's length filter
    backbone = leu["N" if cap == "ACE" else "C"]
    assert min(_dist(backbone, xyz) for xyz in cap_atoms.values()) > MAX_BOND  # no peptide bond
    s = featurize_bytes(text.encode(), "7a4d-assembly1.cif", "7a4d")
    n_atoms = len(cap_atoms)
    assert _ligand_view(s) == [("E", cap, n_atoms)]
    e, tok = _chain(s, "E")
    ends = sorted(seq for a, seq in site if a == "E" and seq != cap_seq)
    assert (int(tok["residue_index"][0]), int(tok["residue_index"][-1])) == (ends[0], ends[-1])
    assert len(e.sequence) == len(ends)
    # the side-chain bond is a polymer–ligand token bond
    assert frozenset((_atom_at(s, leu[side]), _atom_at(s, bonded))) in _bonded_atoms(s)
    # chain F keeps its ACE cap, bonded through LEU 2's N
    _, f_tok = _chain(s, "F")
    assert int(f_tok["residue_index"][0]) == 1


def test_a_cap_stated_on_the_backbone_stays_in_the_chain_by_its_row() -> None:
    """A guard: the ``covale`` row through the backbone still makes a cap on its own. Chain E's ACE
    is moved so that its C is 2.2 Å from LEU 2's N. That is too long to be read from the
    coordinates as a C–N bond (1.34 Å), but within AF3's 2.4 Å for the file's stated row (ACE C–LEU
    N). The ACE stays in the chain as before. This held before the side-chain rule too."""
    doc = gemmi.cif.read(str(STRUCTURES / "7a4d-assembly1.cif"))
    block = doc.sole_block()
    site = _atom_site(doc.as_string())
    ace_c = np.asarray(dict(site[("E", 1)][1])["C"])
    leu_n = np.asarray(dict(site[("E", 2)][1])["N"])
    d = ace_c - leu_n
    shift = leu_n + 2.2 * d / np.linalg.norm(d) - ace_c
    for row in block.find("_atom_site.", ["label_asym_id", "label_seq_id", "Cartn_x", "Cartn_y", "Cartn_z"]):
        if row.str(0) == "E" and row.str(1) == "1":
            for i in range(3):
                row[2 + i] = f"{float(row.str(2 + i)) + shift[i]:.3f}"
    text = doc.as_string()
    moved = dict(_atom_site(text)[("E", 1)][1])
    assert 2.1 < _dist(moved["C"], tuple(leu_n)) <= MAX_BOND
    assert min(_dist(xyz, tuple(leu_n)) for xyz in moved.values()) > 2.0  # no other atom closer
    s = featurize_bytes(text.encode(), "7a4d-assembly1.cif", "7a4d")
    assert _ligand_view(s) == []
    _, tok = _chain(s, "E")
    assert int(tok["residue_index"][0]) == 1
    # without the row, the same coordinates do not bond it: it is a ligand
    block.find_mmcif_category("_struct_conn.").erase()
    s = featurize_bytes(doc.as_string().encode(), "7a4d-assembly1.cif", "7a4d")
    assert _ligand_view(s) == [("E", "ACE", 3)]
