"""``_atom_site`` values gemmi reads without complaint but wrong (review R25a s43): refused at parse
naming the atom, the value as the file writes it and its line.

Real files of the corpus, one field edited in memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache.errors import ParseError
from featurecache.parse.atom_site import MAX_FORMAL_CHARGE
from featurecache.parse.ccd import _parse_component
from featurecache.parse.structure import _parse_structure
from tests.conftest import CCD, STRUCTURES


def _mmcif_with(path: Path, column: str, value: str, pick: dict[str, str]) -> tuple[bytes, int]:
    """The mmCIF ``path`` with ``column`` of its first ``_atom_site`` row matching ``pick`` (column →
    value) set to ``value``; (bytes, that row's line number from 1)."""
    lines = path.read_text().splitlines(keepends=True)
    header = [line.split()[0].removeprefix("_atom_site.") for line in lines if line.startswith("_atom_site.")]
    for k, line in enumerate(lines):
        fields = line.split()
        if line.startswith(("ATOM", "HETATM")) and all(fields[header.index(c)] == v for c, v in pick.items()):
            fields[header.index(column)] = value
            lines[k] = " ".join(fields) + "\n"
            return "".join(lines).encode(), k + 1
    raise AssertionError(f"no row of {path.name} matches {pick}")


# ----------------------------------------------------------------------------- #3: formal charges
@pytest.mark.parametrize("value", ["300", "264", "-129", "10", "1.5", "x"])
def test_a_formal_charge_that_is_none_is_refused_naming_atom_text_and_line(value: str) -> None:
    """300 was stored as 44 and 264 as 8 (gemmi keeps a charge in a signed char), silently."""
    data, line = _mmcif_with(STRUCTURES / "102m.cif", "pdbx_formal_charge", value, {"label_atom_id": "CA"})
    with pytest.raises(ParseError) as info:
        _parse_structure(data, "102m.cif")
    assert info.value.stage == "parse"
    assert str(info.value).startswith(
        f"102m.cif: pdbx_formal_charge {value!r} of atom CA of residue MET 0 in chain A (_atom_site id 2, "
        f"line {line}) is "
    ), info.value
    assert data.decode().splitlines()[line - 1].split()[1] == "2"


@pytest.mark.parametrize(
    "value", ["2", "-1", "+3", f"{MAX_FORMAL_CHARGE}", f"-{MAX_FORMAL_CHARGE}", "?", "."]
)
def test_formal_charges_atoms_carry_are_read(value: str) -> None:
    data, _ = _mmcif_with(STRUCTURES / "102m.cif", "pdbx_formal_charge", value, {"label_atom_id": "CA"})
    st = _parse_structure(data, "102m.cif").structure
    expected = 0 if value in "?." else int(value)
    assert st[0]["A"][0]["CA"][0].charge == expected


@pytest.mark.parametrize(("value", "why"), [("300", "is outside"), ("1.0", "is not an integer")])
def test_a_ccd_charge_that_is_none_is_refused_naming_the_atom(value: str, why: str) -> None:
    text = (CCD / "HEM.cif").read_text()
    row = next(line for line in text.splitlines() if line.startswith("HEM  FE "))
    fields = row.split()
    fields[4] = value  # _chem_comp_atom.charge
    with pytest.raises(ParseError) as info:
        _parse_component(text.replace(row, " ".join(fields)))
    assert info.value.stage == "ccd"
    assert str(info.value).startswith(f"CCD HEM: atom FE has charge {value!r}, which {why}"), info.value
    fields[4] = "+2"
    comp = _parse_component(text.replace(row, " ".join(fields)))
    assert comp.charges[comp.index("FE")] == 2


# ---------------------------------------------------------------------------- #8: residue numbers
@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        ("label_seq_id", "-2147483649", "is beyond a 32-bit integer (gemmi would read it as 2147483647)"),
        ("label_seq_id", "99999999999999999999", "is beyond a 32-bit integer (gemmi would read it as 1661992959)"),
        ("label_seq_id", "5.5", "is not an integer"),
        ("auth_seq_id", "99999999999999999999", "is beyond a 32-bit integer"),
    ],
)  # fmt: skip
def test_a_residue_number_gemmi_would_wrap_is_refused_naming_the_line(
    column: str, value: str, why: str
) -> None:
    """102m with label_seq_id -2147483649 on 28 rows was stored with four ligand chains of standard
    residues (A_THR39, ...) beside the polymer: gemmi wrapped the number."""
    data, line = _mmcif_with(
        STRUCTURES / "102m.cif", column, value, {"label_atom_id": "CG", "auth_seq_id": "4"}
    )
    with pytest.raises(ParseError) as info:
        _parse_structure(data, "102m.cif")
    seq = value if column == "auth_seq_id" else "4"
    assert info.value.stage == "parse"
    assert str(info.value).startswith(
        f"102m.cif: {column} {value!r} of atom CG of residue GLU {seq} in chain A (_atom_site id 35, line "
        f"{line}) {why}"
    ), info.value


def test_residue_numbers_gemmi_reads_are_read() -> None:
    for column, value in (
        ("label_seq_id", "2147483647"),
        ("auth_seq_id", "-2147483648"),
        ("auth_seq_id", "4A"),
    ):
        data, _ = _mmcif_with(
            STRUCTURES / "102m.cif", column, value, {"label_atom_id": "CG", "auth_seq_id": "4"}
        )
        assert _parse_structure(data, "102m.cif").structure[0].count_atom_sites() > 0
