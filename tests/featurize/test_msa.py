"""MSA encoding, merging, dedup, depth cap, profile and species ids — against hand and numpy references."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import numpy as np
import pytest
from Bio import AlignIO

from featurecache.const import GAP, RESTYPE_INDEX, RESTYPES, UNK_DNA, UNK_PROTEIN, UNK_RNA, MolType
from featurecache.errors import MSAError
from featurecache.featurize.msa import (
    QUERY_SOURCE,
    adopt_query,
    build_msa,
    compatible_query,
    encode_rows,
    mnemonic_code,
    source_label,
    source_order_key,
    species_id,
    to_restypes,
)
from featurecache.parse.a3m import _parse_a3m, parse_a3m
from featurecache.parse.sto import parse_sto
from featurecache.types import ParsedMSA

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real"
MSAS = REAL / "msas"

ONE_LETTER_3 = {
    "A": "ALA",
    "C": "CYS",
    "D": "ASP",
    "E": "GLU",
    "F": "PHE",
    "G": "GLY",
    "K": "LYS",
    "M": "MET",
}


def _msa(*rows: str, headers: tuple[str, ...] | None = None) -> ParsedMSA:
    return ParsedMSA(headers or tuple(f"r{i}" for i in range(len(rows))), rows, "a3m")


# --- encoding ----------------------------------------------------------------------------------------


def test_encode_rows_deletions_by_hand() -> None:
    chars, dels = encode_rows(["ACDE", "aaA-cDEzz", "-.C.DbbE"], 4)
    assert chars.tobytes() == b"ACDEA-DE-CDE"
    # row 1: 2 insertions before col 0, 1 before col 2, trailing ones dropped
    assert dels.tolist() == [[0, 0, 0, 0], [2, 0, 1, 0], [0, 0, 0, 2]]
    assert chars.dtype == np.uint8 and dels.dtype == np.int16
    with pytest.raises(MSAError, match="row 1 has 3"):
        encode_rows(["ACDE", "ACD"], 4)


def test_to_restypes_per_alphabet() -> None:
    chars = np.frombuffer(b"ACDXB-U", np.uint8)
    protein = to_restypes(chars, MolType.PROTEIN)
    assert protein.tolist() == [
        RESTYPE_INDEX["ALA"], RESTYPE_INDEX["CYS"], RESTYPE_INDEX["ASP"], UNK_PROTEIN, UNK_PROTEIN, GAP, UNK_PROTEIN,
    ]  # fmt: skip
    rna = to_restypes(np.frombuffer(b"ACGUTN-", np.uint8), MolType.RNA)
    assert [RESTYPES[i] for i in rna] == ["A", "C", "G", "U", "U", "N", "-"]
    dna = to_restypes(np.frombuffer(b"ACGTUX", np.uint8), MolType.DNA)
    assert [RESTYPES[i] for i in dna] == ["DA", "DC", "DG", "DT", "DT", "DN"]
    assert dna[-1] == UNK_DNA and rna[-2] == UNK_RNA
    with pytest.raises(MSAError):
        to_restypes(chars, MolType.LIGAND)


# --- species -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("tr|I6M1Q3|I6M1Q3_PLAFA/27-64 [subseq from] MSP-3 OS=Plasmodium falciparum OX=5833 GN=MSP-3", 5833),
        (
            "UniRef90_Q9NIG6/58-95 [subseq from] MSP3 n=1 Tax=Plasmodium falciparum TaxID=5833 RepID=Q9NIG6_PLAFA",
            5833,
        ),
        ("UniRef100_A0A0S7JZT1_188132/\t246\t0.897\t6.614E-70", 188132),
        ("UniRef100_UPI0019522321_1046556/", 1046556),
        (
            "tr|F7GSJ1|F7GSJ1_MACMU Uncharacterized protein OS=Macaca mulatta GN=FAM69B",
            -mnemonic_code("MACMU"),
        ),
        ("sp|P69905|HBA_HUMAN Hemoglobin subunit alpha", -mnemonic_code("HUMAN")),
        ("UniRef100_A0A0D4WTP2\t338\t1.00\t7.965E-99\t2\t375", 0),
        ("SRR5688572_19959995", 0),
        ("MGYP000005532851/48-76 [subseq from] PL=00 UP=0 BIOMES=0110000000000", 0),
        ("query", 0),
    ],
)
def test_species_id(header: str, expected: int) -> None:
    assert species_id(header) == expected


def test_mnemonic_codes_are_distinct_and_fit_int32() -> None:
    codes = {mnemonic_code(m) for m in ("HUMAN", "MOUSE", "PLAFA", "9PROT", "ECOLI", "ZZZZZ", "A")}
    assert len(codes) == 7
    assert max(codes) < 2**31 and min(codes) > 0


# --- merge order -----------------------------------------------------------------------------------------


def test_source_labels_and_order() -> None:
    names = [
        "x/uniprot_hits.sto", "x/mgnify_hits.sto", "x/bfd_uniclust_hits.a3m", "x/uniref90_hits.sto.gz",
        "p/pairing.a3m", "p/non_pairing.a3m.gz", "a/7a4d-assembly1A_protein.a3m",
    ]  # fmt: skip
    ordered = sorted(names, key=source_order_key)
    assert [source_label(n) for n in ordered] == [
        "uniref90", "bfd", "mgnify", "uniprot", "non_pairing", "pairing", "other",
    ]  # fmt: skip
    assert source_label("6KWC_1/bfd_uniref_hits.a3m") == "bfd"


# --- build_msa on strings ---------------------------------------------------------------------------------


def test_build_msa_dedup_order_sources_and_cap() -> None:
    q = "ACDEFG"
    a = _msa(
        q, "AC-EFG", "ACDEFG", "AkkC-EFG", headers=("query", "x OX=9606", "dup-of-query", "y TaxID=10090")
    )
    b = _msa(q, "AC-EFG", "GGGGGG", headers=("q2", "again", "z"))
    out = build_msa(q, MolType.PROTEIN, [("a.a3m", a), ("b.a3m", b)])
    # distinct match strings, first occurrence wins: query, AC-EFG (a), GGGGGG (b)
    # ("AkkC-EFG" has the same match columns as "AC-EFG" → duplicate)
    assert out.depth == 3 and out.n_distinct == 3 and out.n_input_rows == 7
    assert out.sources == (QUERY_SOURCE, "a.a3m", "b.a3m")
    assert out.source.tolist() == [0, 1, 2]
    assert out.species.tolist() == [0, 9606, 0]
    assert [RESTYPES[i] for i in out.residues[1]] == ["ALA", "CYS", "-", "GLU", "PHE", "GLY"]
    assert out.deletions.sum() == 0
    capped = build_msa(q, MolType.PROTEIN, [("a.a3m", a), ("b.a3m", b)], depth_cap=2)
    assert capped.depth == 2 and capped.n_distinct == 3
    assert capped.residues[0].tolist() == [RESTYPE_INDEX[ONE_LETTER_3[c]] for c in q]
    # profile and deletion mean cover every distinct row, not only the capped ones
    assert np.array_equal(capped.profile, out.profile)
    assert capped.profile[2, GAP] == pytest.approx(1 / 3)
    assert capped.profile.sum(axis=1) == pytest.approx(np.ones(6))


def test_build_msa_rejects_a_foreign_query() -> None:
    with pytest.raises(MSAError, match="not the chain sequence"):
        build_msa("ACDE", MolType.PROTEIN, [("x", _msa("ACDF", "ACD-"))])
    with pytest.raises(MSAError):
        build_msa("", MolType.PROTEIN, [])


def test_single_sequence_msa() -> None:
    """The build's MSA of a chain with no alignment (``msa_stage.build_msa_part``): the query alone."""
    out = build_msa("acgu", MolType.RNA, [])
    assert out.depth == 1 and out.length == 4
    assert [RESTYPES[i] for i in out.residues[0]] == ["A", "C", "G", "U"]
    assert out.sources == (QUERY_SOURCE,)
    assert out.profile[np.arange(4), out.residues[0]].tolist() == [1.0] * 4


def test_compatible_query_and_adopt() -> None:
    assert compatible_query("TXPGVTXPGV", "TVPGVTVPGV")
    assert not compatible_query("TAPGVTXPGV", "TVPGVTVPGV")
    assert not compatible_query("TXPGV", "TVPGVT")
    (msa,) = _parse_a3m(">101\nTXPGVTXPGV\n>101\nTXPGVTXPGV\n>h\nTAPG-TXPGV\n")
    adopted = adopt_query(msa, "TVPGVTVPGV")
    out = build_msa("TVPGVTVPGV", MolType.PROTEIN, [("f", adopted)])
    assert out.depth == 2  # the copy of the old query is the query


# --- real files: depth = distinct sequences, counted independently ----------------------------------------


def _text(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def _independent_match_strings(path: Path) -> list[str]:
    """Match-column strings of every row: a3m by line splitting, Stockholm through Biopython."""
    if ".sto" in path.name:
        aln = AlignIO.read(io.StringIO(_text(path)), "stockholm")
        query = str(aln[0].seq)
        keep = [i for i, c in enumerate(query) if c != "-"]
        return ["".join(str(rec.seq)[i] for i in keep).upper() for rec in aln]
    seqs: list[str] = []
    for line in _text(path).splitlines():
        if line.startswith(">"):
            seqs.append("")
        elif seqs and not line.startswith("#"):
            seqs[-1] += line.strip()
    return [re.sub(r"[a-z.]", "", s) for s in seqs]


def _load(path: Path) -> ParsedMSA:
    if ".sto" in path.name:
        return parse_sto(path)[0].to_msa(0)
    return parse_a3m(path)[0]


@pytest.mark.parametrize("chain_dir", ["openfold/3zee_A", "openfold/2crb_A", "Protenix/mmcif_msa/3"])
def test_real_merge_depth_is_distinct_rows(chain_dir: str) -> None:
    files = sorted(
        (p for p in (MSAS / chain_dir).iterdir() if not p.name.startswith("hmm_output")),
        key=lambda p: source_order_key(str(p)),
    )
    msas = [(str(p), _load(p)) for p in files]
    query = msas[0][1].query_sequence
    out = build_msa(query, MolType.PROTEIN, msas)
    all_rows = [query]
    for p in files:
        all_rows += _independent_match_strings(p)
    # the distinct rows: the first stored row of each sequence; the others are pairing-file copies
    # of another organism (one row per sequence and species: test_e11_msa_pairing_rows.py)
    firsts: dict[bytes, int] = {}
    for i, row in enumerate(out.residues):
        firsts.setdefault(row.tobytes(), i)
    distinct = sorted(firsts.values())
    further = sorted(set(range(out.depth)) - set(distinct))
    assert all(Path(out.sources[out.source[i]]).name.startswith(("uniprot_hits", "pairing")) for i in further)
    assert out.depth == out.n_distinct
    assert len(distinct) == len(set(all_rows))
    assert out.n_input_rows == len(all_rows) - 1
    # row order = first occurrence in merge order
    first_seen = list(dict.fromkeys(all_rows))
    decoded = ["".join("-" if c == GAP else "X" for c in out.residues[i]) for i in distinct]
    assert decoded == [re.sub("[^-]", "X", s) for s in first_seen]
    # each row's source is the first file (in merge order) that holds it
    owner: dict[str, int] = {}
    for k, p in enumerate(files, start=1):
        for s in _independent_match_strings(p):
            owner.setdefault(s, k)
    owner[query] = 0
    assert out.source[distinct].tolist() == [owner[s] for s in first_seen]


def test_real_depth_cap_keeps_query_first() -> None:
    path = MSAS / "Protenix" / "mmcif_msa_initial" / "1.a3m.gz"
    msa = parse_a3m(path)[0]
    out = build_msa(msa.query_sequence, MolType.PROTEIN, [(str(path), msa)], depth_cap=100)
    assert out.depth == 100
    assert out.n_distinct == len(set(_independent_match_strings(path)))
    assert out.n_distinct > 100
    assert np.array_equal(
        out.residues[0], to_restypes(np.frombuffer(msa.query_sequence.encode(), np.uint8), 0)
    )


def test_real_deletions_equal_lowercase_counts() -> None:
    path = MSAS / "openfold" / "6KWC_1" / "bfd_uniref_hits.a3m"
    msa = parse_a3m(path)[0]
    out = build_msa(msa.query_sequence, MolType.PROTEIN, [(str(path), msa)], depth_cap=10**6)
    # total deletions kept = lowercase letters before the last match column of each kept row
    per_string: dict[str, int] = {}
    for s in _raw_rows(path):
        stripped = s.rstrip("abcdefghijklmnopqrstuvwxyz.")
        per_string.setdefault(re.sub(r"[a-z.]", "", s), sum(c.islower() for c in stripped))
    assert int(out.deletions.sum()) == sum(per_string.values())


def _raw_rows(path: Path) -> list[str]:
    seqs: list[str] = []
    for line in _text(path).splitlines():
        if line.startswith(">"):
            seqs.append("")
        elif seqs:
            seqs[-1] += line.strip()
    return seqs


def test_real_rna_msa_encodes_nucleotides() -> None:
    path = MSAS / "Protenix" / "9gmw" / "9gmw_2_all.a3m"
    msa = parse_a3m(path)[0]
    out = build_msa(msa.query_sequence, MolType.RNA, [(str(path), msa)])
    used = set(np.unique(out.residues).tolist())
    assert used <= {RESTYPE_INDEX[x] for x in ("A", "G", "C", "U", "N", "-")}
    assert out.depth == len(set(_independent_match_strings(path)))
