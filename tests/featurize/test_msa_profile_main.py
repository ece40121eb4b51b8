"""``profile`` and ``deletion_mean`` describe the main MSA only: the rows of the pairing-only
alignment (AF3's UniProt search) are stored but not counted, as AF3 computes both from the unpaired
MSA (SI Table 5: "Distribution across restypes in the main MSA";
``data3.get_profile_features(chain['msa'], ...)``, the UniProt MSA feeding only ``*_all_seq``).
Protenix's ``pairing.a3m`` rows are counted: a sample's unpaired block draws from them too, as
Protenix's own configuration does, and the profile must describe the rows the model is given
(review R11 s39 #2: they were left out, while 88 % of 102m's sampled rows came from them).

Expected values are computed here from the files themselves: a3m by splitting lines, Stockholm
through Biopython, a numpy profile over the distinct rows of the files that are not UniProt files
(named in this test, not by featurecache's source labels)."""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from Bio import AlignIO

from featurecache.const import GAP, NUM_RESTYPES, RESTYPE_INDEX, UNK_PROTEIN, MolType
from featurecache.featurize.msa import build_msa, source_order_key
from featurecache.parse.a3m import parse_a3m
from featurecache.parse.sto import parse_sto
from featurecache.types import ParsedMSA
from tests.conftest import MSAS

#: the files of the real data that hold pairing-only alignments (SOURCES.tsv: "jackhmmer vs UniProt
#: (for pairing)")
PAIRING_FILES = ("uniprot_hits.sto",)
#: Protenix's pairing file: its rows pair chains and are unpaired rows too
PROTENIX_PAIRING = "pairing.a3m"

_AA = {
    "A": "ALA", "R": "ARG", "N": "ASN", "D": "ASP", "C": "CYS", "Q": "GLN", "E": "GLU", "G": "GLY", "H": "HIS",
    "I": "ILE", "L": "LEU", "K": "LYS", "M": "MET", "F": "PHE", "P": "PRO", "S": "SER", "T": "THR", "W": "TRP",
    "Y": "TYR", "V": "VAL",
}  # fmt: skip


def _text(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def _rows(path: Path) -> list[tuple[str, list[int]]]:
    """(match-column string, deletions before each match column) of every row of the file."""
    if ".sto" in path.name:
        aln = AlignIO.read(io.StringIO(_text(path)), "stockholm")
        query = str(aln[0].seq)
        out = []
        for rec in aln:
            seq, match, dels, run = str(rec.seq), [], [], 0
            for q, c in zip(query, seq, strict=True):
                if q in "-.":  # an insert column: a residue there is a deletion before the next column
                    run += c not in "-."
                else:
                    match.append(c.upper())
                    dels.append(run)
                    run = 0
            out.append(("".join(match), dels))
        return out
    seqs: list[str] = []
    for line in _text(path).splitlines():
        if line.startswith(">"):
            seqs.append("")
        elif seqs and not line.startswith("#"):
            seqs[-1] += line.strip()
    out = []
    for s in seqs:
        dels, run = [], 0
        for c in s:
            if c.islower():
                run += 1
            elif c != ".":
                dels.append(run)
                run = 0
        out.append((re.sub(r"[a-z.]", "", s), dels))
    return out


def _classes(rows: Iterable[str]) -> np.ndarray:
    """int [rows, L]: the 32-class index of each match character (the 20 amino acids, gap, else UNK)."""
    return np.array([[GAP if c == "-" else RESTYPE_INDEX[_AA[c]] if c in _AA else UNK_PROTEIN for c in m]
                     for m in rows])  # fmt: skip


def _reference(
    query: str, files: list[Path], leave_out: tuple[str, ...] = PAIRING_FILES
) -> tuple[np.ndarray, np.ndarray, int]:
    """(profile [L, 32], deletion mean [L], rows) over the distinct rows of the query and the
    files not named in ``leave_out`` (first occurrence kept)."""
    main: dict[str, list[int]] = {query: [0] * len(query)}
    for p in files:
        if p.name.removesuffix(".gz") in leave_out:
            continue
        for match, dels in _rows(p):
            main.setdefault(match, dels)
    one_hot = np.eye(NUM_RESTYPES)[_classes(main)]  # [rows, L, 32]
    return one_hot.mean(axis=0), np.array(list(main.values()), np.float64).mean(axis=0), len(main)


def _load(path: Path) -> ParsedMSA:
    return parse_sto(path)[0].to_msa(0) if ".sto" in path.name else parse_a3m(path)[0]


def _files(chain_dir: str) -> list[Path]:
    return sorted(
        (p for p in (MSAS / chain_dir).iterdir() if not p.name.startswith("hmm_output")),
        key=lambda p: source_order_key(str(p)),
    )


@pytest.mark.parametrize("chain_dir", ["openfold/4zey_A", "openfold/2crb_A"])
def test_profile_and_deletion_mean_leave_out_the_pairing_rows(chain_dir: str) -> None:
    files = _files(chain_dir)
    assert any(p.name in PAIRING_FILES for p in files)
    msas = [(str(p), _load(p)) for p in files]
    query = msas[0][1].query_sequence
    out = build_msa(query, MolType.PROTEIN, msas, depth_cap=1 << 20)

    profile, del_mean, n_main = _reference(query, files)
    np.testing.assert_allclose(out.profile, profile, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.deletion_mean, del_mean, rtol=1e-5, atol=1e-6)

    # the pairing rows are still stored (species pairing draws on them), counted in n_distinct (with
    # one row per further species of a pairing copy: test_e11_msa_pairing_rows.py)
    every = {query} | {m for p in files for m, _ in _rows(p)}
    assert out.depth == out.n_distinct >= len({r.tobytes() for r in out.residues}) == len(every) > n_main
    pairing_sources = {k for k, label in enumerate(out.sources) if Path(label).name in PAIRING_FILES}
    assert np.isin(out.source, list(pairing_sources)).sum() > 0
    # and they would have changed the profile: the test tells the two apart
    assert np.abs(np.eye(NUM_RESTYPES)[_classes(every)].mean(axis=0) - profile).max() > 0.01


@pytest.mark.parametrize("chain_dir", ["Protenix/mmcif_msa/3", "Protenix/mmcif_msa/0"])
def test_protenix_pairing_rows_count_in_the_profile(chain_dir: str) -> None:
    files = _files(chain_dir)
    assert [p.name for p in files if p.name == PROTENIX_PAIRING] == [PROTENIX_PAIRING]
    msas = [(str(p), _load(p)) for p in files]
    query = msas[0][1].query_sequence
    out = build_msa(query, MolType.PROTEIN, msas, depth_cap=1 << 20)
    profile, del_mean, _ = _reference(query, files, leave_out=())
    np.testing.assert_allclose(out.profile, profile, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.deletion_mean, del_mean, rtol=1e-5, atol=1e-6)
    # without the pairing rows the profile is another one: the test tells the two apart
    without, _, _ = _reference(query, files, leave_out=(PROTENIX_PAIRING,))
    assert np.abs(without - profile).max() > 0.01


def test_a_main_row_after_the_same_pairing_row_is_counted_once() -> None:
    q = "ACDE"
    # merge order: uniprot before non_pairing (featurize.msa.MSA_SOURCE_ORDER)
    uniprot = ParsedMSA(("q", "u1", "u2", "u3"), (q, "AC-E", "GGGG", q), "a3m")  # u3 is the query again
    main = ParsedMSA(("q", "m1", "m2", "m3"), (q, "AkC-E", "A--E", "AC-E"), "a3m")
    out = build_msa(q, MolType.PROTEIN, [("x/uniprot_hits.a3m", uniprot), ("x/non_pairing.a3m", main)])
    # stored rows: query, AC-E (uniprot), GGGG (uniprot), A--E (main); AkC-E is a duplicate of AC-E
    assert out.depth == out.n_distinct == 4
    assert out.source.tolist() == [0, 1, 1, 2]
    # main MSA: query ACDE, AC-E (first seen in it as "AkC-E": one deletion before C), A--E
    a, c, d, e, gap = (RESTYPE_INDEX[n] for n in ("ALA", "CYS", "ASP", "GLU", "-"))
    expected = np.zeros((4, NUM_RESTYPES))
    expected[0, a] = 3
    expected[1, c], expected[1, gap] = 2, 1
    expected[2, d], expected[2, gap] = 1, 2
    expected[3, e] = 3
    np.testing.assert_allclose(out.profile, expected / 3, rtol=1e-6)
    np.testing.assert_allclose(out.deletion_mean, [0, 1 / 3, 0, 0], rtol=1e-6)


def test_only_uniprot_alignments_leave_the_query_profile() -> None:
    q = "ACDE"
    uniprot = ParsedMSA(("q", "p1", "p2"), (q, "AkkC-E", "GGGG"), "a3m")
    out = build_msa(q, MolType.PROTEIN, [("x/uniprot_hits.a3m", uniprot)])
    assert out.depth == 3
    one_hot = np.zeros((4, NUM_RESTYPES))
    one_hot[np.arange(4), [RESTYPE_INDEX[n] for n in ("ALA", "CYS", "ASP", "GLU")]] = 1
    np.testing.assert_array_equal(out.profile, one_hot)
    np.testing.assert_array_equal(out.deletion_mean, np.zeros(4))
    # Protenix's pairing file alone: its rows are the unpaired rows, and the profile's
    out = build_msa(q, MolType.PROTEIN, [("7pzb/msa/1/pairing.a3m", uniprot)])
    g = RESTYPE_INDEX["GLY"]
    expected = one_hot * 2 / 3
    expected[np.arange(4), g] += 1 / 3
    expected[2, :] = 0
    expected[2, [RESTYPE_INDEX["ASP"], RESTYPE_INDEX["-"], g]] = 1 / 3
    np.testing.assert_allclose(out.profile, expected, rtol=1e-6)
    np.testing.assert_allclose(out.deletion_mean, [0, 2 / 3, 0, 0], rtol=1e-6)
