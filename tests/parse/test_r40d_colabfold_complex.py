"""Review R40d s51 #2: ``colabfold_batch`` / ``colabfold_search`` write a heteromer's MSA as one a3m
(``colabfold.batch.msa_to_str``): a first line ``#L1,L2\\tc1,c2`` (the unique chains' lengths and copy
numbers), the paired block (``>101\\t102`` + the queries concatenated, then rows spanning every
chain's columns), then one block per chain (``>10k`` + its query, then its unpaired hits) padded with
gaps outside that chain's columns. featurecache read the ``#`` line as a comment and the file as one
alignment whose query, the concatenation, is no chain's sequence. It is split into one alignment per
chain now. The files here are written in that layout from the real rows of 7a4d chains A and C
(alphafold3-pytorch's MSAs of the two chains, ColabFold-server rows); the counts are made from the
source rows, not by featurecache."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from featurecache.errors import MSAError
from featurecache.parse.a3m import _parse_a3m, parse_a3m, readable_queries, scan_a3m
from tests.conftest import MSAS

AF3PT = MSAS / "alphafold3-pytorch"
N_PAIRED, N_UNPAIRED = 50, 300


def records(path: Path) -> list[tuple[str, str]]:
    """(header without '>', sequence) of every record of a real a3m file, by plain line reading."""
    data = path.read_bytes()
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode()
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line.startswith(">"):
            out.append((line[1:], ""))
        elif out and line.strip() and not line.startswith("#"):
            out[-1] = (out[-1][0], out[-1][1] + line.strip())
    return out


def chain_records(chain: str) -> list[tuple[str, str]]:
    return records(AF3PT / f"7a4d-assembly1{chain}_protein.a3m.gz")


def colabfold_complex(
    chains: list[list[tuple[str, str]]],
    n_paired: int,
    n_unpaired: int,
    *,
    paired: bool = True,
    copies: str = "",
) -> str:
    """The a3m text ColabFold writes for a complex of these chains (each chain's records: its query
    first): the header line, the paired block (rows 1..n_paired of every chain side by side, the
    headers joined by a tab) unless ``paired`` is False (``--pair-mode unpaired``), then each
    chain's block (its query, then its next n_unpaired rows) padded with gaps outside its columns."""
    queries = [recs[0][1] for recs in chains]
    lines = [f"#{','.join(str(len(q)) for q in queries)}\t{copies or ','.join('1' for _ in chains)}"]
    if paired:
        lines += [">" + "\t".join(str(101 + k) for k in range(len(chains))), "".join(queries)]
        for i in range(1, n_paired + 1):
            lines += [">" + "\t".join(recs[i][0] for recs in chains), "".join(recs[i][1] for recs in chains)]
    for k, recs in enumerate(chains):
        before = "-" * sum(len(q) for q in queries[:k])
        after = "-" * sum(len(q) for q in queries[k + 1 :])
        block = [(str(101 + k), queries[k]), *recs[n_paired + 1 : n_paired + 1 + n_unpaired]]
        for header, seq in block:
            lines += [f">{header}", before + seq + after]
    return "\n".join(lines) + "\n"


def rows_with_residues(seqs: list[str]) -> int:
    """How many of these row texts hold an upper case letter (a residue in a match column)."""
    return sum(1 for s in seqs if re.search("[A-Z]", s))


@pytest.fixture(scope="module")
def chains() -> list[list[tuple[str, str]]]:
    return [chain_records("A"), chain_records("C")]


def test_a_colabfold_complex_file_gives_one_alignment_per_chain(
    tmp_path: Path, chains: list[list[tuple[str, str]]]
) -> None:
    path = tmp_path / "7a4d_AC.a3m"
    path.write_text(colabfold_complex(chains, N_PAIRED, N_UNPAIRED))
    msas = parse_a3m(path)
    assert [m.block for m in msas] == [0, 1]
    for msa, recs in zip(msas, chains, strict=True):
        query = recs[0][1]
        assert msa.query_sequence == query  # the chain's own sequence, not the concatenation
        paired = [query] + [s for _, s in recs[1 : N_PAIRED + 1]]
        unpaired = [query] + [s for _, s in recs[N_PAIRED + 1 : N_PAIRED + 1 + N_UNPAIRED]]
        assert (
            msa.depth
            == rows_with_residues(paired) + rows_with_residues(unpaired)
            == 2 + N_PAIRED + N_UNPAIRED
        )
        # the chain's own rows, in file order (7a4d's rows have no insertion before their first
        # column or after their last, so each slice is the source row itself)
        assert list(msa.rows) == paired + unpaired
        assert msa.path == str(path)
    # a paired row's header is cut into each chain's own header
    assert msas[0].headers[:3] == ("101", chains[0][1][0], chains[0][2][0])
    assert msas[1].headers[:3] == ("102", chains[1][1][0], chains[1][2][0])
    assert msas[1].headers[N_PAIRED + 1] == "102"
    # the build's scan gives the same alignments without building rows
    assert scan_a3m(path.read_bytes(), path) == [(m.block, m.query_sequence) for m in msas]


def test_unpaired_only_complex_file_is_split_too(tmp_path: Path, chains: list[list[tuple[str, str]]]) -> None:
    """``--pair-mode unpaired``: no paired block, so row 0 is chain A's query padded with gaps."""
    path = tmp_path / "7a4d_AC.a3m"
    path.write_text(colabfold_complex(chains, 0, N_UNPAIRED, paired=False))
    msas = parse_a3m(path)
    assert [m.query_sequence for m in msas] == [recs[0][1] for recs in chains]
    assert [m.depth for m in msas] == [1 + N_UNPAIRED, 1 + N_UNPAIRED]
    assert msas[1].rows[1:] == tuple(s for _, s in chains[1][1 : 1 + N_UNPAIRED])
    assert scan_a3m(path.read_bytes(), path) == [(m.block, m.query_sequence) for m in msas]


def test_a_chain_with_copies_keeps_its_columns(tmp_path: Path, chains: list[list[tuple[str, str]]]) -> None:
    """``#118,113\\t2,1`` (A2C): ColabFold writes each unique chain once; the copy numbers do not
    change the columns."""
    path = tmp_path / "a2c.a3m"
    path.write_text(colabfold_complex(chains, 5, 7, copies="2,1"))
    assert [(m.query_sequence, m.depth) for m in parse_a3m(path)] == [
        (recs[0][1], 1 + 5 + 1 + 7) for recs in chains
    ]


def test_insertions_go_with_the_column_they_follow() -> None:
    """Lower case letters between two chains' columns follow the first chain's last column, where
    a row whose slice holds no residue (h4's "---y") is no row of that chain."""
    text = "#3,2\t1,1\n>101\t102\nACDEF\n>h1\th2\nAcC-kkEF\n>h3\nAC-m--\n>102\n---EF\n>h4\n---yE-\n"
    a, c = _parse_a3m(text)
    assert a.rows == ("ACD", "AcC-kk", "AC-m") and a.headers == ("101", "h1", "h3")
    assert c.rows == ("EF", "EF", "EF", "E-") and c.headers == ("102", "h2", "102", "h4")


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("#118,11x\t1,1", "'11x' is not a chain length"),
        ("#118,0\t1,1", "'0' is not a chain length"),
        ("#118,113\t1", "2 chain lengths but 1 copy number"),
        ("#118,113\t1,one", "'one' is not a copy number"),
        (
            "#118,112\t1,1",
            "chains of 118+112 = 230 residues, but the query (row 0, header line 2 '>101') and every row have 231",
        ),
    ],
)
def test_a_malformed_complex_header_is_an_msa_error_naming_the_file(
    tmp_path: Path, chains: list[list[tuple[str, str]]], header: str, reason: str
) -> None:
    text = colabfold_complex(chains, 3, 3)
    path = tmp_path / "bad.a3m"
    path.write_text(header + text[text.index("\n") :])
    for read in (lambda: parse_a3m(path), lambda: scan_a3m(path.read_bytes(), path)):
        with pytest.raises(MSAError) as info:
            read()
        assert info.value.path == str(path)
        assert "ColabFold's header of a complex's MSA" in str(info.value) and reason in str(info.value)
        assert f"line 1, {header!r}" in str(info.value)


@pytest.mark.parametrize("copies", ["2", "1"])
def test_a_single_length_header_reads_as_before(tmp_path: Path, copies: str) -> None:
    """A homo-oligomer's (``#237\\t2``: its copies of the query, then its rows) or a monomer's
    (``#237\\t1``) file: the ``#`` line is a comment, the file one alignment, as without it."""
    recs = records(MSAS / "openfold" / "3u8v_A" / "bfd_uniclust_hits.a3m")
    query = recs[0][1]
    body = "".join(f">{101 + k}\n{query}\n" for k in range(int(copies) if copies != "1" else 0))
    body += ">101\n" + query + "\n" + "".join(f">{h}\n{s}\n" for h, s in recs[1:])
    path = tmp_path / "3u8v.a3m"
    path.write_text(f"#{len(query)}\t{copies}\n" + body)
    (msa,) = parse_a3m(path)
    (plain,) = _parse_a3m(body)
    assert (msa.headers, msa.rows, msa.block) == (plain.headers, plain.rows, 0)
    assert msa.depth == len(recs) + (int(copies) if copies != "1" else 0)
    assert scan_a3m(path.read_bytes(), path) == [(0, query)]


def test_a_complex_file_that_does_not_parse_names_each_chain(
    tmp_path: Path, chains: list[list[tuple[str, str]]]
) -> None:
    """A row cut short: the failure still names the chains it was meant for (their queries)."""
    text = colabfold_complex(chains, 3, 3).rstrip("\n")
    path = tmp_path / "cut.a3m"
    path.write_text(text[:-10] + "\n")
    with pytest.raises(MSAError):
        parse_a3m(path)
    assert readable_queries(path.read_bytes(), path) == [recs[0][1] for recs in chains]
