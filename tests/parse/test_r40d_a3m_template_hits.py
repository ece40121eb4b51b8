"""Which a3m files are template hits, never MSAs (review R40d s51 #1): ``parse.hits.a3m_template_hits``.

Template hits: Protenix's ``hmmsearch.a3m`` (AlphaFold 3's conversion of hmmsearch against PDB
seqres), known by the name or by every row after the first being a PDB seqres chain. Every real MSA
of the shared data (OpenFold, Protenix, ColabFold with NUL-separated blocks, alphafold3-pytorch,
Boltz, OpenFold3, HH-suite; some with a query named like a PDB chain, ``1k1a_1``, ``6KWC_1``) stays
an MSA."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from featurecache.parse.hits import a3m_template_hits, template_hit_header, template_hit_name
from tests.build.test_r40d_template_hits_a3m import af3_hits_a3m
from tests.conftest import MSAS

REAL_MSAS = sorted(
    p for p in MSAS.rglob("*") if p.is_file() and ".a3m" in p.name and p.stat().st_size
)  # fmt: skip
HMM_OUTPUTS = sorted(MSAS.glob("openfold/*/hmm_output.sto"))


def _text(p: Path) -> bytes:
    data = p.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def test_the_real_files_are_there() -> None:
    assert len(REAL_MSAS) >= 30 and len(HMM_OUTPUTS) >= 8
    # some real MSAs name their query like a PDB chain: only the rows after it decide
    assert any(_text(p).lstrip(b"\x00").startswith((b">1k1a_1", b">6KWC_1")) for p in REAL_MSAS)


@pytest.mark.parametrize("path", REAL_MSAS, ids=lambda p: str(p.relative_to(MSAS)))
def test_a_real_msa_is_no_template_hits(path: Path) -> None:
    assert a3m_template_hits(_text(path), path.name) is None


@pytest.mark.parametrize("sto", HMM_OUTPUTS, ids=lambda p: p.parent.name)
def test_hmmsearch_hits_as_a3m_are_template_hits_by_their_rows(sto: Path) -> None:
    a3m = af3_hits_a3m(sto)
    n = a3m.count(">")
    # the hits alone (the first is the best hit), under any name
    assert a3m_template_hits(a3m.encode(), "x/templates.a3m") == n
    # after the query, as Protenix's parser expects (it skips the first row)
    with_query = f">query\nACDEFGHIK\n{a3m}".encode()
    assert a3m_template_hits(with_query, "hmmsearch.a3m") == n
    assert a3m_template_hits(gzip.decompress(gzip.compress(with_query)), "hits.a3m.gz") == n


def test_one_row_that_is_no_pdb_chain_makes_an_msa() -> None:
    a3m = af3_hits_a3m(HMM_OUTPUTS[0])
    uniref = (
        ">UniRef100_A0A2N5ZEL4 Uncharacterized protein n=1 Tax=Foo TaxID=1 RepID=A0A2N5ZEL4_9BACT\nACDE\n"
    )
    assert a3m_template_hits((a3m + uniref).encode(), "x.a3m") is None
    # the name alone decides for Protenix's file (no MSA search of these tools writes that name)
    assert a3m_template_hits((a3m + uniref).encode(), "hmmsearch.a3m") == a3m.count(">") + 1


def test_a_query_alone() -> None:
    # named as a template search: a search without a hit; else a query-only MSA (named like a chain too)
    assert a3m_template_hits(b">query\nACDE\n", "0/hmmsearch.a3m") == 0
    assert a3m_template_hits(b">1abc_A\nACDE\n", "1abc_A.a3m") is None
    assert a3m_template_hits(b"", "hmmsearch.a3m") == 0


def test_hh_suite_pseudo_rows_count_as_neither() -> None:
    a3m = b">ss_pred\nCCHHHH\n>query\nACDEFG\n>1abc_A/1-6 mol:protein length:60\nACDEFG\n>ss_conf\n999999\n"
    assert a3m_template_hits(a3m, "x.a3m") == 1


@pytest.mark.parametrize(
    ("name", "hits"),
    [
        ("hmmsearch.a3m", True),  # Protenix
        ("mmcif_msa_template/0/hmmsearch.a3m.gz", True),
        ("HMMSEARCH.A3M", True),
        ("5s8i_A_hmmsearch.a3m", True),  # Protenix's run_templates_search.py example
        ("template_0_hmmsearch.a3m", True),
        ("hmmsearch_output.a3m", True),
        ("hmm_output.a3m", True),  # OpenFold's hmm_output.sto, converted
        ("pdb_hits.a3m", True),  # AlphaFold 2's template search name (pdb_hits.hhr / .sto)
        ("pdb70_hits.a3m", True),
        ("bfd_uniclust_hits.a3m", False),
        ("uniref90_hits.a3m", False),
        ("mgnify_hits.a3m", False),
        ("small_bfd_hits.a3m", False),
        ("uniprot_hits.a3m", False),
        ("non_pairing.a3m", False),
        ("pairing.a3m", False),
        ("hmmsearch.sto", False),  # Stockholm: parse.sto decides by its content
        ("hmmsearch.fasta", False),
        ("hmmsearch/1psm_A.a3m", False),  # a folder's name is not the file's
        ("7pdb_hits_A.a3m", False),
    ],
)
def test_template_hit_names(name: str, hits: bool) -> None:
    assert template_hit_name(name) is hits


@pytest.mark.parametrize(
    ("header", "hit"),
    [
        ("1psm_A/1-38 [subseq from] mol:protein length:38  SPAM-H1", True),
        ("101m_A mol:protein length:154  MYOGLOBIN", True),
        ("7a4d_AAA/3-40", True),
        ("mytemplate_A/1-100 mol:protein length:100", True),  # a custom template, as Protenix reads them
        ("query", False),
        ("101", False),  # ColabFold
        ("UniRef100_A0A2N5ZEL4\t188\t0.843", False),
        ("tr|A0A1B2C3D4|A0A1B2C3D4_HUMAN Foo OS=Homo sapiens OX=9606", False),
        ("MGYP000123456789", False),
        ("", False),
    ],
)
def test_template_hit_headers(header: str, hit: bool) -> None:
    assert template_hit_header(header) is hit
