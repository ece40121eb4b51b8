"""A CCD bond written ``AROM`` (value_order) is aromatic, never a quadruple bond.

The real PHE file with its ring's six bonds rewritten as ``AROM`` and their aromatic flags as
``N``: the conformer's ring is the CCD's flat benzene (ideal bond lengths), sanitization is not
relaxed, and both the conformer and the featurizer's bond list store the ring bonds as aromatic
(order 4, types.Bond).
"""

from __future__ import annotations

from pathlib import Path

import gemmi
import numpy as np

from featurecache.chem.bonds import AROMATIC_ORDER, component_bonds
from featurecache.chem.conformer import conformer_for_component
from featurecache.chem.library import clear_component_caches
from featurecache.parse.ccd import parse_component_file
from tests.chem import ccdtext
from tests.conftest import CCD

RING = {"CG", "CD1", "CD2", "CE1", "CE2", "CZ"}


def _phe_with_arom_bonds(dst: Path) -> Path:
    doc = gemmi.cif.read(str(CCD / "PHE.cif"))
    table = doc.sole_block().find(
        "_chem_comp_bond.", ["atom_id_1", "atom_id_2", "value_order", "pdbx_aromatic_flag"]
    )
    n = 0
    for row in table:
        if {row[0], row[1]} <= RING:
            row[2], row[3] = "AROM", "N"
            n += 1
    assert n == 6
    dst.mkdir(parents=True, exist_ok=True)
    doc.write_file(str(dst / "PHE.cif"))
    return dst


def test_arom_bonds_are_aromatic(tmp_path: Path) -> None:
    ccd_dir = _phe_with_arom_bonds(tmp_path / "ccd")
    comp = parse_component_file(ccd_dir / "PHE.cif")
    conf = conformer_for_component(comp, timeout_s=5)
    assert conf.strategy == "etkdg" and "partial sanitization" not in conf.reason, conf.reason
    names = list(conf.atom_names)
    pos = dict(zip(names, conf.positions.astype(np.float64), strict=True))
    ring_bonds = [
        (names[i], names[j], int(o)) for i, j, o in conf.bonds.tolist() if {names[i], names[j]} <= RING
    ]
    assert len(ring_bonds) == 6 and {o for *_, o in ring_bonds} == {AROMATIC_ORDER}
    ideal = {
        r["atom_id"]: np.array([float(r[f"pdbx_model_Cartn_{x}_ideal"]) for x in "xyz"])
        for r in ccdtext.atoms("PHE")
    }
    for a, b, _ in ring_bonds:
        want = float(np.linalg.norm(ideal[a] - ideal[b]))  # the CCD's own aromatic C-C, about 1.39 Å
        assert abs(float(np.linalg.norm(pos[a] - pos[b])) - want) < 0.03, (a, b)
    p = np.array([pos[n] for n in sorted(RING)])
    p -= p.mean(axis=0)
    assert float(np.linalg.svd(p)[1][-1] / np.sqrt(6)) < 0.02
    clear_component_caches()
    try:
        got = component_bonds("PHE", names, ccd_path=ccd_dir)
    finally:
        clear_component_caches()
    assert got is not None
    assert sorted(o for i, j, o in got if {names[i], names[j]} <= RING) == [AROMATIC_ORDER] * 6
