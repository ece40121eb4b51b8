"""gemmi's "Wrong number of values in loop" names the line of the loop's ``loop_`` header; the
failure now also says where the loop's values go wrong (a line, a row, or what is left over).
Expected lines come from the files: the shipped malformed 1BNA (SOURCES.tsv: deliberate syntax errors) read by eye (its
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


def test_the_malformed_1bna_names_the_row_where_its_loop_goes_out_of_step() -> None:
    path = STRUCTURES / "1bna-errors.cif"
    lines = _lines(path)
    assert lines[37].startswith("loop_") and lines[51] == ";" and lines[546].startswith(";")  # the premise
    with pytest.raises(ParseError) as info:
        read_structure(path)
    message = str(info.value)
    assert "1bna-errors.cif:38:" in message  # gemmi's position, kept
    # its rows before line 52 are one line of 10 values each; the stray ';' there pairs every later
    # ';' line wrongly, so no later line ends a row
    assert (
        "the values go out of step in the row that begins at line 52, which opens a ';' text field that runs to line 547"
        in message
    ), message
    assert "each row before it has 10" in message, message


def _failure(tmp_path: Path, name: str, lines: list[str]) -> str:
    """The parse failure of the shipped ``name`` written with ``lines`` instead."""
    path = tmp_path / name
    path.write_text("\n".join(lines))
    with pytest.raises(ParseError) as info:
        read_structure(path)
    return str(info.value)


def _damaged(name: str, row: int, edit: str) -> tuple[list[str], int, int]:
    """``name``'s lines with its ``row``-th ``_atom_site`` row edited; that row's line, the columns."""
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
    return lines, at + 1, columns


@pytest.mark.parametrize(("edit", "count", "why"), [("drop", -1, "a value missing?"),
                                                     ("split", +1, "a value with spaces not quoted?")])  # fmt: skip
def test_a_damaged_atom_site_row_is_named_by_its_line(
    tmp_path: Path, edit: str, count: int, why: str
) -> None:
    lines, line, columns = _damaged("102m.cif", 700, edit)
    message = _failure(tmp_path, "102m.cif", lines)
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


def test_a_loop_whose_rows_span_lines_names_no_line(tmp_path: Path) -> None:
    """The real 1MOM_min.cif writes two ``_struct_conf`` rows over 4 lines each (a value holding a
    quote as a ';' text field), validly; a row after them loses a value (line 41). Counting lines
    of values named line 36, a valid row (review R6 M1). Where rows span lines before the damage
    the line cannot be told for sure: the hint says what is left over instead, and names none."""
    lines = (STRUCTURES / "1MOM_min.cif").read_text().split("\n")
    assert lines[40].startswith("TURN_P TURN_P3") and lines[40].endswith(" ?")
    assert lines[36].startswith(";TYPE I'")  # a row before it spans lines 36-39
    lines[40] = lines[40][:-2]
    message = _failure(tmp_path, "1MOM_damaged.cif", lines)
    assert "its values leave 19 over after the last whole row of 20" in message, message
    assert "line 36" not in message and "line 41" not in message, message


@pytest.mark.parametrize(
    ("name", "rows", "bad"),
    [
        # values begin on the last tag's line (valid CIF): they are values, not tags
        ("values on the tag line", "_a.note 0 N0 0.0 ok\n{rows}", "line 11 has 3 values"),
        # a form feed inside a quoted value: gemmi counts lines at '\n' only, as the hint must
        ("form feed in a value", "_a.note\n{rows_ff}", "line 11 has 3 values"),
    ],
)
def test_line_numbers_follow_gemmis_count(name: str, rows: str, bad: str) -> None:
    from featurecache.parse.cif_loops import loop_error_hint

    good = [f"{i} N{i} {i}.0 ok" for i in range(1, 9)]
    damaged = [*good[:4], "5 N5 5.0", *good[5:]]  # row 5 loses a value
    with_ff = [good[0], "2 N2 2.0 'a\x0cb'", *good[2:4], "5 N5 5.0", *good[5:]]
    text = (
        "data_x\nloop_\n_a.id\n_a.name\n_a.value\n"
        + rows.format(rows="\n".join(damaged), rows_ff="\n".join(with_ff))
        + "\n"
    )
    try:
        import gemmi

        gemmi.cif.read_string(text)
    except (RuntimeError, ValueError) as exc:
        reason = str(exc)
    else:
        raise AssertionError("gemmi read the damaged loop")
    assert reason.startswith("string:2:"), reason  # gemmi names the loop_ line
    hint = loop_error_hint(text, reason)
    assert hint is not None and hint.startswith(bad), (name, hint)


def test_damage_on_a_later_line_of_a_wrapped_row_names_the_row_not_its_first_line(tmp_path: Path) -> None:
    """1MOM_min's row on lines 36-39 is wrapped (a ';' text field on 37-38, then '?' on 39); 39
    loses its value. The hint named line 36, intact, as a line missing a value (review R6b M3). The
    rows before 36 are one line each, so the row that begins at 36 holds the damage: it says that."""
    lines = (STRUCTURES / "1MOM_min.cif").read_text().split("\n")
    assert lines[35].startswith("TURN_P TURN_P1") and lines[38] == "?"
    lines[38] = ""
    message = _failure(tmp_path, "1MOM_damaged.cif", lines)
    assert "the values go out of step in the row that begins at line 36" in message, message
    assert "line 36 has" not in message, message
