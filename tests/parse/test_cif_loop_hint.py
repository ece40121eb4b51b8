"""gemmi's "Wrong number of values in loop" names the line of the loop's ``loop_`` header; the
failure now also names the line where the loop's values go wrong. Expected lines come from the
files: the shipped malformed 1BNA (SOURCES.tsv: deliberate syntax errors) read by eye (its
``_database_PDB_rev`` rows at lines 49-51, a stray ';' at line 52 opening a text field that the
next ';' line, 547, closes), and real files damaged here at a row the test picks."""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache.errors import ParseError
from featurecache.parse.structure import read_structure
from tests.conftest import STRUCTURES


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_the_malformed_1bna_names_the_text_field_that_breaks_its_loop() -> None:
    path = STRUCTURES / "1bna-errors.cif"
    lines = _lines(path)
    assert lines[37].startswith("loop_") and lines[51] == ";" and lines[546].startswith(";")  # the premise
    with pytest.raises(ParseError) as info:
        read_structure(path)
    message = str(info.value)
    assert "1bna-errors.cif:38:" in message  # gemmi's position, kept
    assert "line 52 opens a ';' text field that runs to line 547" in message, message
    assert "where each row before it has 10" in message, message


def _damaged(tmp_path: Path, name: str, row: int, edit: str) -> tuple[Path, int, int]:
    """``name`` with the ``row``-th ``_atom_site`` row edited; the file, that row's line, the columns."""
    lines = _lines(STRUCTURES / name)
    header = next(i for i, s in enumerate(lines) if s.startswith("_atom_site.")) - 1
    assert lines[header].startswith("loop_")
    columns = 0
    while lines[header + 1 + columns].startswith("_atom_site."):
        columns += 1
    at = header + 1 + columns + row
    values = lines[at].split()
    assert len(values) == columns  # one row per line, no quoted values in this row
    if edit == "drop":
        lines[at] = " ".join(values[:5] + values[6:])
    else:  # a value with a space, unquoted
        lines[at] = " ".join([*values[:3], "N", "X", *values[4:]])
    out = tmp_path / name
    out.write_text("\n".join(lines) + "\n")
    return out, at + 1, columns


@pytest.mark.parametrize(("edit", "count", "why"), [("drop", -1, "a value missing?"),
                                                     ("split", +1, "a value with spaces not quoted?")])  # fmt: skip
def test_a_damaged_atom_site_row_is_named_by_its_line(
    tmp_path: Path, edit: str, count: int, why: str
) -> None:
    path, line, columns = _damaged(tmp_path, "102m.cif", 700, edit)
    with pytest.raises(ParseError) as info:
        read_structure(path)
    message = str(info.value)
    assert "Wrong number of values in loop _atom_site" in message
    assert (
        f"line {line} has {columns + count} values where each row before it has {columns} ({why})" in message
    )


def test_a_ccd_definition_with_a_damaged_atom_row_names_its_line(tmp_path: Path) -> None:
    """The same hint for a CCD file (ACT, acetate): its first ``_chem_comp_atom`` row loses a value."""
    from featurecache.errors import CCDError
    from featurecache.parse.ccd import parse_component_file
    from tests.conftest import CCD

    lines = _lines(CCD / "ACT.cif")
    header = lines.index("_chem_comp_atom.comp_id ") - 1
    assert lines[header].startswith("loop_")
    columns = 0
    while lines[header + 1 + columns].startswith("_chem_comp_atom."):
        columns += 1
    at = header + 1 + columns  # the first atom row
    values = lines[at].split()
    assert len(values) == columns
    lines[at] = " ".join(values[1:])
    path = tmp_path / "ACT.cif"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises((ParseError, CCDError)) as info:
        parse_component_file(path)
    message = str(info.value)
    assert (
        f"line {at + 1} has {columns - 1} values where the loop has {columns} columns (a value missing?)"
        in message
    )
