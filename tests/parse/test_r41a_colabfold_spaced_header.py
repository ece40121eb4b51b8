"""Review R41a s51 #3: a ColabFold complex header whose tab became blanks (``#118,113 1,1``: an editor,
a copy-paste) read as a comment, so the file was one alignment of the concatenated query, which joins
no chain (the reading before 797bbe3). Lengths and copy numbers with a run of blanks between them are
the same information: the file splits as with the tab, and such a header that does not read is an
MSAError naming the file and the line. Files in ColabFold's layout from the real rows of 7a4d chains
A and C (``tests/parse/test_r40d_colabfold_complex.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache.errors import MSAError
from featurecache.parse.a3m import _parse_a3m, parse_a3m, readable_queries, scan_a3m
from tests.conftest import MSAS
from tests.parse.test_r40d_colabfold_complex import chain_records, colabfold_complex, records


@pytest.fixture(scope="module")
def chains() -> list[list[tuple[str, str]]]:
    return [chain_records("A"), chain_records("C")]


def _with_header(text: str, header: str) -> str:
    """ColabFold's complex ``text`` with its first line replaced by ``header``."""
    return header + text[text.index("\n") :]


@pytest.mark.parametrize("blanks", [" ", "   ", " \t ", "\t\t"])
def test_a_complex_header_with_blanks_for_its_tab_splits_as_with_the_tab(
    tmp_path: Path, chains: list[list[tuple[str, str]]], blanks: str
) -> None:
    text = colabfold_complex(chains, 20, 30)
    lengths = ",".join(str(len(recs[0][1])) for recs in chains)
    assert text.startswith(f"#{lengths}\t1,1\n")  # the premise: ColabFold's tab
    tabbed = tmp_path / "tab.a3m"
    tabbed.write_text(text)
    spaced = tmp_path / "spaced.a3m"
    spaced.write_text(_with_header(text, f"#{lengths}{blanks}1,1"))
    want = parse_a3m(tabbed)
    assert [m.query_sequence for m in want] == [recs[0][1] for recs in chains]
    got = parse_a3m(spaced)
    assert [(m.block, m.headers, m.rows) for m in got] == [(m.block, m.headers, m.rows) for m in want]
    assert [m.depth for m in got] == [1 + 20 + 1 + 30] * 2
    assert scan_a3m(spaced.read_bytes(), spaced) == [(m.block, m.query_sequence) for m in want]


def test_blanks_around_the_commas_read_too(chains: list[list[tuple[str, str]]]) -> None:
    text = colabfold_complex(chains, 3, 4)
    a, c = (len(recs[0][1]) for recs in chains)
    msas = _parse_a3m(_with_header(text, f"# {a}, {c}  1, 1 "))
    assert [m.query_sequence for m in msas] == [recs[0][1] for recs in chains]


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("#118,113 1", "2 chain lengths but 1 copy number"),
        ("#118,113 1,1,1", "2 chain lengths but 3 copy numbers"),
        ("#118,0 1,1", "'0' is not a chain length"),
        (
            "#118,112 1,1",
            "chains of 118+112 = 230 residues, but the query (row 0, header line 3 '>101') and every row have 231",
        ),
    ],
)
def test_a_spaced_complex_header_that_does_not_read_is_an_msa_error_naming_file_and_line(
    tmp_path: Path, chains: list[list[tuple[str, str]]], header: str, reason: str
) -> None:
    path = tmp_path / "bad.a3m"
    path.write_text("\n" + _with_header(colabfold_complex(chains, 3, 3), header))  # on line 2
    for read in (lambda: parse_a3m(path), lambda: scan_a3m(path.read_bytes(), path)):
        with pytest.raises(MSAError) as info:
            read()
        assert info.value.path == str(path)
        assert "ColabFold's header of a complex's MSA" in str(info.value) and reason in str(info.value)
        assert f"line 2, {header!r}" in str(info.value)


@pytest.mark.parametrize("comment", ["#118 1", "# made by hand, 2 chains", "#118,113", "#1,2 three"])
def test_other_comments_with_blanks_stay_comments(tmp_path: Path, comment: str) -> None:
    """A single length (a monomer's ``#118 1``), words, or lengths alone: a comment, the file one
    alignment as without it (what it was before)."""
    recs = records(MSAS / "openfold" / "3u8v_A" / "bfd_uniclust_hits.a3m")
    body = "".join(f">{h}\n{s}\n" for h, s in recs)
    path = tmp_path / "3u8v.a3m"
    path.write_text(comment + "\n" + body)
    (msa,) = parse_a3m(path)
    (plain,) = _parse_a3m(body)
    assert (msa.headers, msa.rows, msa.block) == (plain.headers, plain.rows, 0)
    assert scan_a3m(path.read_bytes(), path) == [(0, recs[0][1])]


def test_a_spaced_complex_file_that_does_not_parse_names_each_chain(
    tmp_path: Path, chains: list[list[tuple[str, str]]]
) -> None:
    text = colabfold_complex(chains, 3, 3).rstrip("\n")
    lengths = ",".join(str(len(recs[0][1])) for recs in chains)
    path = tmp_path / "cut.a3m"
    path.write_text(_with_header(text[:-10], f"#{lengths} 1,1") + "\n")
    with pytest.raises(MSAError):
        parse_a3m(path)
    assert readable_queries(path.read_bytes(), path) == [recs[0][1] for recs in chains]
