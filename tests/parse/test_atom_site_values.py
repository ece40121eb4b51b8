"""``_atom_site`` values gemmi reads without complaint but wrong (review R25a s43): refused at parse
naming the atom, the value as the file writes it and its line.

Real files of the corpus, one field edited in memory.
"""

from __future__ import annotations

import math
from pathlib import Path

import gemmi
import pytest

from featurecache.errors import ParseError
from featurecache.parse.atom_site import B_FACTOR_IF_NOT_FINITE, MAX_FORMAL_CHARGE, OCCUPANCY_IF_NOT_FINITE
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


# --------------------------------------------------------------------- #9: occupancy and B-factor
def _atoms(st: gemmi.Structure) -> list[gemmi.Atom]:
    return [a for model in st for chain in model for res in chain for a in res]


def test_mmcif_occupancy_and_b_factor_that_are_no_finite_number_are_stored_defined_and_warned() -> None:
    """102m with occupancy nan on every row was stored with every occupancy NaN, no warning."""
    lines = (STRUCTURES / "102m.cif").read_text().splitlines(keepends=True)
    header = [line.split()[0] for line in lines if line.startswith("_atom_site.")]
    occ, b = header.index("_atom_site.occupancy"), header.index("_atom_site.B_iso_or_equiv")
    rows = [k for k, line in enumerate(lines) if line.startswith(("ATOM", "HETATM"))]
    for n, k in enumerate(rows):
        fields = lines[k].split()
        fields[occ] = "nan"
        fields[b] = ("inf", "1e400", "-nan")[n % 3] if n % 50 == 0 else fields[b]
        lines[k] = " ".join(fields) + "\n"
    raw = _parse_structure("".join(lines).encode(), "102m.cif")
    atoms = _atoms(raw.structure)
    assert len(atoms) == len(rows) and all(a.occ == OCCUPANCY_IF_NOT_FINITE for a in atoms)
    assert sum(a.b_iso == B_FACTOR_IF_NOT_FINITE for a in atoms) == len(rows[::50])
    assert all(math.isfinite(a.b_iso) for a in atoms)
    occ_warning, b_warning = (w for w in raw.warnings if "not a finite number" in w)
    assert occ_warning == (
        f"102m.cif: occupancy not a finite number for {len(rows)} atom(s) ('nan' in the file; first: atom N of "
        "residue MET 0 in chain A): stored as 1.0"
    )
    assert b_warning.startswith(
        f"102m.cif: B-factor not a finite number for {len(rows[::50])} atom(s) ('-nan', '1e400', 'inf' in the file; "
    ) and b_warning.endswith("stored as 0.0")


def test_pdb_occupancy_and_b_factor_that_are_no_finite_number_are_stored_defined_and_warned() -> None:
    lines = (STRUCTURES / "1A8O.pdb").read_bytes().split(b"\n")
    k = next(i for i, line in enumerate(lines) if line.startswith(b"ATOM"))
    lines[k] = lines[k][:54] + b"   nan   inf" + lines[k][66:]
    raw = _parse_structure(b"\n".join(lines), "1A8O.pdb")
    atom = next(a for a in _atoms(raw.structure) if a.serial == int(lines[k][6:11]))
    assert (atom.occ, atom.b_iso) == (OCCUPANCY_IF_NOT_FINITE, B_FACTOR_IF_NOT_FINITE)
    assert [w for w in raw.warnings if "not a finite number" in w] == [
        "1A8O.pdb: occupancy not a finite number for 1 atom(s) ('nan' in the file; first: atom N of residue ASP 152 "
        "in chain A): stored as 1.0",
        "1A8O.pdb: B-factor not a finite number for 1 atom(s) ('inf' in the file; first: atom N of residue ASP 152 "
        "in chain A): stored as 0.0",
    ]


@pytest.mark.parametrize("name", ["102m.cif", "1A8O.pdb", "5e5z.pdb", "2q2k.cif", "1lzh.pdb.gz"])
def test_sound_files_get_no_such_warning(name: str) -> None:
    raw = _parse_structure((STRUCTURES / name).read_bytes(), name)
    assert not [w for w in raw.warnings if "not a finite number" in w]
