"""token_bonds: a polymer's per-atom residues keep their own bond graph; links between polymer
residues are not token bonds.

AlphaFold3's released featuriser (``features.RefStructure.compute_features``, with the pipeline's
default ``intra_ligand_ptm_bonds=True``) adds the CCD ``_chem_comp_bond`` graph of every residue not
in ``_STANDARD_RESIDUES`` to the ligand–ligand bonds, whatever its chain: a modified residue or cap
of a polymer is tokenized per atom, and its own bonds join those tokens in ``token_bonds``. Its
``remove_polymer_polymer_bonds`` removes the bonds *between* polymer residues (peptide and
phosphodiester links, disulfides). Review R25d s43 #1 reversed review R11 s39 #3 (featurizer 0.8.0),
which had read SI Table 5's "polymer-ligand and ligand-ligand bonds" as leaving the modified
residues' own bonds out; R25d's independent recount (gemmi + CCD files, no featurecache code) found
them missing: 2q2k's 5IU 42, 209d's PXA / MVA / DVA / SAR 59, 1pfe's MVA / DSN / N2C / NCY 38, 4oz7's
22Q / 22W 52 bond pairs.

The expected bonds come from the CCD files read with gemmi (``_chem_comp_bond`` pairs between the
residue's atoms), less a pair whose two atoms are both in the file and farther apart than AF3's
2.4 Å; the residues' polymer kind from the files' own ``_entity`` types.
"""

from __future__ import annotations

from pathlib import Path

import gemmi
import numpy as np
import pytest

from featurecache.build.components import component_resolvers
from featurecache.const import MolType, decode_atom_name, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import BondSource, Structure
from tests.conftest import CCD, SAMPLES, STRUCTURES

MAX_BOND_LENGTH = 2.4  # Å, AF3 supplement Table 5


def _featurize(path: Path) -> Structure:
    atoms_fn, bonds_fn = component_resolvers(str(CCD))
    data = path.read_bytes()
    return featurize_bytes(data, path.name, path.name, component_atoms=atoms_fn, component_bonds=bonds_fn)


def _polymer_residue_names(path: Path) -> set[str]:
    """Every residue name of the file's polymer entities: the ``_atom_site`` rows whose
    ``label_entity_id`` is an ``_entity`` of type ``polymer`` (gemmi's reading of the text)."""
    block = gemmi.cif.read(str(path)).sole_block()
    polymers = {gemmi.cif.as_string(r[0]) for r in block.find("_entity.", ["id", "type"])
                if gemmi.cif.as_string(r[1]) == "polymer"}  # fmt: skip
    return {gemmi.cif.as_string(r[1]) for r in block.find("_atom_site.", ["label_entity_id", "label_comp_id"])
            if gemmi.cif.as_string(r[0]) in polymers}  # fmt: skip


def _ccd_pairs(code: str) -> list[tuple[str, str]]:
    block = gemmi.cif.read(str(CCD / f"{code}.cif")).sole_block()
    return [(gemmi.cif.as_string(r[0]), gemmi.cif.as_string(r[1]))
            for r in block.find("_chem_comp_bond.", ["atom_id_1", "atom_id_2"])]  # fmt: skip


def _polymer_per_atom_residues(s: Structure) -> dict[tuple[int, int], tuple[str, np.ndarray]]:
    """(asym_id, residue_index) -> (residue name, its atom indices) of every per-atom residue of a
    polymer chain."""
    out: dict[tuple[int, int], tuple[str, list[int]]] = {}
    tok = s.tokens
    for t in np.flatnonzero(~tok["is_standard"] & (tok["mol_type"] != int(MolType.LIGAND))):
        key = (int(tok["asym_id"][t]), int(tok["residue_index"][t]))
        out.setdefault(key, (decode_res_name(tok["res_name"][t]), []))[1].extend(
            range(int(tok["atom_start"][t]), int(tok["atom_start"][t] + tok["atom_count"][t]))
        )
    return {k: (name, np.asarray(atoms)) for k, (name, atoms) in out.items()}


def _expected_inside(s: Structure, atoms: np.ndarray, code: str) -> set[tuple[int, int]]:
    by_name = {decode_atom_name(s.atoms["name"][i]): int(i) for i in atoms}
    xyz, present = s.atoms["coords"].astype(np.float64), s.atoms["is_present"]
    want = set()
    for a, b in _ccd_pairs(code):
        if a in by_name and b in by_name:
            i, j = sorted((by_name[a], by_name[b]))
            if present[i] and present[j] and np.linalg.norm(xyz[i] - xyz[j]) > MAX_BOND_LENGTH:
                continue
            want.add((i, j))
    return want


@pytest.mark.parametrize(
    ("path", "counts"),
    [
        (SAMPLES / "structures" / "2q2k.cif", {"5IU": 42}),
        (STRUCTURES / "209d-assembly1.cif", {"PXA": 24, "MVA": 15, "DVA": 12, "SAR": 8}),
        (STRUCTURES / "1pfe.cif.gz", {"MVA": 15, "DSN": 10, "N2C": 7, "NCY": 6}),
        (STRUCTURES / "4oz7.pdb", {"22Q": 28}),  # 22W: below
    ],
    ids=["2q2k", "209d", "1pfe", "4oz7"],
)
def test_a_polymers_modified_residues_keep_their_ccd_bonds(path: Path, counts: dict[str, int]) -> None:
    if not path.exists():
        pytest.skip(f"{path} is not here")
    if path.suffix == ".cif":
        assert set(counts) <= _polymer_residue_names(path)  # the file lists them in a polymer sequence
    s = _featurize(path)
    residues = {k: v for k, v in _polymer_per_atom_residues(s).items() if v[0] != "22W"}
    assert {name for name, _ in residues.values()} == set(counts)
    bonds = {(int(i), int(j)) for i, j in zip(s.bonds["atom_i"], s.bonds["atom_j"], strict=True)}
    got: dict[str, int] = {}
    for name, atoms in residues.values():
        inside = {(i, j) for i, j in bonds if i in atoms and j in atoms}
        assert inside == _expected_inside(s, atoms, name), name
        got[name] = got.get(name, 0) + len(inside)
    # R25d's recount, bond pairs per residue name summed over the entry's copies
    assert got == counts


def test_a_modified_residue_the_ccd_does_not_fit_gets_perceived_bonds() -> None:
    """4oz7's 22W has an atom O that its CCD definition lacks (README: tokens from the file's atoms,
    as written): its bonds are perceived from distances, as a ligand's would be. They hold R25d's 24
    CCD pairs (12 in each of the two copies) and O's two bonds of 1.43 Å to CE and C83."""
    path = STRUCTURES / "4oz7.pdb"
    if not path.exists():
        pytest.skip(f"{path} is not here")
    s = _featurize(path)
    copies = [atoms for name, atoms in _polymer_per_atom_residues(s).values() if name == "22W"]
    assert len(copies) == 2
    for atoms in copies:
        names = {int(i): decode_atom_name(s.atoms["name"][i]) for i in atoms}
        inside = s.bonds[np.isin(s.bonds["atom_i"], atoms) & np.isin(s.bonds["atom_j"], atoms)]
        assert (inside["source"] == BondSource.PERCEIVED).all()
        pairs = {(int(i), int(j)) for i, j in zip(inside["atom_i"], inside["atom_j"], strict=True)}
        ccd = _expected_inside(s, atoms, "22W")
        assert len(ccd) == 12 and ccd <= pairs
        assert sorted(sorted((names[i], names[j])) for i, j in pairs - ccd) == [["C83", "O"], ["CE", "O"]]


@pytest.mark.parametrize(
    "path",
    [SAMPLES / "structures" / "2q2k.cif", STRUCTURES / "209d-assembly1.cif", STRUCTURES / "1pfe.cif.gz"],
    ids=["2q2k", "209d", "1pfe"],
)
def test_no_bond_between_two_polymer_residues_is_a_token_bond(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} is not here")
    s = _featurize(path)
    tok = s.tokens
    ligand = tok["mol_type"] == int(MolType.LIGAND)
    ti, tj = s.bonds["token_i"], s.bonds["token_j"]
    polymer = ~ligand[ti] & ~ligand[tj]
    assert polymer.any()  # the modified residues' own bonds
    same_residue = (tok["asym_id"][ti] == tok["asym_id"][tj]) & (
        tok["residue_index"][ti] == tok["residue_index"][tj]
    )
    assert (same_residue | ~polymer).all()  # peptide / phosphodiester links to neighbours are left out


def test_a_ligands_own_bonds_are_still_token_bonds() -> None:
    path = SAMPLES / "structures" / "102m.cif"
    s = _featurize(path)
    heme = [
        (
            decode_res_name(s.tokens["res_name"][b["token_i"]]),
            decode_res_name(s.tokens["res_name"][b["token_j"]]),
        )
        for b in s.bonds
    ]
    heme = [n for n in heme if n == ("HEM", "HEM")]
    # HEM's CCD definition: 50 bonds between heavy atoms (bonds to H left out), every one a token
    # bond unless a present pair is farther apart than 2.4 Å (none is in 102m's heme)
    block = gemmi.cif.read(str(SAMPLES / "ccd" / "HEM.cif")).sole_block()
    heavy = {gemmi.cif.as_string(r[0]) for r in block.find("_chem_comp_atom.", ["atom_id", "type_symbol"])
             if gemmi.cif.as_string(r[1]) != "H"}  # fmt: skip
    expected = sum(1 for r in block.find("_chem_comp_bond.", ["atom_id_1", "atom_id_2"])
                   if gemmi.cif.as_string(r[0]) in heavy and gemmi.cif.as_string(r[1]) in heavy)  # fmt: skip
    assert expected > 40
    assert len(heme) == expected
