"""reference_features: the join of an entry's atoms onto the component table."""

from __future__ import annotations

import numpy as np
import pytest

from featurecache.chem.conformer import conformer_for_component, conformer_for_perceived
from featurecache.chem.reference import ComponentTable, missing_reference_atoms, reference_features
from featurecache.chem.standard import standard_component
from featurecache.const import encode_atom_name, encode_res_name
from featurecache.parse.ccd import CCD
from featurecache.types import Atom, Token
from tests.chem import ccdtext

# residue: (code, [(atom name, atomic number)])
RESIDUES = [
    ("ALA", [("N", 7), ("CA", 6), ("C", 6), ("O", 8), ("CB", 6)]),
    ("MG", [("MG", 12)]),
    ("XYZ", [("C1", 6), ("O1", 8)]),  # no definition anywhere
    ("ALA", [("CA", 6), ("QQ", 6)]),  # QQ is not an ALA atom
    ("NOP", [("C1", 6)]),  # no definition and no stored conformer
]


def _entry() -> tuple[np.ndarray, np.ndarray]:
    n_atoms = sum(len(a) for _, a in RESIDUES)
    atoms = np.zeros(n_atoms, dtype=Atom)
    tokens = np.zeros(n_atoms, dtype=Token)  # one token per atom keeps the test simple
    k = 0
    for uid, (code, members) in enumerate(RESIDUES):
        for name, z in members:
            atoms[k]["name"] = encode_atom_name(name)
            atoms[k]["element"] = z
            atoms[k]["charge"] = 0
            atoms[k]["token_index"] = k
            atoms[k]["ref_space_uid"] = uid
            atoms[k]["coords"] = (100.0 + k, -50.0, 7.0)  # ground truth: must never show up
            tokens[k]["res_name"] = encode_res_name(code)
            tokens[k]["atom_start"], tokens[k]["atom_count"] = k, 1
            k += 1
    return atoms, tokens


@pytest.fixture(scope="module")
def table() -> ComponentTable:
    ala = conformer_for_component(standard_component("ALA"))  # type: ignore[arg-type]
    mg = conformer_for_component(CCD(ccdtext.CCD_DIR)["MG"])
    xyz = conformer_for_perceived("XYZ", ["C1", "O1"], [6, 8], np.array([[0.0, 0, 0], [1.43, 0, 0]]))
    return ComponentTable.from_conformers([ala, mg, xyz])


def test_join_by_code_and_name(table: ComponentTable) -> None:
    atoms, tokens = _entry()
    ref = reference_features(atoms, tokens, table)
    ala = table.component("ALA")
    where = {n: k for k, n in enumerate(ala["atom_names"])}
    for k, name in enumerate(["N", "CA", "C", "O", "CB"]):
        assert ref["ref_mask"][k]
        np.testing.assert_array_equal(ref["ref_pos"][k], ala["ref_pos"][where[name]])
    assert ref["ref_mask"][5] and ref["ref_element"][5] == 12 and ref["ref_charge"][5] == 2  # MG2+ from CCD
    assert ref["ref_mask"][6] and ref["ref_mask"][7]  # XYZ found through its perceived key
    assert ref["ref_mask"][8] and not ref["ref_mask"][9]  # CA yes, QQ no
    assert not ref["ref_mask"][10]  # NOP: nothing stored
    assert (ref["ref_pos"][~ref["ref_mask"]] == 0).all()
    np.testing.assert_array_equal(ref["ref_atom_name_chars"], atoms["name"])
    np.testing.assert_array_equal(ref["ref_space_uid"], atoms["ref_space_uid"])
    assert ref["ref_pos"].dtype == np.float32 and ref["ref_pos"].shape == (len(atoms), 3)


def test_ground_truth_never_reaches_ref_pos(table: ComponentTable) -> None:
    atoms, tokens = _entry()
    before = reference_features(atoms, tokens, table)["ref_pos"].copy()
    atoms["coords"] += np.random.default_rng(1).normal(0, 3.0, atoms["coords"].shape).astype(np.float32)
    after = reference_features(atoms, tokens, table)["ref_pos"]
    assert before.tobytes() == after.tobytes()
    assert np.abs(after).max() < 20  # centred conformers, nowhere near the file's 100 Å coordinates


def test_dict_columns_work_like_structured_arrays(table: ComponentTable) -> None:
    atoms, tokens = _entry()
    a = reference_features(atoms, tokens, table)
    b = reference_features(
        {f: atoms[f] for f in atoms.dtype.names or ()}, {"res_name": tokens["res_name"]}, table
    )
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_missing_atoms_are_explained(table: ComponentTable) -> None:
    atoms, tokens = _entry()
    missing = missing_reference_atoms(atoms, tokens, table)
    assert [(m[1], m[2]) for m in missing] == [
        ("QQ", "atom name not in the component definition"),
        ("C1", "no reference conformer for the component"),
    ]
    assert missing[1][0] == "NOP"


def test_failed_component_masks_its_atoms() -> None:
    failed = conformer_for_perceived("ODD", ["C1"], [6], np.array([[np.nan, 0, 0]]))
    assert failed.strategy == "failed"
    table = ComponentTable.from_conformers([failed])
    atoms = np.zeros(1, dtype=Atom)
    atoms["name"] = encode_atom_name("C1")
    atoms["element"] = 6
    tokens = np.zeros(1, dtype=Token)
    tokens["res_name"] = encode_res_name("ODD")
    ref = reference_features(atoms, tokens, table)
    assert not ref["ref_mask"][0] and ref["ref_element"][0] == 6
    assert missing_reference_atoms(atoms, tokens, table)[0][2] == "component strategy failed"


def test_later_rows_override_earlier() -> None:
    ala = conformer_for_component(standard_component("ALA"))  # type: ignore[arg-type]
    shifted = type(ala)(**{**ala.__dict__, "positions": ala.positions + np.float32(1.0)})
    table = ComponentTable.from_conformers([ala, shifted])
    assert len(table) == 1
    np.testing.assert_array_equal(table.component("ALA")["ref_pos"], shifted.positions)


def test_arrow_round_trip(table: ComponentTable) -> None:
    back = ComponentTable.from_arrow(table.to_arrow())
    assert back.keys == table.keys and back.strategy == table.strategy
    for key in table.keys:
        a, b = table.component(key), back.component(key)
        assert a["atom_names"] == b["atom_names"]
        for f in ("ref_pos", "mask", "element", "charge"):
            np.testing.assert_array_equal(a[f], b[f])
    atoms, tokens = _entry()
    x, y = reference_features(atoms, tokens, table), reference_features(atoms, tokens, back)
    for f in x:
        np.testing.assert_array_equal(x[f], y[f])
    assert len(ComponentTable.from_arrow(ComponentTable.empty().to_arrow())) == 0


def test_residue_with_foreign_names_uses_its_perceived_component(table: ComponentTable) -> None:
    # The 4th residue is ALA with a non-CCD atom name: once a perceived ALA#hash component of
    # exactly its atoms is stored, the whole residue takes its reference from that conformer.
    alt = conformer_for_perceived("ALA", ["CA", "QQ"], [6, 6], np.array([[0.0, 0, 0], [1.53, 0, 0]]))
    both = ComponentTable.from_conformers(
        [conformer_for_component(standard_component("ALA")), alt]  # type: ignore[arg-type]
    )
    atoms, tokens = _entry()
    ref = reference_features(atoms, tokens, both)
    assert ref["ref_mask"][8] and ref["ref_mask"][9]
    np.testing.assert_array_equal(ref["ref_pos"][8:10], alt.positions)
    # the complete ALA residue still uses the CCD component
    np.testing.assert_array_equal(ref["ref_pos"][1], both.component("ALA")["ref_pos"][1])
    d = float(np.linalg.norm(ref["ref_pos"][8] - ref["ref_pos"][9]))
    assert 1.3 < d < 1.7  # a chemically sane embedded C-C bond


def test_reference_join_needs_no_rdkit() -> None:
    # the lookup image and the training client use the join without RDKit installed
    import subprocess
    import sys

    code = "import sys, featurecache.chem.reference as r; r.ComponentTable.empty(); print('rdkit' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == "False"
