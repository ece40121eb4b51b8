"""Template-hit files (hhr, m8) and format sniffing, on strings and the real hhr files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from featurecache.errors import MSAError
from featurecache.parse.hits import _parse_m8, parse_hhr, sniff_file, sniff_msa_format

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"
MSAS = REAL / "msas"

M8 = (
    "101\t1abc_A\t0.85\t120\t18\t0\t1\t120\t5\t124\t1.2e-40\t250.0\n"
    "101\t2xyz_B\t42.0\t80\t40\t2\t10\t89\t1\t80\t3e-5\t48.5\n"
)


def test_sniff_by_content() -> None:
    assert sniff_msa_format("# STOCKHOLM 1.0\nq AC\n") == "sto"
    assert sniff_msa_format("#A3M#\n>q\nAC\n") == "a3m"
    assert sniff_msa_format(">101\nMKV\n", "x.txt") == "a3m"
    assert sniff_msa_format("Query  q\nMatch_columns 3\n") == "hhr"
    assert sniff_msa_format(M8) == "m8"
    assert sniff_msa_format("") == "empty"
    assert sniff_msa_format("\x00\n") == "empty"
    assert sniff_msa_format("hello world", "notes.txt") == "unknown"


def test_m8_hits() -> None:
    hits = _parse_m8(M8)
    assert [h.name for h in hits] == ["1abc_A", "2xyz_B"]
    assert hits[0].identity == pytest.approx(0.85) and hits[1].identity == pytest.approx(0.42)
    assert (hits[1].query_start, hits[1].query_end, hits[1].template_start) == (10, 89, 1)
    with pytest.raises(MSAError):
        _parse_m8("not\ta\thit\n")


REAL_HHR = sorted(MSAS.rglob("*.hhr"))


def test_corpus_has_hhr_files() -> None:
    assert len(REAL_HHR) == 4  # README: 4 hhr files


@pytest.mark.parametrize("path", REAL_HHR, ids=lambda p: str(p.relative_to(MSAS)))
def test_real_hhr_hit_table(path: Path) -> None:
    assert sniff_file(path) == "hhr"
    text = path.read_text()
    # independent count: the summary table lines between " No Hit" and the first blank line
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" No Hit")) + 1
    table = []
    for line in lines[start:]:
        if not line.strip():
            break
        table.append(line)
    hits = parse_hhr(path)
    assert len(hits) == len(table)
    for hit, line in zip(hits, table, strict=True):
        assert line.split()[1] == hit.name
        qrange = re.findall(r"(\d+)-(\d+)", line)[-2]
        assert (hit.query_start, hit.query_end) == tuple(int(x) for x in qrange)


def test_real_files_sniffed_as_their_kind() -> None:
    kinds = {}
    for p in sorted(MSAS.rglob("*")):
        if p.is_file():
            kinds[p.name] = sniff_file(p)
    assert kinds["empty.a3m"] == "empty"
    assert kinds["2uvo_hhblits_emptytable.hhr"] == "hhr"
    for name, kind in kinds.items():
        stem = name.removesuffix(".gz")
        if stem.endswith(".sto"):
            assert kind == "sto", name
        elif stem.endswith(".a3m") and name != "empty.a3m":
            assert kind == "a3m", name
