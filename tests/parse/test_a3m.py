"""a3m parser: strings for each rule, then every real a3m file against independent line counts."""

from __future__ import annotations

import gzip
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from featurecache.errors import MSAError
from featurecache.parse.a3m import (
    PSEUDO_ROW_NAMES,
    _a3m_queries,
    _parse_a3m,
    expand,
    find_query,
    parse_a3m,
    read_msa_text,
    reroot,
    scan_a3m,
)
from featurecache.types import ParsedMSA

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"
MSAS = REAL / "msas"


def _raw_records(text: str) -> list[tuple[str, str]]:
    """(header, sequence) pairs by plain line splitting: the independent reference."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line.startswith(">"):
            out.append((line[1:], ""))
        elif out and line.strip() and not line.startswith(("#", ";")):
            out[-1] = (out[-1][0], out[-1][1] + line.strip())
    return out


def _real_records(text: str) -> list[tuple[str, str]]:
    return [(h, s) for h, s in _raw_records(text) if h.split()[0] not in PSEUDO_ROW_NAMES] if text else []


# --- rules, on strings ---------------------------------------------------------------------------


def test_insertions_gaps_and_wrapped_lines() -> None:
    text = ">query desc\nACDE\nFG\n>hit1\nA-dfDEf\nFG\n>hit2\n--DEFG\n"
    (msa,) = _parse_a3m(text)
    assert msa.headers == ("query desc", "hit1", "hit2")
    assert msa.rows == ("ACDEFG", "A-dfDEfFG", "--DEFG")
    assert msa.query_sequence == "ACDEFG"
    assert msa.fmt == "a3m" and msa.block == 0


def test_comments_pseudo_rows_and_blank_lines_are_dropped() -> None:
    text = (
        "#A3M#\n; a comment\n\n>ss_dssp\nCHHC\n>ss_pred PSIPRED\nCHHC\n>ss_conf PSIPRED\n9876\n"
        ">query\nMKLV\n\n>hit\nMK-V\n"
    )
    (msa,) = _parse_a3m(text)
    assert msa.headers == ("query", "hit")
    assert msa.rows == ("MKLV", "MK-V")


def test_empty_and_comment_only_files_give_no_msa() -> None:
    assert _parse_a3m("") == []
    assert _parse_a3m("\n\n#A3M#\n") == []


def test_nul_separated_queries_stay_separate() -> None:
    text = ">101\nMKV\n>UniRef100_X\t12\t0.5\nMRV\n\x00>102\nGGA\n>UniRef100_Y\t10\nG-A\n\x00"
    msas = _parse_a3m(text)
    assert [m.query_sequence for m in msas] == ["MKV", "GGA"]
    assert [m.block for m in msas] == [0, 1]
    assert msas[0].headers[1] == "UniRef100_X\t12\t0.5"
    assert msas[1].rows == ("GGA", "G-A")


def test_query_with_gaps_is_rerooted_onto_its_residues() -> None:
    # ColabFold writes "YYDP---" style queries; columns must be the query's residues only.
    (msa,) = _parse_a3m(">q\nAC-D\n>h\nACED\n>h2\nA-GD\n")
    assert msa.rows[0] == "ACD"
    assert msa.rows[1] == "ACeD"  # the residue in the query-gap column becomes an insertion
    assert msa.rows[2] == "A-gD"


def test_inconsistent_rows_raise_msa_error() -> None:
    with pytest.raises(MSAError, match="match columns"):
        _parse_a3m(">q\nACDE\n>h\nACD\n")
    with pytest.raises(MSAError, match="before the first"):
        _parse_a3m("ACDE\n>q\nACDE\n")


def test_expand_and_reroot_on_another_row() -> None:
    rows = ("ACDE", "AxyC-E", "zACDE")
    full = expand(rows)
    assert len({len(r) for r in full}) == 1
    assert [r.replace(".", "") for r in full] == [r for r in rows]
    # re-root at row 1: its residues A,x,y,C,E become the columns
    msa = ParsedMSA(("q", "h1", "h2"), rows, "a3m")
    moved = reroot(msa, 1)
    assert moved.headers == ("h1", "q", "h2")
    assert moved.rows[0] == "AXYCE"
    assert moved.query_sequence == "AXYCE"
    assert all(len(re.sub("[a-z]", "", r)) == 5 for r in moved.rows)
    assert find_query(msa, "axyce") == 1
    assert find_query(msa, "NOPE") is None


# --- real files ----------------------------------------------------------------------------------

REAL_A3M = sorted(p for p in MSAS.rglob("*") if p.is_file() and ".a3m" in p.name)


def test_corpus_has_a3m_files() -> None:
    assert len(REAL_A3M) == 39  # README: 39 a3m files


@pytest.mark.parametrize("path", REAL_A3M, ids=lambda p: str(p.relative_to(MSAS)))
def test_real_a3m_rows_match_header_count(path: Path) -> None:
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    blocks = [b for b in text.split("\x00") if _real_records(b)]
    msas = parse_a3m(path)
    assert len(msas) == len(blocks)
    for msa, block in zip(msas, blocks, strict=True):
        records = _real_records(block)
        assert msa.depth == len(records)
        assert msa.headers[0] == records[0][0].strip()
        assert msa.query_sequence == re.sub(r"[-.]", "", records[0][1]).upper()
        n_match = len(msa.query_sequence)
        assert all(len(re.sub(r"[a-z.]", "", r)) == n_match for r in msa.rows)
        assert msa.path == str(path)


def test_real_nul_separated_colabfold_file_gives_two_msas() -> None:
    path = MSAS / "openfold-3" / "hemoglobin" / "uniref.a3m.gz"
    raw = gzip.decompress(path.read_bytes())
    pieces = [p for p in raw.split(b"\x00") if p.strip()]
    msas = parse_a3m(path)
    assert len(msas) == len(pieces) == 2
    assert [m.headers[0] for m in msas] == ["101", "102"]
    for msa, piece in zip(msas, pieces, strict=True):
        assert msa.depth == piece.count(b"\n>") + int(piece.startswith(b">"))
    assert msas[0].query_sequence != msas[1].query_sequence


def test_real_hhsuite_pseudo_rows_dropped() -> None:
    path = MSAS / "hh-suite" / "test.a3m.gz"
    text = gzip.decompress(path.read_bytes()).decode()
    names = [line[1:].split()[0] for line in text.splitlines() if line.startswith(">")]
    pseudo = [n for n in names if n.startswith("ss_")]
    assert len(pseudo) == 3
    (msa,) = parse_a3m(path)
    assert msa.depth == len(names) - len(pseudo)
    assert not any(h.split()[0].startswith("ss_") for h in msa.headers)
    assert msa.headers[0].startswith("1a7j_A")


def test_real_empty_a3m_and_gzip_transparency(tmp_path: Path) -> None:
    assert parse_a3m(MSAS / "ColabFold" / "empty.a3m") == []
    gz = MSAS / "Protenix" / "mmcif_msa" / "1" / "pairing.a3m.gz"
    plain = tmp_path / "pairing.a3m"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    a, b = parse_a3m(gz)[0], parse_a3m(plain)[0]
    assert a.rows == b.rows and a.headers == b.headers
    assert read_msa_text(gz) == plain.read_text()


def test_unreadable_gzip_raises_msa_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken.a3m.gz"
    bad.write_bytes(gzip.compress(b">q\nACDE\n")[:12])
    with pytest.raises(MSAError) as info:
        parse_a3m(bad)
    assert info.value.path == str(bad) and info.value.stage == "msa"


# --- queries without rows (the build's scan): the same answers as the parser ---------------------


def _parsed(raw: bytes) -> list[tuple[int, str]] | tuple[str, str]:
    """The reference: what ``_parse_a3m`` gives for the decoded bytes, or its error."""
    try:
        return [(m.block, m.query_sequence) for m in _parse_a3m(raw.decode("utf-8", errors="replace"))]
    except MSAError as exc:
        return ("MSAError", str(exc))


def _scanned(raw: bytes) -> list[tuple[int, str]] | tuple[str, str]:
    try:
        return _a3m_queries(raw)
    except MSAError as exc:
        return ("MSAError", str(exc))


#: Each layout the query scan answers itself or leaves to the parser, and each parser error.
EDGE_CASES = {
    "plain": b">q\nACDE\n>h1\nA-dfDE\n>h2\n--DE\n",
    "wrapped and blank lines": b">q d\nAC\n\nDE\n>h\nA-\nd.DE\n\n",
    "no final newline": b">q\nACDE\n>h\nACDE",
    "header only rows": b">q\n>h\n",
    "header only last row": b">q\nAC\n>h",
    "leading comments and blanks": b"#A3M#\n\n; c\n  \n>q\nACD\n>h\nAC-\n",
    "ColabFold tab headers": b"#3\t1\n>101\nMKV\n>UniRef100_X\t12\t0.5\t1e-3\nMK-\n",
    "pseudo rows first": b">ss_dssp\nCCCHHH\n>ss_pred x\nCC\n>q\nACD\n>h\nACD\n",
    "pseudo row after the query": b">q\nACD\n>Consensus\nxxxxxxxx\n>h\nA-D\n",
    "only pseudo rows": b">ss_dssp\nCCC\n>ss_pred\nCC\n",
    "indented pseudo header": b"> ss_conf\n12\n>q\nAC\n",
    "sp| header (not pseudo)": b">sp|P1|X\nAC\n>ss_dsspX\nAC\n",
    "dirty query (rerooted)": b">q\nA-cDe.F\n>h\nAKcDeGF\n",
    "query with lower case only": b">q\nacd\n>h\nacd\n",
    "nul-separated blocks": b">q1\nAC\n>h\nAC\n\x00>q2\nMKV\n>h\nMK-\n\x00\n",
    "empty": b"",
    "comments only": b"#x\n;y\n",
    "blank only": b" \n\t\n",
    "star terminators": b">q\nACD*\n>h\nAC-*\n",
    "star inside a row": b">q\nAC*D\n>h\nACDE\n",
    "CRLF": b">q\r\nACD\r\n>h\r\nA-D\r\n",
    "form feed and vertical tab": b">q\x0cACD\x0b>h\nAC\n",
    "tab inside a sequence line": b">q\nAC\tD\n>h\nAC-D\n",
    "trailing tab on a sequence line": b">q\nACD\t\n>h\nA-D\n",
    "a tab in one row, a space in another": b">q\nA\tCD\n>h\nA- D\n>h2\nAC\tD\n",
    "query header only": b">q\n",
    "query header only, insertions only below": b">q\n>h\nacd\n",
    "headers only, second block": b">q\nAC\n\x00>q2\n>h\n",
    "NUL inside a line": b">q\nAC\x00D\n>h\nACD\n",
    "NUL after a line break": b">q\nACD\n\x00\x00>q2\nMK\n",
    "dots in match columns": b">q\nACDE\n>h\nA..E\n",
    "bad character": b">q\nACDE\n>h\nA1DE\n",
    "leading blanks on a sequence line": b">q\n  ACD\n>h\n A-D \n",
    "comment inside a row": b">q\nAC\n#c\nD\n>h\nACD\n",
    "indented header": b">q\nACD\n  >h\nACD\n",
    "'>' inside a sequence line": b">q\nAC>D\n>h\nACDE\n",
    "'>' inside a header": b">q a>b\nACD\n>h\nACD\n",
    "sequence before the first header": b"ACD\n>q\nACD\n",
    "ragged first hit": b">q\nACDE\n>h\nACD\n",
    "ragged row deep down": b">q\nACDE\n" + b">h\nAC-E\n" * 500 + b">bad\nACDEF\n",
    "ragged row in the second block": b">q\nAC\n\x00>q\nAC\n>h\nA\n",
    "non-ASCII header": ">q\nACD\n>h Müller\nA-D\n".encode(),
    "Latin-1 header byte": b">q\nACD\n>h M\xfcller\nA-D\n",
    "non-ASCII residue": ">q\nACD\n>h\nAÇD\n".encode(),
    "unicode line separator in a header": ">q\nACD\n>h a\u2028ACD\n".encode(),
    "NEL in a header": ">q\nAC\n>h a\x85b\nAC\n".encode(),
    "non-breaking space before a header": "\u00a0>q\nAC\n".encode(),
}


@pytest.mark.parametrize("raw", list(EDGE_CASES.values()), ids=list(EDGE_CASES))
def test_queries_equal_the_parser(raw: bytes) -> None:
    assert _scanned(raw) == _parsed(raw)


def test_queries_equal_the_parser_on_random_alignments() -> None:
    """Seeded random a3m text (valid alignments with wrapped lines, comments, pseudo rows and NUL
    blocks, then random insertions of the bytes the layout rules hinge on)."""
    rng = random.Random(17)
    noise = [b">", b"\n", b"\n>", b"a", b"-", b".", b" ", b"\t", b"#", b";", b"*", b"\r", b"\x00",
             b"\x0b", b"\x1c", b"ss_dssp ", b"\xc3\xa9", b"\xff", b"\n  >", b"A"]  # fmt: skip

    def row(n: int) -> str:
        out = []
        for _ in range(n):
            if rng.random() < 0.2:
                out.append("".join(rng.choice("acdy.") for _ in range(rng.randint(1, 3))))
            out.append(rng.choice("ACDEFGKLMX-"))
        return "".join(out)

    def block() -> str:
        n = rng.randint(0, 6)
        lines = [rng.choice(["#A3M#", "#12\t1", ";c", ""])] if rng.random() < 0.3 else []
        for i in range(rng.randint(1, 5)):
            lines.append(">" + rng.choice(["q", "UniRef100_A\tx", "ss_pred", "Consensus", "", " h"]))
            seq = row(n)
            k = rng.randint(0, len(seq))
            lines.append(seq[:k] + rng.choice(["", "\n", "\n\n", "\n  "]) + seq[k:] if i else seq)
        return "\n".join(lines) + rng.choice(["", "\n"])

    n_errors = 0
    for _ in range(2000):
        raw = "\x00".join(block() for _ in range(rng.choice([1, 1, 2]))).encode()
        for _ in range(rng.choice([0, 0, 1, 2])):
            k = rng.randint(0, len(raw))
            raw = raw[:k] + rng.choice(noise) + raw[k:]
        expected = _parsed(raw)
        n_errors += isinstance(expected, tuple)
        assert _scanned(raw) == expected, raw
    assert 100 < n_errors < 1900  # both answers and errors were compared


@pytest.mark.parametrize("path", REAL_A3M, ids=lambda p: str(p.relative_to(MSAS)))
def test_scan_a3m_of_a_real_file_equals_parse_a3m(path: Path) -> None:
    assert scan_a3m(path.read_bytes(), path) == [(m.block, m.query_sequence) for m in parse_a3m(path)]


def test_scan_a3m_errors_name_the_file(tmp_path: Path) -> None:
    ragged = tmp_path / "ragged.a3m"
    ragged.write_bytes(b">q\nACDE\n" + b">h\nAC-E\n" * 50 + b">bad\nACE\n")
    for bad in (ragged, tmp_path / "broken.a3m.gz"):
        if bad.suffix == ".gz":
            bad.write_bytes(gzip.compress(b">q\nACDE\n")[:12])
        with pytest.raises(MSAError) as parsed:
            parse_a3m(bad)
        with pytest.raises(MSAError) as scanned:
            scan_a3m(bad.read_bytes(), bad)
        assert str(scanned.value) == str(parsed.value)
        assert (scanned.value.path, scanned.value.stage) == (str(bad), "msa")
    assert str(scanned.value).startswith(f"cannot read {tmp_path / 'broken.a3m.gz'}: ")


# --- what a broken file's error says (review R1 s32: M5, L1, L2) --------------------------------

#: a real a3m: the query, then hits of 38 match columns (OpenFold 1psm_A, BFD/Uniclust)
REAL_1PSM = MSAS / "openfold" / "1psm_A" / "bfd_uniclust_hits.a3m"


def _damaged(tmp_path: Path, edit: Callable[[list[str]], None]) -> Path:
    """A copy of :data:`REAL_1PSM` whose lines ``edit`` changed (line k of the file is ``lines[k - 1]``)."""
    lines = REAL_1PSM.read_text().splitlines()
    edit(lines)
    out = tmp_path / "bfd_uniclust_hits.a3m"
    out.write_text("\n".join(lines) + "\n")
    return out


def _error(path: Path) -> str:
    """The parser's error for ``path``, checked to be the build's scan error too."""
    with pytest.raises(MSAError) as parsed:
        parse_a3m(path)
    with pytest.raises(MSAError) as scanned:
        scan_a3m(path.read_bytes(), path)
    assert str(scanned.value) == str(parsed.value)
    return str(parsed.value)


@pytest.mark.parametrize("text", [">query\n", ">query\n>hit1\n>hit2\n", "#A3M#\n>query desc\n\n"])
def test_a_file_of_headers_without_a_sequence_is_an_error_saying_so(tmp_path: Path, text: str) -> None:
    """A truncated download that kept only the header line. Before: an alignment whose query was
    empty, which the build joined to no chain (a near miss "one sequence contains the other (0 vs
    47 residues)", exit 0)."""
    path = tmp_path / "bfd_uniclust_hits.a3m"
    path.write_text(text)
    message = _error(path)
    assert message.startswith("no sequence: the file holds ")
    assert "'>query'" in message and "no sequence line" in message


def test_a_row_with_characters_outside_the_alphabet_is_named_by_header_line_and_column(
    tmp_path: Path,
) -> None:
    # line 6 is row 2's only sequence line; its columns 11..18 become '123*.?@#' (7 characters no a3m
    # row may hold, and an insert gap): before, "row 2 has 37 match columns, the query has 38"
    def edit(lines: list[str]) -> None:
        lines[5] = lines[5][:10] + "123*.?@#" + lines[5][18:]

    path = _damaged(tmp_path, edit)
    header = REAL_1PSM.read_text().splitlines()[4][1:].split()[0]
    message = _error(path)
    assert message.startswith(f"row 2 (the query is row 0; header line 5 '>{header}') has ")
    assert "'1' at line 6, column 11 is not an a3m character" in message
    assert "7 such characters: '123*?@#'" in message


def test_a2m_dots_in_match_columns_are_named(tmp_path: Path) -> None:
    def edit(lines: list[str]) -> None:  # row 1 (line 4): five residues of match columns become '.'
        lines[3] = lines[3][:10] + "....." + lines[3][15:]

    message = _error(_damaged(tmp_path, edit))
    assert message.startswith("row 1 (the query is row 0; header line 3 ")
    assert "has 33 match columns, the query has 38: its 5 '.' are insert-state gaps (a2m)" in message
    assert "a gap in a match column is '-'" in message


def test_a_nul_inside_a_line_is_named_by_line_and_column(tmp_path: Path) -> None:
    """Before: the NUL cut the alignment in two blocks, and the error was the first block's last
    row, "row 1 has 20 match columns, the query has 38"."""
    raw = REAL_1PSM.read_bytes()
    at = raw.index(b"\n", raw.index(b"\n", raw.index(b"\n") + 1) + 1) + 21  # line 4, column 21
    path = tmp_path / "bfd_uniclust_hits.a3m"
    path.write_bytes(raw[:at] + b"\x00" * 50 + raw[at:])
    assert _error(path).startswith("a NUL byte inside line 4 (column 21): a damaged file")


def test_a_cut_last_row_says_so(tmp_path: Path) -> None:
    raw = REAL_1PSM.read_bytes()
    path = tmp_path / "bfd_uniclust_hits.a3m"
    path.write_bytes(raw[: raw.rindex(b"\n", 0, len(raw) - 1) + 20])  # the last row: 19 characters
    n_rows = raw.count(b"\n>") + 1
    message = _error(path)
    assert message.startswith(f"row {n_rows - 1} (the query is row 0; header line {2 * n_rows - 1} ")
    assert message.endswith("the last row, cut short: a truncated file?")


def test_a_tab_inside_a_sequence_line_is_dropped_as_a_space_is(tmp_path: Path) -> None:
    """Before: a space was dropped, a tab counted as a match column ("row 1 has 39 match columns")."""
    lines = REAL_1PSM.read_text().splitlines()
    spaced, tabbed = lines.copy(), lines.copy()
    for k in range(1, len(lines), 2):  # every sequence line
        spaced[k] = lines[k][:20] + " " + lines[k][20:]
        tabbed[k] = lines[k][:20] + "\t" + lines[k][20:]
    (tmp_path / "spaced.a3m").write_text("\n".join(spaced) + "\n")
    (tmp_path / "tabbed.a3m").write_text("\n".join(tabbed) + "\n")
    (plain,) = parse_a3m(REAL_1PSM)
    for name in ("spaced.a3m", "tabbed.a3m"):
        (msa,) = parse_a3m(tmp_path / name)
        assert (msa.rows, msa.headers) == (plain.rows, plain.headers)
        assert scan_a3m((tmp_path / name).read_bytes(), name) == [(0, plain.query_sequence)]


def test_a_lower_case_query_is_named(tmp_path: Path) -> None:
    """Before: "row 1 has 38 match columns, the query has 0"."""

    def edit(lines: list[str]) -> None:
        lines[1] = lines[1].lower()

    message = _error(_damaged(tmp_path, edit))
    assert message.startswith("the query (row 0, header line 1 '>query') is all lower case: ")
    assert "so it has no match column, while row 1 has 38" in message


def test_a_row_of_the_right_width_with_characters_outside_the_alphabet_is_an_error(tmp_path: Path) -> None:
    """Review R15 s40 #1: a row as wide as the query whose residues are written '~' (a GCG/MSF gap)
    or digits has the query's match columns, so only the count was checked: those positions were
    stored as unknown residues, in the profile too, with no failure and exit status 0. The
    alphabet is the a3m format's (residue letters, '-', '.'), so these are errors naming them."""

    def edit(lines: list[str]) -> None:  # row 2's only sequence line (line 6): same width, '~' and '7'
        lines[5] = "~~~~" + lines[5][4:10] + "77" + lines[5][12:]

    path = _damaged(tmp_path, edit)
    header = REAL_1PSM.read_text().splitlines()[4][1:].split()[0]
    with pytest.raises(MSAError) as err:
        parse_a3m(path)
    message = str(err.value)
    assert message.startswith(f"row 2 (the query is row 0; header line 5 '>{header}'): "), message
    assert "'~' at line 6, column 1 is not an a3m character" in message
    assert "6 such characters: '~7'" in message
    assert "match columns" not in message.split(":", 1)[1].split("(a residue")[0]  # the widths agree
    parse_a3m(REAL_1PSM)  # the file it was made from reads
