"""A CCD definition whose ideal and model coordinates both lack one hydrogen keeps its stereo.

The real ALA and THR files, the coordinates of the hydrogen on a stereocentre (ALA's HA, THR's HA
and HB) set to ``?``: the chirality is still read from the dictionary's coordinates, so the
molecule carries the CCD's R/S labels (``pdbx_stereo_config``) and every embedding seed gives the
CCD's enantiomer (before, all chiral tags were dropped and 17 of 41 seeds embedded D-Ala).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gemmi
import numpy as np
import pytest
from rdkit.Chem import rdCIPLabeler

from featurecache.chem.conformer import conformer_for_component, mol_from_component
from featurecache.parse.ccd import parse_component_file
from tests.chem import ccdtext
from tests.conftest import CCD

CASES = {"ALA": ("HA",), "THR": ("HA", "HB")}
XYZ = [f"model_Cartn_{x}" for x in "xyz"] + [f"pdbx_model_Cartn_{x}_ideal" for x in "xyz"]


def _without_hydrogen_coords(code: str, hydrogens: tuple[str, ...], dst: Path) -> Path:
    doc = gemmi.cif.read(str(CCD / f"{code}.cif"))
    table = doc.sole_block().find("_chem_comp_atom.", ["atom_id", *XYZ])
    for row in table:
        if row[0] in hydrogens:
            for i in range(1, 7):
                row[i] = "?"
    out = dst / f"{code}.cif"
    doc.write_file(str(out))
    return out


def _signed_volume(p: dict[str, np.ndarray], centre: str, a: str, b: str, c: str) -> float:
    return float(np.dot(p[a] - p[centre], np.cross(p[b] - p[centre], p[c] - p[centre])))


@pytest.mark.parametrize("code", sorted(CASES))
def test_stereo_survives_a_hydrogen_without_coordinates(tmp_path: Path, code: str) -> None:
    comp = parse_component_file(_without_hydrogen_coords(code, CASES[code], tmp_path))
    assert all(not np.isfinite(comp.ideal[comp.index(h)]).any() for h in CASES[code])
    assert all(not np.isfinite(comp.model[comp.index(h)]).any() for h in CASES[code])
    mol, _ = mol_from_component(comp)
    rdCIPLabeler.AssignCIPLabels(mol)
    labels = {a.GetProp("atom_name"): a.GetProp("_CIPCode") for a in mol.GetAtoms() if a.HasProp("_CIPCode")}
    want = {
        r["atom_id"]: r["pdbx_stereo_config"] for r in ccdtext.atoms(code) if r["pdbx_stereo_config"] in "RS"
    }
    assert want and labels == want
    # the enantiomer does not depend on the embedding seed (the seed follows the code): CA's
    # N, C, CB volume has the sign of the CCD's ideal coordinates for every one of them
    ideal = {
        r["atom_id"]: np.array([float(r[f"pdbx_model_Cartn_{x}_ideal"]) for x in "xyz"])
        for r in ccdtext.atoms(code)
    }
    want_sign = np.sign(_signed_volume(ideal, "CA", "N", "C", "CB"))
    for k in range(12):
        conf = conformer_for_component(dataclasses.replace(comp, code=f"{code}{k}"), timeout_s=5)
        pos = dict(zip(conf.atom_names, conf.positions.astype(np.float64), strict=True))
        assert np.sign(_signed_volume(pos, "CA", "N", "C", "CB")) == want_sign, (code, k)
