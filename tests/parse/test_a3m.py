"""a3m parser: strings for each rule, then every real a3m file against independent line counts."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from featurecache.errors import MSAError
from featurecache.parse.a3m import (
    PSEUDO_ROW_NAMES,
    _parse_a3m,
    expand,
    find_query,
    parse_a3m,
    read_msa_text,
    reroot,
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
