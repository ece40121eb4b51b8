"""Malformed structure files of review R1 (notes/s32/r1_malformed.md): each becomes a failure naming
the file and what is wrong, or, where the data is still right, the same features plus a warning.

Real files of the corpus, damaged in memory: H2 (PDB coordinates gemmi reads as 0.0), H4 (no
element in the file: from the residues' definitions, never guessed from mmCIF atom names), M2 (a
UTF-8 byte-order mark), M4 (``_atom_site`` columns gemmi needs), M7 (names longer than the store
holds), L4 (what a bad mmCIF coordinate field held).
"""

from __future__ import annotations

import gzip
import re
from functools import cache

import gemmi
import pytest

from featurecache.build.components import component_resolvers
from featurecache.errors import InputError, ParseError
from featurecache.featurize.entry import featurize_bytes
from featurecache.parse.structure import _parse_structure
from featurecache.tokenize.af3 import ComponentAtoms
from featurecache.types import Structure
from tests.conftest import CCD, STRUCTURES


@cache
def _ccd_atoms() -> ComponentAtoms:
    return component_resolvers(str(CCD))[0]


def _featurize(data: bytes, name: str, *, ccd: bool = True) -> Structure:
    return featurize_bytes(data, name, name, component_atoms=_ccd_atoms() if ccd else None)


def _assert_same_arrays(a: Structure, b: Structure) -> None:
    for x, y in ((a.atoms, b.atoms), (a.tokens, b.tokens), (a.bonds, b.bonds), (a.interfaces, b.interfaces)):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


def _refused(data: bytes, name: str) -> str:
    with pytest.raises(ParseError) as info:
        _featurize(data, name)
    assert info.value.stage == "parse"
    message = str(info.value)
    assert message.startswith(name)
    return message


# --------------------------------------------------------------------------- H2: PDB coordinates
def _pdb_with_x(value: bytes, *, every: int = 7) -> tuple[bytes, int, bytes]:
    """5e5z.pdb with the x field of every ``every``-th atom line replaced; (bytes, line number of
    the first such line, that line as it was)."""
    lines = (STRUCTURES / "5e5z.pdb").read_bytes().split(b"\n")
    atom_lines = [i for i, line in enumerate(lines) if line.startswith((b"ATOM", b"HETATM"))]
    first = atom_lines[0]
    original = lines[first]
    for i in atom_lines[::every]:
        lines[i] = lines[i][:30] + value + lines[i][38:]
    return b"\n".join(lines), first + 1, original


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (b"********", "the writer printed as '********'; write the structure as mmCIF"),
        (b"        ", "not a number (gemmi would read it as 0.0)"),
        (b"       ?", "not a number"),
        (b"     abc", "not a number"),
    ],
)
def test_pdb_coordinate_that_is_not_a_number_is_refused_naming_the_line(value: bytes, why: str) -> None:
    # gemmi reads these as 0.0: 5e5z's first atom was stored at (0.0, -0.306, -5.753), present
    data, line_no, original = _pdb_with_x(value)
    message = _refused(data, "5e5z.pdb")
    assert (
        f"5e5z.pdb line {line_no}: coordinates ({value.decode()!r}, {original[38:46].decode()!r}" in message
    )
    assert "of atom N of residue LEU 1 in chain A" in message and why in message


def test_pdb_coordinate_checks_pass_valid_files_and_leave_nan_to_the_finite_check() -> None:
    for name in ("5e5z.pdb", "1A8O.pdb", "7DDO.pdb", "2n0n_M1.pdb"):  # 5e5z has a 0.000 coordinate
        _parse_structure((STRUCTURES / name).read_bytes(), name)
    data, _, _ = _pdb_with_x(b"     nan", every=10**9)
    with pytest.raises(ParseError, match="non-finite coordinates"):
        _parse_structure(data, "5e5z.pdb")


# ------------------------------------------------------------------------- H4: unknown elements
def _type_symbols(name: str, value: str | None) -> bytes:
    """The mmCIF with every ``_atom_site.type_symbol`` set to ``value`` (None: the column removed)."""
    raw = (STRUCTURES / name).read_bytes()
    doc = gemmi.cif.read_string((gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode())
    if value is None:
        doc[0].find_loop("_atom_site.type_symbol").get_loop().remove_column("_atom_site.type_symbol")
    else:
        col = doc[0].find_values("_atom_site.type_symbol")
        for i in range(len(col)):
            col[i] = value
    return doc.as_string().encode()


@pytest.mark.parametrize("value", ["?", "Qq", None])
def test_atoms_without_an_element_take_it_from_their_definitions(value: str | None) -> None:
    # 102m: myoglobin, HEM, SO4 and waters; the elements used to be guessed from the mmCIF names
    # (CA calcium, CD cadmium, OG oganesson)
    good = _featurize((STRUCTURES / "102m.cif").read_bytes(), "102m.cif")
    s = _featurize(_type_symbols("102m.cif", value), "102m.cif")
    _assert_same_arrays(good, s)
    assert any(
        "no element in the file" in w and "taken from their residues' definitions" in w
        for w in s.parse_warnings  # the parser's warning (index/warnings.arrow: stage parse)
    )


def test_hydrogens_without_an_element_are_still_hydrogens() -> None:
    # 2lwu: an NMR model with its hydrogens (dropped as hydrogens, not kept as heavy atoms)
    good = _featurize((STRUCTURES / "2lwu.cif").read_bytes(), "2lwu.cif")
    _assert_same_arrays(good, _featurize(_type_symbols("2lwu.cif", "?"), "2lwu.cif"))


def test_an_element_no_definition_gives_is_refused_naming_the_atoms() -> None:
    # without --ccd only the standard residues (and water) are defined: HEM's and SO4's atoms are not
    with pytest.raises(ParseError) as info:
        _featurize(_type_symbols("102m.cif", "?"), "102m.cif", ccd=False)
    message = str(info.value)
    assert "no element for 48 atom(s)" in message  # HEM 43 (FE too: not named as its residue) + SO4 5
    assert "S, O1, O2, O3, O4 of SO4 157 in chain A (no definition of SO4 without --ccd)" in message
    assert "and 35 more of HEM 155 in chain A (no definition of HEM without --ccd)" in message
    assert "give --ccd" in message
    # 1GBT's GBS is named as an older definition: its atoms are not in the CCD's GBS
    message = _refused(_type_symbols("1GBT.cif", "?"), "1GBT.cif")
    assert (
        "CD, OD, C21, C22, C31, C32, NE, CZ and 2 more of GBS 704 in chain A (not in GBS's definition)"
        in message
    )


# ------------------------------------------------------------------------------- M2: byte-order mark
@pytest.mark.parametrize("name", ["102m.cif", "5e5z.pdb"])
@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("gz", [False, True])
def test_a_utf8_byte_order_mark_is_skipped(name: str, crlf: bool, gz: bool) -> None:
    raw = (STRUCTURES / name).read_bytes()
    damaged = b"\xef\xbb\xbf" + (raw.replace(b"\n", b"\r\n") if crlf else raw)
    damaged = gzip.compress(damaged) if gz else damaged
    _assert_same_arrays(_featurize(raw, name), _featurize(damaged, name + (".gz" if gz else "")))


# ----------------------------------------------------------------------- M4: _atom_site columns
def _without_columns(name: str, *columns: str) -> bytes:
    doc = gemmi.cif.read_string((STRUCTURES / name).read_text())
    for column in columns:
        tag = f"_atom_site.{column}"
        doc[0].find_loop(tag).get_loop().remove_column(tag)
    return doc.as_string().encode()


@pytest.mark.parametrize(
    ("columns", "named"),
    [
        (("Cartn_x",), "_atom_site has no Cartn_x column"),
        (("id", "Cartn_z"), "_atom_site has no id, Cartn_z column"),
        (("label_atom_id", "auth_atom_id"), "_atom_site has no auth_atom_id or label_atom_id column"),
        # auth columns only: which residues are one polymer is not said
        (("label_asym_id", "label_seq_id", "label_entity_id"), "no label_asym_id column"),
    ],
)
def test_missing_atom_site_columns_are_named_at_parse(columns: tuple[str, ...], named: str) -> None:
    # they were "structure has no models" at tokenize
    message = _refused(_without_columns("102m.cif", *columns), "102m.cif")
    assert named in message and "no atom can be read without it" in message


def test_a_missing_label_alt_id_column_means_no_alternative_locations() -> None:
    good = _featurize((STRUCTURES / "102m.cif").read_bytes(), "102m.cif")
    _assert_same_arrays(good, _featurize(_without_columns("102m.cif", "label_alt_id"), "102m.cif"))


# ----------------------------------------------------------------------------- M7: long names
def test_names_longer_than_the_store_holds_are_refused_naming_them() -> None:
    text = (STRUCTURES / "102m.cif").read_text()
    text = re.sub(r"\bSO4\b", "SULFATE1", text)  # SULFA in the store
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):  # label_atom_id and auth_atom_id (the name gemmi reads)
        if line.startswith("HETATM") and " HEM " in line and (" C1A " in line or " C2A " in line):
            lines[i] = re.sub(r" (C[12]A) ", r" CXYZ\1 ", line)
    text = "".join(lines)
    assert text.count(" CXYZC1A ") == text.count(" CXYZC2A ") == 2  # both CXYZ in the store
    message = _refused(text.encode(), "102m.cif")
    assert "residue SULFATE1 157 in chain A" in message
    assert "atoms CXYZC1A, CXYZC2A of residue HEM 155 in chain A" in message
    assert "residue names 5 characters, atom names 4" in message


def test_quoted_names_that_fit_are_not_refused() -> None:
    # 2q2k's DNA atom names are quoted ("O5'"): 5 characters as written, 3 as names
    assert '"O5\'"' in (STRUCTURES / "2q2k.cif").read_text()
    _parse_structure((STRUCTURES / "2q2k.cif").read_bytes(), "2q2k.cif")


# -------------------------------------------------------------- L4: what the coordinate field held
@pytest.mark.parametrize(
    ("value", "said"),
    [("?", "missing coordinates ('?', "), ("abc", "non-numeric coordinates ('abc', "), ("nan", "non-finite")],
)
def test_a_bad_mmcif_coordinate_says_what_the_file_held(value: str, said: str) -> None:
    lines = (STRUCTURES / "102m.cif").read_text().splitlines(keepends=True)
    k = next(i for i, line in enumerate(lines) if line.startswith("ATOM") and " CA " in line)
    fields = lines[k].split()
    fields[10] = value  # Cartn_x
    lines[k] = " ".join(fields) + "\n"
    with pytest.raises(InputError) as info:
        _parse_structure("".join(lines).encode(), "102m.cif")
    assert said in str(info.value) and "for atom CA of residue" in str(info.value)


@pytest.mark.parametrize(
    "name, edit, where",
    [
        # one Latin-1 byte in a loop value: gemmi names the loop's header (line 5) only
        ("latin1_in_loop.cif", lambda b: b.replace(b"ALANINE", b"AL\xc1NINE", 1), "line 13, column 34 ('Á', U+00C1)"),
        # unquoted UTF-8: gemmi says "parse error" only
        ("utf8_unquoted.cif", lambda b: b.replace(b"_entry.id 5Y2E", "_entry.id 5Y2E\n_struct.title Müller".encode(), 1),
         "line 4, column 16 ('ü', U+00FC)"),
    ],
)  # fmt: skip
def test_a_non_ascii_character_gemmi_cannot_read_is_named(name: str, edit, where: str) -> None:  # type: ignore[no-untyped-def]
    """Review R15 s40 #3: the error named no non-ASCII character (CIF 1.1 values are ASCII)."""
    src = (STRUCTURES / "5y2e.cif").read_bytes()
    with pytest.raises(ParseError) as err:
        _parse_structure(edit(src), name)
    assert f"the file holds a non-ASCII character at {where}" in str(err.value), err.value
    # quoted, the same character reads (gemmi takes UTF-8 inside quotes): the hint's advice holds
    quoted = src.replace(b"_entry.id 5Y2E", "_entry.id 5Y2E\n_struct.title 'Müller'".encode(), 1)
    assert _parse_structure(quoted, "quoted.cif").structure[0].count_atom_sites() > 0


@pytest.mark.parametrize("name", ["5y2e.cif", "5e5z.pdb"])
def test_carriage_return_line_endings_are_named(name: str) -> None:
    """Review R15 s40 #3: a file whose lines end in CR alone read as one line: "has no _atom_site
    category" / "no ATOM/HETATM records", though it has atoms. CRLF files read as before."""
    src = (STRUCTURES / name).read_bytes()
    with pytest.raises(ParseError, match="carriage return alone") as err:
        _parse_structure(src.replace(b"\n", b"\r"), name)
    assert err.value.stage == "parse"
    crlf = _parse_structure(src.replace(b"\n", b"\r\n"), name).structure
    assert crlf[0].count_atom_sites() == _parse_structure(src, name).structure[0].count_atom_sites() > 0


def test_a_quoted_non_ascii_character_is_not_blamed_for_a_damaged_row() -> None:
    """Review R19 s41 #4: any non-ASCII character of a file gemmi could not read was named, also one
    inside a quoted value or a text field (which gemmi reads), sending the reader away from the row
    that was the cause."""
    lines = (STRUCTURES / "5y2e.cif").read_text().splitlines(keepends=True)
    k = next(i for i, line in enumerate(lines) if line.startswith("_entry.id"))
    lines[k + 1 : k + 1] = ["_struct.title 'Müller et al.'\n", "_struct.pdbx_descriptor\n", ";Größe\n", ";\n"]
    atom = next(i for i, line in enumerate(lines) if line.startswith("ATOM"))
    lines[atom + 10] = " ".join(lines[atom + 10].split()[:5]) + "\n"  # a row cut short
    with pytest.raises(ParseError) as err:
        _parse_structure("".join(lines).encode(), "quoted_and_cut.cif")
    assert f"line {atom + 11} has 5 values" in str(err.value), err.value
    assert "non-ASCII" not in str(err.value), err.value
