"""A layout-named MSA whose query has the chain's length joins only when every difference is the
chain type's unknown residue: ``X`` in a protein, ``N`` in RNA / DNA (AF3's ``residue_names``:
``PROTEIN_TYPES_ONE_LETTER_WITH_UNKNOWN`` ends in ``X``, ``UNK_NUCLEIC_ONE_LETTER`` is ``N``).

0345ea8 made the join of a query that *leaves out* unknown residues follow the chain's type; the
same-length check (``featurize.msa.compatible_query``) still took ``X`` and ``N`` as unknown in any
chain, so a protein query with an Asn where the chain has Asp joined silently, and an RNA query with
``X`` joined too. Expected outcomes are worked out by hand from the strings.
"""

from __future__ import annotations

import pytest

from featurecache.build.msa_stage import _adopt, _joins_by_layout
from featurecache.const import MolType
from featurecache.errors import MSAError
from featurecache.types import ParsedMSA

P, R, D = MolType.PROTEIN, MolType.RNA, MolType.DNA


def test_an_asn_is_a_residue_in_a_protein_query() -> None:
    assert not _joins_by_layout("MANKLV", "MADKLV", P)  # N (Asn) vs D: another sequence (before: joined)
    assert not _joins_by_layout("MADKLV", "MANKLV", P)  # and the other way round
    assert _joins_by_layout("MAXKLV", "MADKLV", P)  # X where the structure has the parent residue
    assert _joins_by_layout("MADKLV", "MAXKLV", P)  # X in the chain sequence (a residue we do not know)
    assert _joins_by_layout("MANKLV", "MANKLV", P)  # identical


def test_the_nucleic_unknown_is_n_not_x() -> None:
    assert _joins_by_layout("ACNU", "ACGU", R)
    assert _joins_by_layout("ACNT", "ACGT", D)
    assert not _joins_by_layout("ACXU", "ACGU", R)  # X is no nucleotide letter (before: joined)


def test_adopting_a_query_that_differs_at_an_asn_is_refused() -> None:
    msa = ParsedMSA(("q", "h"), ("MANKLV", "MSNRLI"), "a3m")
    with pytest.raises(MSAError, match="not compatible"):
        _adopt(msa, "MADKLV", P)
    # an X in the query is the chain's residue: the query row becomes the chain sequence
    out = _adopt(ParsedMSA(("q", "h"), ("MAXKLV", "MSNRLI"), "a3m"), "MADKLV", P)
    assert out.rows == ("MADKLV", "MSNRLI")
