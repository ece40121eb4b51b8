"""Structure parsing: every format, and every EDGE file rejected with the right reason."""

from __future__ import annotations

import gzip
from pathlib import Path

import gemmi
import pytest

from featurecache.errors import EmptyStructureError, ParseError, UnsupportedFormatError
from featurecache.parse.structure import _parse_structure, entry_stem, read_structure, structure_format
from tests.conftest import STRUCTURES


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("1MOM_min.cif", EmptyStructureError),  # only _struct_conf, no _atom_site
        ("4Q9R_min.cif", EmptyStructureError),  # only an audit category
        ("1bna-errors.cif", ParseError),  # deliberate syntax errors
        ("r5wkdsf.ent", UnsupportedFormatError),  # structure factors, not coordinates
        ("5moo_header.pdb", EmptyStructureError),  # header only
        ("header.pdb", EmptyStructureError),
    ],
)
def test_edge_files_fail_with_a_reason(name: str, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        read_structure(STRUCTURES / name)
    assert str(info.value), "the failure must carry a message"
    assert getattr(info.value, "stage", None) == "parse"


def test_gzip_is_transparent() -> None:
    plain = (STRUCTURES / "102m.cif").read_bytes()
    a = _parse_structure(plain, "102m.cif").structure
    b = _parse_structure(gzip.compress(plain), "102m.cif.gz").structure
    assert a[0].count_atom_sites() == b[0].count_atom_sites() > 0


def test_bcif_matches_its_notes() -> None:
    # SOURCES.tsv: "BinaryCIF, gzipped at source; 14 chains 2491 res"
    raw = read_structure(STRUCTURES / "6wg6.bcif.gz")
    assert raw.fmt == "bcif"
    model = raw.structure[0]
    assert len(model) == 14
    polymer_residues = sum(len(ch.get_polymer()) for ch in model)
    assert polymer_residues == 2491
    # coordinates decoded as numbers, not NaN
    assert all(abs(a.pos.x) < 1e4 for a in model[0][0])


def test_pdb_and_mmcif_twins_agree() -> None:
    cif = read_structure(STRUCTURES / "1A8O.cif").structure
    pdb = read_structure(STRUCTURES / "1A8O.pdb").structure
    assert cif[0].count_atom_sites() == pdb[0].count_atom_sites()


def test_malformed_charge_columns_recover_with_warning() -> None:
    # gemmi alone fails on this old file ("Wrong format for charge"); Biopython parses it.
    with pytest.raises(RuntimeError):
        gemmi.read_structure(str(STRUCTURES / "pdb1gdr.ent"))
    raw = read_structure(STRUCTURES / "pdb1gdr.ent")
    assert raw.structure[0].count_atom_sites() > 0
    assert "charge" in raw.structure.info["_featurecache.warning"]


def test_names() -> None:
    assert structure_format("x.cif.gz") == "mmcif"
    assert structure_format("pdb1gdr.ent") == "pdb"
    assert structure_format("6wg6.bcif.gz") == "bcif"
    assert structure_format("README.md") is None
    assert entry_stem("7a4d-assembly1.cif") == "7a4d-assembly1"
    assert entry_stem("AF-P01112-F1-model_v4.cif.gz") == "AF-P01112-F1-model_v4"


def test_empty_bytes() -> None:
    with pytest.raises(EmptyStructureError):
        _parse_structure(b"", "x.cif")
    assert Path(STRUCTURES).is_dir()
