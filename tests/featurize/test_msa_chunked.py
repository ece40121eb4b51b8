"""build_msa encodes rows in chunks (memory bounded by the depth cap, not the input rows): the result
must be what a whole-MSA reference gives, with duplicates and the cap falling across chunk borders."""

from __future__ import annotations

import re

import numpy as np
import pytest

from featurecache.const import GAP, MSA_PROTEIN_LETTERS, NUM_RESTYPES, UNK_PROTEIN, MolType
from featurecache.featurize import msa as fmsa
from featurecache.featurize.msa import build_msa, species_id
from featurecache.parse.a3m import parse_a3m
from featurecache.types import ParsedMSA
from tests.conftest import MSAS

DEEP = MSAS / "alphafold3-pytorch" / "721p-assembly1A_protein.a3m.gz"  # ~16k rows


def _reference(sequence: str, alignments: list[ParsedMSA], cap: int) -> dict[str, np.ndarray]:
    """Whole-MSA reference from plain Python: first occurrence of each match string wins."""
    seen: dict[str, None] = {}
    kept: list[tuple[str, list[int], int, int]] = []  # match string, deletions, species, source
    for k, msa in enumerate([ParsedMSA(("q",), (sequence,), "a3m"), *alignments]):
        for header, row in zip(msa.headers, msa.rows, strict=True):
            matches = re.sub(r"[a-z.]", "", row)
            if matches in seen:
                continue
            seen[matches] = None
            dels, run = [], 0
            for c in row:
                if c.islower():
                    run += 1
                elif c != ".":
                    dels.append(run)
                    run = 0
            kept.append((matches, dels, species_id(header) if k else 0, k))
    table = {c: v for c, v in MSA_PROTEIN_LETTERS.items()} | {"-": GAP}
    res = np.array([[table.get(c, UNK_PROTEIN) for c in m] for m, *_ in kept], np.uint8)
    all_dels = np.array([d for _, d, _, _ in kept], np.int64)
    profile = np.zeros((len(sequence), NUM_RESTYPES))
    for j in range(len(sequence)):
        profile[j] = np.bincount(res[:, j], minlength=NUM_RESTYPES) / len(kept)
    return {
        "residues": res[:cap],
        "deletions": np.minimum(all_dels[:cap], np.iinfo(np.int16).max).astype(np.int16),
        "species": np.array([s for *_, s, _ in kept[:cap]], np.int32),
        "source": np.array([k for *_, k in kept[:cap]], np.uint8),
        "profile": profile.astype(np.float32),
        "deletion_mean": (all_dels.sum(0) / len(kept)).astype(np.float32),
        "n_distinct": np.array(len(kept)),
    }


@pytest.mark.parametrize("chunk,cap", [(4096, 16384), (1000, 2500), (7, 13), (1, 1)])
def test_chunked_build_matches_whole_msa_reference(
    chunk: int, cap: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    msa = parse_a3m(DEEP)[0]
    assert msa.depth > 4096  # more than one chunk at the default chunk size
    seq = msa.query_sequence
    # the same file twice: every row of the second copy is a duplicate across chunks and sources
    alignments = [msa, msa] if chunk > 100 else [ParsedMSA(msa.headers[:300], msa.rows[:300], "a3m")] * 2
    monkeypatch.setattr(fmsa, "ENCODE_CHUNK_ROWS", chunk)
    enc = build_msa(seq, MolType.PROTEIN, [("a", alignments[0]), ("b", alignments[1])], cap)
    ref = _reference(seq, alignments, cap)
    for name in ("residues", "deletions", "species", "source"):
        np.testing.assert_array_equal(getattr(enc, name), ref[name], err_msg=name)
    np.testing.assert_allclose(enc.profile, ref["profile"], rtol=1e-6)
    np.testing.assert_allclose(enc.deletion_mean, ref["deletion_mean"], rtol=1e-6)
    assert enc.n_distinct == int(ref["n_distinct"])
    assert enc.n_input_rows == 2 * alignments[0].depth


def test_bad_row_in_a_later_chunk_is_named_by_its_row_in_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    msa = parse_a3m(DEEP)[0]
    rows = list(msa.rows[:50])
    rows[37] = rows[37][:-1]  # one match column short
    monkeypatch.setattr(fmsa, "ENCODE_CHUNK_ROWS", 16)
    with pytest.raises(fmsa.MSAError, match=r"row 37 has"):
        build_msa(
            msa.query_sequence, MolType.PROTEIN, [("a", ParsedMSA(msa.headers[:50], tuple(rows), "a3m"))]
        )
