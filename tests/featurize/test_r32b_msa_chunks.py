"""The MSA encoder's chunks are sized by cells, not rows (review R32b s47 #2): 4,096 rows whatever
the query's length made ``encode_rows`` ~750 MB of temporaries for a 5,312-column MSA. A long
query made from a real alignment (721p chain A's UniRef hits, 166 columns: the query 30 times,
4,980 columns; row i = hits i … i+29 joined, insertions kept) must encode to the same bytes in
any chunking, and ``build_msa``'s traced peak must stay near one chunk of ~2**21 cells."""

from __future__ import annotations

import tracemalloc
from dataclasses import fields

import numpy as np
import pytest

from featurecache.const import MolType
from featurecache.featurize.msa import ENCODE_CHUNK_ROWS, build_msa, encode_chunk_rows
from featurecache.parse.a3m import parse_a3m
from featurecache.types import EncodedMSA, ParsedMSA
from tests.conftest import MSAS

COPIES = 30  # 166 × 30 = 4,980 columns
DEPTH = 1200  # 6.0 M cells: one 4,096-row chunk before the fix


@pytest.fixture(scope="module")
def long_msa() -> ParsedMSA:
    path = MSAS / "alphafold3-pytorch" / "721p-assembly1A_protein.a3m.gz"
    src = parse_a3m(path)[0]
    hits = src.rows[1:]
    rows = [src.rows[0] * COPIES]
    headers = [f"{src.headers[0]} x{COPIES}"]
    for i in range(DEPTH - 1):
        rows.append("".join(hits[(i + k) % len(hits)] for k in range(COPIES)))
        headers.append(f"{src.headers[1 + i]} long")
    return ParsedMSA(tuple(headers), tuple(rows), "a3m", path=str(path))


def _build(msa: ParsedMSA, chunk_cells: int | None = None) -> EncodedMSA:
    return build_msa(
        msa.query_sequence, MolType.PROTEIN, [("uniref90_hits.a3m", msa)], chunk_cells=chunk_cells
    )


def test_chunk_rows_follow_the_query_length() -> None:
    assert encode_chunk_rows(166) == ENCODE_CHUNK_ROWS == 4096  # short queries: as before
    assert encode_chunk_rows(512) == 4096
    assert encode_chunk_rows(5312) == 2**21 // 5312 == 394
    assert encode_chunk_rows(5312, chunk_cells=5312 * 7) == 7
    assert encode_chunk_rows(10**7) == 1


def test_long_msa_encodes_to_the_same_bytes_in_any_chunking(long_msa: ParsedMSA) -> None:
    length = len(long_msa.query_sequence)
    assert length == 166 * COPIES
    default = _build(long_msa)
    assert default.residues.shape == (DEPTH, length) and int(default.deletions.sum()) > 0
    for cells in (7 * length, 1000 * length, DEPTH * length):  # 7 rows, 1,000, all rows in one chunk
        other = _build(long_msa, chunk_cells=cells)
        for f in fields(EncodedMSA):
            a, b = getattr(default, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray):
                assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (
                    cells,
                    f.name,
                )
            else:
                assert a == b, (cells, f.name)


def test_build_msa_peak_stays_near_one_chunk(long_msa: ParsedMSA) -> None:
    """The result is 18 MB (uint8 residues, int16 deletions); one chunk of 2**21 cells makes
    ~80 MB of temporaries (traced peak 100 MB). The old 4,096-row chunk took all 1,200 rows at
    once: 259 MB."""
    tracemalloc.start()
    try:
        enc = _build(long_msa)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    result = enc.residues.nbytes + enc.deletions.nbytes
    assert peak < result + 100 * 2**20, (peak, result)
