"""Perceived components (a build without --ccd): charges are the file's, never invented; flat
rings stay flat. Expected values come from each code's CCD definition (its charges, its aromatic
flags, its ideal coordinates), which the perception never reads."""

from __future__ import annotations

from pathlib import Path

import gemmi
import numpy as np
import pytest

import featurecache
from featurecache.chem.conformer import conformer_for_perceived
from featurecache.const import decode_atom_name, decode_res_name
from tests.chem import ccdtext
from tests.conftest import STRUCTURES, build_store

#: (file, code): ligands of the real corpus with aromatic rings, a saturated one (methanol), a
#: uridine whose ring carries two carbonyls, and cGMP (a purine: fused 6- and 5-ring)
CASES = [
    ("4CUP.cif", "MOH"),
    ("4CUP.cif", "ZYB"),
    ("5zyh.cif", "9N0"),
    ("2q2k.cif", "5IU"),
    ("7pzb.pdb", "PCG"),
]


def _occurrence(path: str, code: str) -> tuple[list[str], list[int], np.ndarray, list[int]]:
    """The first residue ``code`` of ``path``: heavy atoms (first altloc), elements, coordinates, charges."""
    st = gemmi.read_structure(str(STRUCTURES / path))
    res = next(r for ch in st[0] for r in ch if r.name == code)
    atoms, seen = [], set()
    for a in res:
        if a.element.name not in ("H", "D") and a.name not in seen:
            seen.add(a.name)
            atoms.append(a)
    return (
        [a.name for a in atoms],
        [a.element.atomic_number for a in atoms],
        np.array([a.pos.tolist() for a in atoms]),
        [int(a.charge) for a in atoms],
    )


def _ideal(code: str) -> dict[str, np.ndarray]:
    return {
        a["atom_id"]: np.array([float(a[f"pdbx_model_Cartn_{x}_ideal"]) for x in "xyz"])
        for a in ccdtext.atoms(code)
    }


def _aromatic_rings(code: str) -> list[list[str]]:
    """The CCD's rings of atoms it flags aromatic (cycles of its aromatic bonds, 5 or 6 atoms)."""
    arom = {a["atom_id"] for a in ccdtext.atoms(code) if a["pdbx_aromatic_flag"] == "Y"}
    nbrs: dict[str, set[str]] = {}
    for b in ccdtext.bonds(code):
        i, j = b["atom_id_1"], b["atom_id_2"]
        if i in arom and j in arom:
            nbrs.setdefault(i, set()).add(j)
            nbrs.setdefault(j, set()).add(i)
    rings: set[frozenset[str]] = set()

    def walk(path: list[str]) -> None:
        for n in nbrs.get(path[-1], ()):
            if n == path[0] and len(path) in (5, 6):
                rings.add(frozenset(path))
            elif n not in path and len(path) < 6:
                walk([*path, n])

    for start in sorted(nbrs):
        walk([start])
    return [sorted(r) for r in rings if not any(o < r for o in rings)]


def _plane_rms(p: np.ndarray) -> float:
    p = p - p.mean(axis=0)
    return float(np.linalg.svd(p)[1][-1] / np.sqrt(len(p)))


@pytest.mark.parametrize(("path", "code"), CASES)
def test_perceived_charges_are_the_files_and_aromatic_rings_flat(path: str, code: str) -> None:
    names, z, xyz, charges = _occurrence(path, code)
    assert set(charges) == {0}  # these files mark no charge
    conf = conformer_for_perceived(code, names, z, xyz, charges, timeout_s=10)
    assert conf.strategy == "perceived" and conf.mask.all(), conf.reason
    # the CCD's charges of these atoms are all 0 too: nothing may be invented (xyz2mol made
    # methanol C-1/O+1 and 5IU's ring N+1/N-1)
    ccd_q = {a["atom_id"]: int(a["charge"]) for a in ccdtext.atoms(code)}
    assert [int(q) for q in conf.charges] == [ccd_q[n] for n in conf.atom_names]
    pos = dict(zip(conf.atom_names, conf.positions.astype(float), strict=True))
    rings = _aromatic_rings(code)
    if code == "5IU":  # its uracil ring is not flagged aromatic, but flat in the CCD's ideal coordinates
        rings = [["N1", "C2", "N3", "C4", "C5", "C6"]]
        assert _plane_rms(np.array([_ideal(code)[n] for n in rings[0]])) < 0.03
    for ring in rings:
        assert _plane_rms(np.array([pos[n] for n in ring])) < 0.03, (code, ring)
    if code == "MOH":
        ideal = _ideal(code)
        d, want = np.linalg.norm(pos["C"] - pos["O"]), np.linalg.norm(ideal["C"] - ideal["O"])
        assert abs(d - want) < 0.04, (d, want)  # a single C-O, not C=O (1.21) or C≡O (1.13)
    else:
        assert rings


def test_perceived_charges_come_from_the_file() -> None:
    names, z, xyz, _ = _occurrence("4CUP.cif", "MOH")
    conf = conformer_for_perceived("MOH", names, z, xyz, [0, -1], timeout_s=10)  # a methoxide, says the file
    assert dict(zip(conf.atom_names, conf.charges.tolist(), strict=True)) == {"C": 0, "O": -1}


def test_a_build_without_ccd_gives_no_invented_ref_charge(tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "4CUP.cif").symlink_to(STRUCTURES / "4CUP.cif")
    build_store(tmp_path / "s", inputs, workers=1)
    s = featurecache.open_store(tmp_path / "s")
    e = s.entry("4CUP")
    ref = s.reference_features(e)
    tok = np.asarray(e.atoms["token_index"])
    codes = [decode_res_name(e.tokens["res_name"][t]) for t in tok]
    moh = [k for k, c in enumerate(codes) if c == "MOH"]
    assert moh and ref["ref_mask"][moh].all()
    assert not ref["ref_charge"][moh].any()  # the CCD's MOH is neutral; the file marks no charge
    first = [k for k in moh if ref["ref_space_uid"][k] == ref["ref_space_uid"][moh[0]]]
    pos = {decode_atom_name(e.atoms["name"][k]): ref["ref_pos"][k].astype(float) for k in first}
    ideal = _ideal("MOH")
    assert abs(np.linalg.norm(pos["C"] - pos["O"]) - np.linalg.norm(ideal["C"] - ideal["O"])) < 0.04


@pytest.mark.parametrize(
    ("path", "code"), [("1pfe.cif.gz", "DSN"), ("1pfe.cif.gz", "MVA"), ("209d-assembly1.cif", "SAR"),
                       ("1A8O.cif", "MSE")],
)  # fmt: skip
def test_a_modified_residues_backbone_carbonyl_is_double(path: str, code: str) -> None:
    """Review R22 s41 #6: a modified residue's backbone C has two heavy neighbours inside the residue
    (its third, the next residue's N, is outside), so the flat-carbon rule never looked at it and its
    C=O stayed single: sp3 geometry at the peptide carbonyl of every perceived modified residue. The
    bond order expected is the CCD's (``value_order`` DOUB for C–O), which the perception never reads."""
    from featurecache.chem.perceive import perceive_mol

    names, elements, xyz, charges = _occurrence(path, code)
    (c_o,) = [b for b in ccdtext.bonds(code) if {b["atom_id_1"], b["atom_id_2"]} == {"C", "O"}]
    assert c_o["value_order"] == "DOUB"
    mol, _ = perceive_mol(names, elements, xyz, charges)
    bond = mol.GetBondBetweenAtoms(names.index("C"), names.index("O"))
    assert bond is not None and bond.GetBondTypeAsDouble() == 2.0, (code, bond and bond.GetBondType())
