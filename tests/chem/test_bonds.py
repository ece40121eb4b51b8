"""component_bonds: CCD connectivity among the atoms present, checked against the CCD text."""

from __future__ import annotations

import pytest

from featurecache.chem.bonds import component_bonds
from tests.chem import ccdtext


def _heavy_bonds_text(code: str, names: list[str]) -> set[tuple[int, int, int]]:
    where = {n: k for k, n in enumerate(names)}
    out = set()
    for b in ccdtext.bonds(code):
        i, j = where.get(b["atom_id_1"]), where.get(b["atom_id_2"])
        if i is None or j is None:
            continue
        order = 4 if b["pdbx_aromatic_flag"] == "Y" else {"SING": 1, "DOUB": 2, "TRIP": 3}[b["value_order"]]
        out.add((min(i, j), max(i, j), order))
    return out


@pytest.mark.parametrize("code", ("HEM", "GNP", "NAG", "PHE", "CLR"))
def test_matches_ccd_text(code: str) -> None:
    names = [n for n, _ in ccdtext.heavy_atoms(code)]
    got = component_bonds(code, names, ccdtext.CCD_DIR)
    assert got is not None
    assert set(got) == _heavy_bonds_text(code, names)
    assert all(i < j for i, j, _ in got)


def test_aromatic_bonds_are_order_4() -> None:
    names = [n for n, _ in ccdtext.heavy_atoms("PHE")]
    got = component_bonds("PHE", names, ccdtext.CCD_DIR)
    assert got is not None
    ring = {"CG", "CD1", "CD2", "CE1", "CE2", "CZ"}
    aromatic = {frozenset((names[i], names[j])) for i, j, o in got if o == 4}
    assert len(aromatic) == 6 and all(pair <= ring for pair in aromatic)


def test_leaving_and_absent_atoms_drop_out() -> None:
    names = ["N", "CA", "C", "O", "CB"]  # ALA without OXT, order shuffled below
    shuffled = ["CB", "O", "C", "CA", "N"]
    got = component_bonds("ALA", shuffled)  # packaged standard residue, no CCD path
    assert got is not None
    pairs = {frozenset((shuffled[i], shuffled[j])) for i, j, _ in got}
    assert pairs == {frozenset(p) for p in (("N", "CA"), ("CA", "C"), ("C", "O"), ("CA", "CB"))}
    assert len(names) == 5


def test_unknown_code_is_none() -> None:
    assert component_bonds("QQQ", ["C1", "C2"], ccdtext.CCD_DIR) is None
    assert component_bonds("HEM", ["FE"]) is None  # HEM is not packaged and no CCD given


def test_foreign_atom_names_mean_no_definition() -> None:
    # one name the CCD's ALA does not have: the caller must perceive the residue's bonds instead
    assert component_bonds("ALA", ["N", "CA", "C", "O", "CB", "XX1"]) is None
    assert (
        component_bonds("ALA", ["N", "CA", "C", "O", "CB", "OXT"]) is not None
    )  # leaving atom is still ALA's
