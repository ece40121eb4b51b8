"""token_bonds keeps only bonds shorter than 2.4 Å in the structure (AF3 supplement Table 5).

1GBT (trypsin) has one covalent polymer–ligand bond, SER 195 OG – GBS 704 CD, stated in
``_struct_conn``. A copy with the whole GBS ligand moved 2 Å along x stretches that bond past
2.4 Å and leaves the ligand's internal bonds as they were.
"""

from __future__ import annotations

import dataclasses

import gemmi
import numpy as np
import pytest

from featurecache.const import decode_atom_name, decode_res_name
from featurecache.featurize.bonds import token_bonds
from featurecache.featurize.entry import featurize_bytes
from featurecache.parse.structure import _parse_structure
from featurecache.tokenize.af3 import tokenize
from featurecache.types import Structure
from tests.conftest import STRUCTURES

NAME = "1GBT.cif"
SHIFT = 2.0  # Å along x, GBS atoms only
CUT = 2.4  # Å, AF3 Table 5


def _shifted_text() -> str:
    doc = gemmi.cif.read(str(STRUCTURES / NAME))
    table = doc.sole_block().find("_atom_site.", ["label_comp_id", "Cartn_x"])
    moved = 0
    for row in table:
        if row.str(0) == "GBS":
            row[1] = f"{float(row[1]) + SHIFT:.3f}"
            moved += 1
    # every GBS atom line of the file (grep-style count), and nothing else
    assert moved == sum(1 for line in (STRUCTURES / NAME).read_text().splitlines()
                        if line.startswith("HETATM") and " GBS " in line)  # fmt: skip
    return doc.as_string()


def _og_cd_distance(text: str) -> float:
    """SER 195 OG – GBS 704 CD distance, from gemmi's own reading of the text."""
    st = gemmi.make_structure_from_block(gemmi.cif.read_string(text).sole_block())
    og = st[0]["A"]["195"][0].find_atom("OG", "*")
    cd = st[0]["A"]["704"][0].find_atom("CD", "*")
    return float(og.pos.dist(cd.pos))


def _bond_names(s: Structure) -> set[tuple[tuple[str, str], tuple[str, str]]]:
    """Bonds as sorted ((residue, atom), (residue, atom)) name pairs."""
    out = set()
    for b in s.bonds:
        ends = []
        for atom, token in ((b["atom_i"], b["token_i"]), (b["atom_j"], b["token_j"])):
            ends.append(
                (decode_res_name(s.tokens["res_name"][token]), decode_atom_name(s.atoms["name"][atom]))
            )
        out.add(tuple(sorted(ends)))
    return out  # type: ignore[return-value]


def _bond_lengths(s: Structure) -> np.ndarray:
    a = s.atoms["coords"].astype(np.float64)
    return np.linalg.norm(a[s.bonds["atom_i"]] - a[s.bonds["atom_j"]], axis=-1)


def test_stretched_polymer_ligand_bond_is_dropped() -> None:
    original = (STRUCTURES / NAME).read_text()
    shifted = _shifted_text()
    assert _og_cd_distance(original) < CUT < _og_cd_distance(shifted)  # the premise, measured by gemmi
    before = featurize_bytes(original.encode(), NAME, "1GBT")
    after = featurize_bytes(shifted.encode(), NAME, "1GBT")
    og_cd = (("GBS", "CD"), ("SER", "OG"))
    assert og_cd in _bond_names(before)
    assert og_cd not in _bond_names(after)
    # a rigid shift: the ligand's own bonds are all still there
    assert _bond_names(after) == _bond_names(before) - {og_cd}


@pytest.mark.parametrize(
    "name", ["1GBT.cif", "102m.cif", "7DDO.pdb", "2q2k.cif", "209d-assembly1.cif", "4oz7.pdb"]
)
def test_no_token_bond_between_present_atoms_is_longer_than_the_cut(name: str) -> None:
    # crystallization aids kept: more ligands, more bonds to check (2q2k: its HEPES and its 5IU's own
    # bonds; 209d and 4oz7: the bonds inside their peptides' modified residues, token bonds since
    # featurizer 0.10.0, review R25d s43 #1)
    s = featurize_bytes((STRUCTURES / name).read_bytes(), name, name, keep_crystallization_aids=True)
    both = s.atoms["is_present"][s.bonds["atom_i"]] & s.atoms["is_present"][s.bonds["atom_j"]]
    assert len(s.bonds) > 0
    assert (_bond_lengths(s)[both] <= CUT).all()


def test_bond_with_a_missing_atom_is_kept() -> None:
    """An atom not present in the file cannot be measured: the bond stays (documented rule)."""
    raw = _parse_structure(_shifted_text().encode(), NAME)
    tk = tokenize(raw.structure, fmt=raw.fmt)
    og = tk.atom_lookup[("A", 195, "", "SER", "OG")]
    atoms = tk.atoms.copy()
    atoms["is_present"][og] = False  # as if OG were unresolved; its stale coordinates are 2.55 Å off
    bonds = token_bonds(raw.structure, dataclasses.replace(tk, atoms=atoms))
    assert og in set(bonds["atom_i"].tolist()) | set(bonds["atom_j"].tolist())
