"""Stockholm parser: rules on strings, then every real .sto against Biopython's own reader."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import pytest
from Bio import AlignIO

from featurecache.errors import MSAError
from featurecache.parse.sto import _parse_sto, parse_sto, readable_alignments

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"
MSAS = REAL / "msas"

MULTI_BLOCK = """# STOCKHOLM 1.0
#=GF ID test
#=GS hit1/1-6 DE [subseq from] protein OS=Homo sapiens OX=9606
#=GS hit2/3-7 DE something TaxID=10090

query      ACD-E
hit1/1-6   ACDkE
#=GR hit1/1-6 PP 99999
hit2/3-7   -CD-E
#=GC RF    xxx.x

query      FGH
hit1/1-6   FG-
hit2/3-7   F.H
#=GC RF    xxx
//
"""


def _bio(path: Path) -> list[tuple[str, str]]:
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    aln = AlignIO.read(io.StringIO(text), "stockholm")
    return [(rec.id, str(rec.seq)) for rec in aln]


def test_multi_block_rows_and_annotations() -> None:
    (aln,) = _parse_sto(MULTI_BLOCK)
    assert aln.names == ("query", "hit1/1-6", "hit2/3-7")
    assert aln.aligned == ("ACD-EFGH", "ACDkEFG-", "-CD-EF.H")
    assert aln.descriptions["hit1/1-6"].endswith("OX=9606")
    assert aln.column_annotations["RF"] == "xxx.xxxx"
    assert aln.file_annotations["ID"] == "test"
    assert not aln.is_template_hits
    msa = aln.to_msa(0)
    assert msa.rows == ("ACDEFGH", "ACDkEFG-", "-CDEF-H")  # insert column → lower case, gaps dropped
    assert msa.headers[1].startswith("hit1/1-6 [subseq from]")
    assert msa.fmt == "sto"


def test_query_found_by_sequence_not_position() -> None:
    text = "# STOCKHOLM 1.0\nhitA   --KLMN\nquery  ACKLMN\nhitB   AC-LM-\n//\n"
    (aln,) = _parse_sto(text)
    msa = aln.msa_for("ACKLMN")
    assert msa is not None
    assert msa.headers[0] == "query" and msa.rows[0] == "ACKLMN"
    assert msa.rows[1:] == ("--KLMN", "AC-LM-")
    assert aln.msa_for("KLMNAC") is None


def test_hmmsearch_output_is_template_hits_even_if_a_hit_is_the_query() -> None:
    text = (
        "# STOCKHOLM 1.0\n#=GF ID query\n#=GF AU hmmsearch (HMMER 3.3.2)\n\n"
        "1abc_A/1-6   ACKLMN\n#=GR 1abc_A/1-6 PP 999999\n2xyz_B/4-8   -CKLM-\n//\n"
    )
    (aln,) = _parse_sto(text)
    assert aln.program.startswith("hmmsearch")
    assert aln.is_template_hits
    assert aln.msa_for("ACKLMN") is None
    # rows named like PDB seqres chains are template hits even without the AU line
    (bare,) = _parse_sto("# STOCKHOLM 1.0\n1abc_A/1-6 ACKLMN\n2xyz_B -CKLM-\n//\n")
    assert bare.is_template_hits


def test_several_alignments() -> None:
    text = "# STOCKHOLM 1.0\nq AC\nh A-\n//\n# STOCKHOLM 1.0\nq2 GG\n//\n"
    alns = _parse_sto(text)
    assert [a.names for a in alns] == [("q", "h"), ("q2",)]
    assert [a.block for a in alns] == [0, 1]
    assert _parse_sto("") == []


def test_a_last_alignment_no_terminator_closes_is_a_file_cut_short(tmp_path: Path) -> None:
    """Review R25a s43 #5: jackhmmer output cut at a row's end (no '//') was read as a whole MSA
    of the rows before the cut (2q2k's mgnify_hits.sto cut to its query and 2 rows: MSA depth 3,
    no warning); only a cut that also left a row short was refused. It is refused now, naming the
    file and the rows read; what reads of it still names the chains it was meant for."""
    lines = (MSAS / "openfold" / "2q2k_A" / "mgnify_hits.sto").read_text().splitlines(keepends=True)
    rows = [k for k, line in enumerate(lines) if line.strip() and not line.startswith(("#", "//"))]
    cut = tmp_path / "mgnify_hits.sto"
    cut.write_text("".join(lines[: rows[2] + 1]))
    with pytest.raises(MSAError) as info:
        parse_sto(cut)
    assert str(info.value) == (
        f"mgnify_hits.sto: no '//' closes the alignment: the file ends at line {rows[2] + 1} after 3 sequence "
        "rows; a file cut short?"
    )
    assert (info.value.path, info.value.stage) == (str(cut), "msa")
    (aln,) = readable_alignments(cut.read_bytes(), cut)
    assert len(aln.names) == 3
    two = "# STOCKHOLM 1.0\nq AC\nh A-\n//\n# STOCKHOLM 1.0\nq2 GG\n"
    with pytest.raises(MSAError, match=r"^no '//' closes the alignment \(alignment 2 of the file\): the file ends at "
                       r"line 6 after 1 sequence row; a file cut short\?$"):  # fmt: skip
        _parse_sto(two)


def test_ragged_rows_raise() -> None:
    with pytest.raises(MSAError, match="columns"):
        _parse_sto("# STOCKHOLM 1.0\nq ACDE\nh ACD\n//\n")
    with pytest.raises(MSAError, match="expected"):
        _parse_sto("# STOCKHOLM 1.0\nq AC DE\n//\n")


def test_characters_outside_the_alphabet_raise_naming_their_line() -> None:
    """Review R15 s40 #1: a sequence as wide as the others holding '~' (a GCG/MSF gap) or a digit
    was stored with those positions as unknown residues, profile included, and no failure."""
    two_blocks = "# STOCKHOLM 1.0\nq  AC\nh1 AC\n\nq  DEFG\nh1 D-F3\n//\n"
    with pytest.raises(MSAError) as err:
        _parse_sto(two_blocks)
    assert str(err.value).startswith("line 6: sequence 'h1' holds '3' at column 4 of its aligned piece")
    with pytest.raises(MSAError, match=r"line 3: sequence 'h1' holds '\*'.*2 such characters in it: '\*'"):
        _parse_sto("# STOCKHOLM 1.0\nq  ACDE\nh1 A*D*\n//\n")
    assert _parse_sto("# STOCKHOLM 1.0\nq  ACDE\nh1 A-.e\n//\n")[0].aligned == ("ACDE", "A-.e")


def test_easel_gap_characters_are_gaps() -> None:
    """Review R19 s41 #3: Easel, the library HMMER and Infernal read and write Stockholm with, takes
    '_' as a gap and '~' as missing data (Infernal writes it where a truncated hit has no residues);
    R15's alphabet check refused the whole file for them. They are gaps: the row is the one written
    with '-' in their place."""
    got = _parse_sto("# STOCKHOLM 1.0\nq  ACDEFG\nh1 ~~DE_G\nh2 AC_.fG\n//\n")[0].aligned
    assert got == ("ACDEFG", "--DE-G", "AC-.fG")


REAL_STO = sorted(p for p in MSAS.rglob("*") if p.is_file() and ".sto" in p.name)


def test_corpus_has_sto_files() -> None:
    assert len(REAL_STO) == 34  # README: 34 Stockholm files


@pytest.mark.parametrize("path", REAL_STO, ids=lambda p: str(p.relative_to(MSAS)))
def test_real_sto_matches_biopython(path: Path) -> None:
    ref = _bio(path)
    (aln,) = parse_sto(path)
    assert list(aln.names) == [name for name, _ in ref]
    assert [s.replace(".", "-") for s in aln.aligned] == [s for _, s in ref]
    hmm = path.name.startswith("hmm_output")
    assert aln.is_template_hits == hmm
    if hmm:
        return
    # The query is the first row of jackhmmer output; columns are its residues.
    msa = aln.to_msa(0)
    query = ref[0][1]
    keep = [i for i, c in enumerate(query) if c != "-"]
    keep_set = set(keep)
    assert msa.query_sequence == query.replace("-", "").upper()
    for (_, seq), row in zip(ref, msa.rows, strict=True):
        matches = "".join(seq[i] for i in keep).upper()
        assert re.sub("[a-z]", "", row) == matches
        inserted = sum(1 for i, c in enumerate(seq) if c != "-" and i not in keep_set)
        assert sum(1 for c in row if c.islower()) == inserted


def test_real_template_hit_files_are_never_the_chain_msa() -> None:
    """hmm_output.sto starts with a PDB hit; for 1psm that hit *is* the query sequence."""
    for hmm in sorted(MSAS.glob("openfold/*/hmm_output.sto")):
        (aln,) = parse_sto(hmm)
        ref = _bio(hmm)
        assert ref[0][0] != "query"  # the first row is a hit
        query_files = [p for p in hmm.parent.iterdir() if p.name.startswith(("uniref90", "uniprot"))]
        query = _bio(query_files[0])[0][1].replace("-", "")
        assert aln.msa_for(query) is None
    (psm,) = parse_sto(MSAS / "openfold" / "1psm_A" / "hmm_output.sto")
    first_hit = psm.aligned[0].replace(".", "").replace("-", "")
    assert first_hit == _bio(MSAS / "openfold" / "1psm_A" / "uniref90_hits.sto")[0][1].replace("-", "")
