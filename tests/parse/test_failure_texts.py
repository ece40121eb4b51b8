"""Failure texts say what the file holds (review R25a s43 #10).

mmCIF coordinates ``inf -inf`` failed as "non-finite coordinates (27.312, nan, nan)" (gemmi reads
them as NaN): a user grepping the file for ``nan`` finds nothing. An a3m named ``.pdb`` and a PDB
file cut inside its header failed with "PDB file has no ATOM/HETATM records (header only)", naming
no file, and "header only" was wrong for the a3m.
"""

from __future__ import annotations

import pytest

from featurecache.errors import EmptyStructureError, InputError
from featurecache.parse.structure import _parse_structure
from tests.conftest import REAL, STRUCTURES


def _mmcif_ca_with(x: str, y: str, z: str) -> tuple[bytes, tuple[str, str, str]]:
    """102m.cif with the coordinates of its first CA set (those it had, when a field is '')."""
    lines = (STRUCTURES / "102m.cif").read_text().splitlines(keepends=True)
    k = next(i for i, line in enumerate(lines) if line.startswith("ATOM") and " CA " in line)
    fields = lines[k].split()
    fields[10:13] = [new or old for new, old in zip((x, y, z), fields[10:13], strict=True)]
    lines[k] = " ".join(fields) + "\n"
    return "".join(lines).encode(), (fields[10], fields[11], fields[12])


@pytest.mark.parametrize("values", [("", "inf", "-inf"), ("1e400", "", ""), ("", "", "-1E999")])
def test_non_finite_mmcif_coordinates_are_shown_as_the_file_writes_them(values: tuple[str, str, str]) -> None:
    data, written = _mmcif_ca_with(*values)
    with pytest.raises(InputError) as info:
        _parse_structure(data, "102m.cif")
    shown = ", ".join(repr(v) for v in written)
    assert f"102m.cif: non-finite coordinates ({shown} in the file) for atom CA of residue MET" in str(
        info.value
    )
    assert "nan" not in str(info.value)


def test_non_finite_pdb_coordinates_are_shown_as_the_file_writes_them() -> None:
    lines = (STRUCTURES / "1A8O.pdb").read_text().splitlines(keepends=True)
    k = next(i for i, line in enumerate(lines) if line.startswith("ATOM"))
    lines[k] = lines[k][:38] + "     inf" + lines[k][46:]
    with pytest.raises(InputError) as info:
        _parse_structure("".join(lines).encode(), "1A8O.pdb")
    x, z = lines[k][30:38].strip(), lines[k][46:54].strip()
    assert f"1A8O.pdb: non-finite coordinates ({x!r}, 'inf', {z!r} in the file) for atom N" in str(info.value)


def test_a_file_with_no_atom_records_is_named_with_what_it_holds() -> None:
    a3m = (REAL / "msas" / "openfold" / "2q2k_A" / "bfd_uniclust_hits.a3m").read_bytes()
    with pytest.raises(EmptyStructureError) as info:
        _parse_structure(a3m, "2q2k_A.pdb")
    first = a3m.decode().splitlines()[0].strip()
    assert str(info.value) == (
        f"2q2k_A.pdb: no ATOM/HETATM records ({len(a3m.decode().splitlines())} lines; first line: {first[:60]!r})"
    )
    header = (STRUCTURES / "5moo_header.pdb").read_bytes()
    with pytest.raises(EmptyStructureError) as info:
        _parse_structure(header, "5moo_header.pdb")
    assert str(info.value).startswith(
        "5moo_header.pdb: no ATOM/HETATM records ("
    ) and "first line: 'HEADER" in str(info.value)
