"""CCD reader: per-code directory, components.cif(.gz), lazy loading; checked against a text scan."""

from __future__ import annotations

import gzip
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from featurecache.errors import ParseError
from featurecache.parse.ccd import CCD, _parse_component, parse_component_file, read_components

# tests/parse is not a package: load the shared independent CCD text scanner by path.
_spec = importlib.util.spec_from_file_location(
    "_ccdtext", Path(__file__).resolve().parents[1] / "chem" / "ccdtext.py"
)
assert _spec is not None and _spec.loader is not None
ccdtext = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ccdtext)

CODES = ("HEM", "GNP", "MG", "NAG", "ALA", "DA", "CLR", "PLM", "ZN")


@pytest.mark.parametrize("code", CODES)
def test_dir_matches_text_scan(code: str) -> None:
    comp = CCD(ccdtext.CCD_DIR)[code]
    rows = ccdtext.atoms(code)
    assert comp.code == code
    assert comp.atom_names == tuple(r["atom_id"] for r in rows)
    assert comp.elements == tuple(r["type_symbol"] for r in rows)
    assert comp.charges == tuple(int(r["charge"]) for r in rows)
    assert comp.leaving == tuple(r["pdbx_leaving_atom_flag"] == "Y" for r in rows)
    ideal = np.array([[float(r[f"pdbx_model_Cartn_{c}_ideal"]) for c in "xyz"] for r in rows])
    np.testing.assert_allclose(comp.ideal, ideal)
    brows = ccdtext.bonds(code)
    assert len(comp.bonds) == len(brows)
    for (i, j, order, arom, _), r in zip(comp.bonds, brows, strict=True):
        assert (comp.atom_names[i], comp.atom_names[j]) == (r["atom_id_1"], r["atom_id_2"])
        assert order == {"SING": 1, "DOUB": 2, "TRIP": 3}[r["value_order"]]
        assert arom == (r["pdbx_aromatic_flag"] == "Y")


def test_single_atom_written_as_pairs() -> None:
    mg = CCD(ccdtext.CCD_DIR)["MG"]
    assert mg.atom_names == ("MG",) and mg.atomic_numbers == (12,) and mg.charges == (2,)
    assert mg.bonds == ()


def test_missing_coordinates_are_nan() -> None:
    unk = CCD(ccdtext.CCD_DIR)["UNK"]
    rows = {r["atom_id"]: r for r in ccdtext.atoms("UNK")}
    cg = unk.index("CG")
    assert rows["CG"]["model_Cartn_x"] == "?"
    assert np.isnan(unk.model[cg]).all() and np.isfinite(unk.ideal[cg]).all()


def test_components_file_plain_and_gz(tmp_path: Path) -> None:
    big = tmp_path / "components.cif"
    with big.open("w") as out:
        for code in CODES:
            text = (ccdtext.CCD_DIR / f"{code}.cif").read_text()
            out.write(text if text.endswith("\n") else text + "\n")
    gz = tmp_path / "components.cif.gz"
    with big.open("rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    by_dir = CCD(ccdtext.CCD_DIR)
    for path in (big, gz):
        ccd = CCD(path)
        got = ccd.load(["HEM", "MG", "NOPE"])
        assert set(got) == {"HEM", "MG"}
        assert "NOPE" not in ccd
        for code in ("HEM", "MG"):
            a, b = got[code], by_dir[code]
            assert a.atom_names == b.atom_names and a.bonds == b.bonds
            assert a.sha256 == b.sha256  # the same block text, whichever container
    assert set(read_components(big)) == set(CODES)


def test_absent_code_and_path() -> None:
    assert CCD(ccdtext.CCD_DIR).get("ZZZZZ") is None
    assert CCD(None).get("ALA") is None
    with pytest.raises(ParseError):
        CCD(ccdtext.CCD_DIR / "no-such-dir")


def test_bond_to_unknown_atom_is_a_parse_error() -> None:
    text = (ccdtext.CCD_DIR / "EDO.cif").read_text().replace("EDO  C1  O1   SING", "EDO  C1  O9   SING", 1)
    assert "O9" in text
    with pytest.raises(ParseError):
        _parse_component(text)


def test_parse_component_file_gz(tmp_path: Path) -> None:
    gz = tmp_path / "NAG.cif.gz"
    gz.write_bytes(gzip.compress((ccdtext.CCD_DIR / "NAG.cif").read_bytes()))
    assert parse_component_file(gz).atom_names == CCD(ccdtext.CCD_DIR)["NAG"].atom_names
    assert CCD(tmp_path)["NAG"].code == "NAG"
