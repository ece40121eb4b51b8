"""a3m expansion's insert-column rule (review R27a s45, M6), worked by hand from ``expand``'s
docstring: insertions between two match columns are LEFT-justified in as many insert columns as the
longest insertion there, shorter ones padded with ``.`` (HH-suite reformat's convention)."""

from __future__ import annotations

from featurecache.parse.a3m import ParsedMSA, expand, reroot

# matches A, C in every row; between them insertions "", "ab", "d" -> 2 insert columns
ROWS = ("AC", "AabC", "AdC")


def test_expand_left_justifies_insertions() -> None:
    assert expand(ROWS) == ["A..C", "AabC", "Ad.C"]
    # insertions before the first match column ("", "x", "", "wv": 2 columns) and after the last
    # ("", "", "yz", "z": 2 columns), none between A and C
    assert expand(("AC", "xAC", "ACyz", "wvACz")) == ["..AC..", "x.AC..", "..ACyz", "wvACz."]


def test_reroot_on_a_row_with_insertions_keeps_the_left_justified_columns() -> None:
    # row 1's residues A, a, b, C become the columns; row 0 has gaps in both new columns, row 2's
    # d sits in the first of them (left-justified), a gap in the second
    moved = reroot(ParsedMSA(("q", "h1", "h2"), ROWS, "a3m"), 1)
    assert moved.rows == ("AABC", "A--C", "AD-C")
    assert moved.headers == ("h1", "q", "h2")
