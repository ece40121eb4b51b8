"""Packaged standard residues: checked against the shared CCD files read by a plain text scan."""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache.chem.standard import standard_components, standard_heavy_atoms
from featurecache.const import DNA_RESIDUES, PROTEIN_RESIDUES, RNA_RESIDUES

CCD_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "ccd"
CODES = (*PROTEIN_RESIDUES, "UNK", *RNA_RESIDUES, *DNA_RESIDUES)


def _scan_atoms(text: str) -> list[tuple[str, str, bool]]:
    """(name, element, leaving) of each _chem_comp_atom row, by splitting lines (no CIF library)."""
    lines = text.splitlines()
    header: list[str] = []
    rows: list[tuple[str, str, bool]] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("_chem_comp_atom."):
            while i < len(lines) and lines[i].startswith("_chem_comp_atom."):
                header.append(lines[i].split()[0].split(".", 1)[1])
                i += 1
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "_", "loop_")):
                f = lines[i].split()
                row = dict(zip(header, f, strict=True))
                rows.append(
                    (row["atom_id"].strip('"'), row["type_symbol"], row["pdbx_leaving_atom_flag"] == "Y")
                )
                i += 1
            break
        i += 1
    return rows


def test_all_standard_codes_are_packaged() -> None:
    assert set(standard_components()) == set(CODES)


@pytest.mark.parametrize("code", CODES)
def test_heavy_atoms_match_ccd_file(code: str) -> None:
    rows = _scan_atoms((CCD_DIR / f"{code}.cif").read_text())
    assert rows, code
    expected = tuple((n, e) for n, e, leaving in rows if e != "H" and not leaving)
    assert standard_heavy_atoms(code) == expected


def test_known_heavy_atom_counts() -> None:
    # Textbook heavy-atom counts of residues inside a chain (no OXT / OP3).
    assert len(standard_heavy_atoms("GLY")) == 4
    assert len(standard_heavy_atoms("TRP")) == 14
    assert len(standard_heavy_atoms("DA")) == 21
    assert len(standard_heavy_atoms("G")) == 23
    assert ("OXT", "O") not in standard_heavy_atoms("ALA")


def test_unknown_code_raises() -> None:
    with pytest.raises(KeyError):
        standard_heavy_atoms("HEM")
