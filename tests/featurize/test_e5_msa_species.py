"""The species stored with a deduplicated MSA row is its pairing-source copy's (review R1 s25 #2).

AF3 pairs the rows of its UniProt MSA by the species in their own headers and does not deduplicate
that MSA against the others (``pipeline.py``: ``Msa.from_multiple_msas([uniprot_msa],
deduplicate=False)``); AF-Multimer pairs its ``uniprot_hits`` only. A store keeps one row per
distinct sequence at the place of its first copy in merge order (uniref90, bfd, …, uniprot,
non_pairing, pairing), and used to keep that first copy's species too: a UniProt / ``pairing.a3m``
row lost its own taxon to 0 (Protenix ``non_pairing.a3m`` headers carry none) or to a UniRef90
cluster's common taxon (``Tax=Catarrhini TaxID=9526`` for a Nomascus hit).

Expected values come from the files themselves: rows split here (a3m by lines, Stockholm through
Biopython) and taxa read with this file's own patterns (``OX=``, ``UniRef100_<acc>_<taxid>/``),
not from featurecache's parsers or species rules.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from featurecache.const import GAP, RESTYPE_INDEX, UNK_PROTEIN, MolType
from featurecache.featurize import msa as fmsa
from featurecache.featurize.msa import build_msa, source_order_key, species_id
from featurecache.parse.a3m import parse_a3m
from featurecache.parse.sto import parse_sto
from featurecache.types import ParsedMSA
from tests.conftest import MSAS
from tests.featurize.msa_file_rows import _rows
from tests.featurize.test_e11_msa_pairing_rows import kept_rows

PROTENIX = (
    MSAS / "Protenix" / "mmcif_msa" / "3"
)  # 102m: pairing.a3m (UniRef100_<acc>_<taxid>/) + non_pairing.a3m
OPENFOLD = MSAS / "openfold" / "4zey_A"  # uniref90 (cluster TaxID=), bfd (OX=), mgnify, uniprot_hits (OX=)
#: the files of the real data that hold pairing alignments (SOURCES.tsv "jackhmmer vs UniProt (for
#: pairing)", Protenix's pairing.a3m), named here rather than taken from featurecache's labels
PAIRING_FILES = ("uniprot_hits.sto", "pairing.a3m")

_AA = dict(zip("ARNDCQEGHILKMFPSTWYV", (
    "ALA", "ARG", "ASN", "ASP", "CYS", "GLN", "GLU", "GLY", "HIS", "ILE",
    "LEU", "LYS", "MET", "PHE", "PRO", "SER", "THR", "TRP", "TYR", "VAL",
), strict=True))  # fmt: skip


def _file(path: Path) -> Path:
    return path if path.exists() else path.with_name(path.name + ".gz")


def _taxon(header: str) -> int:
    """NCBI taxon of a header, read here: UniProt ``OX=`` or Protenix ``UniRef100_<acc>[-n]_<taxid>/``."""
    m = re.search(r"\bOX=(\d+)", header) or re.match(r"UniRef100_[A-Z0-9]+(?:-\d+)?_(\d+)/", header)
    return int(m.group(1)) if m else 0


def _key(match: str) -> tuple[int, ...]:
    return tuple(GAP if c == "-" else RESTYPE_INDEX[_AA[c]] if c in _AA else UNK_PROTEIN for c in match)


def _load(path: Path) -> ParsedMSA:
    return parse_sto(path)[0].to_msa(0) if ".sto" in path.name else parse_a3m(path)[0]


def _build(files: list[Path], cap: int = 1 << 20) -> fmsa.EncodedMSA:
    files = sorted(files, key=lambda p: source_order_key(str(p)))
    msas = [(str(p), _load(p)) for p in files]
    return build_msa(msas[0][1].query_sequence, MolType.PROTEIN, msas, depth_cap=cap)


def _pairing_taxa(files: list[Path]) -> dict[tuple[int, ...], int]:
    """Match string → taxon of its first copy with one in the pairing files (files in the order
    given, rows in file order); the query left out."""
    out: dict[tuple[int, ...], int] = {}
    for p in files:
        if p.name.removesuffix(".gz") not in PAIRING_FILES:
            continue
        for header, match in _rows(p)[1:]:
            t = _taxon(header)
            if t:
                out.setdefault(_key(match), t)
    return out


def _first_rows(out: fmsa.EncodedMSA) -> dict[tuple[int, ...], int]:
    """Match string → species of its first stored row (the query left out). Later rows of one
    string are pairing copies of other organisms (E11, test_e11_msa_pairing_rows.py)."""
    stored: dict[tuple[int, ...], int] = {}
    for i in range(1, out.depth):
        stored.setdefault(tuple(int(x) for x in out.residues[i]), int(out.species[i]))
    return stored


def test_a_pairing_row_also_in_non_pairing_keeps_its_taxon() -> None:
    """Protenix 102m: pairing.a3m rows with a taxon whose sequence non_pairing.a3m holds too (read
    first, header without a taxon) are stored with the pairing header's taxon; before, with 0."""
    pairing, non_pairing = _file(PROTENIX / "pairing.a3m"), _file(PROTENIX / "non_pairing.a3m")
    in_non_pairing = {_key(m) for _, m in _rows(non_pairing)[1:]}
    taxa = _pairing_taxa([pairing])
    both = {k: t for k, t in taxa.items() if k in in_non_pairing}
    assert len(both) >= 10  # R1 counted 21 such rows (e.g. UniRef100_L9L0J9_246437/)

    out = _build([pairing, non_pairing])
    stored = _first_rows(out)
    assert set(both) <= set(stored)
    # the kept copy is the non_pairing one (merge order), its species the pairing copy's
    sources = [Path(s).name for s in out.sources]
    for i in range(1, out.depth):
        k = tuple(int(x) for x in out.residues[i])
        if k in both:
            assert sources[out.source[i]].startswith("non_pairing")
    assert {k: stored[k] for k in both} == both
    # every stored row: its pairing copy's taxon, else 0 (non_pairing headers name none)
    assert stored == {k: taxa.get(k, 0) for k in stored}


def test_openfold_rows_take_the_uniprot_copys_species_and_only_it() -> None:
    """OpenFold 4zey_A: a row that uniprot_hits holds gets that hit's OX, not the UniRef90
    cluster's TaxID or a BFD header's OX read first; a row no UniProt hit holds is not paired (0):
    AF3 pairs its UniProt rows only."""
    files = [
        _file(OPENFOLD / n)
        for n in ("uniref90_hits.sto", "bfd_uniclust_hits.a3m", "mgnify_hits.sto", "uniprot_hits.sto")
    ]
    taxa = _pairing_taxa(files)
    in_uniprot = {_key(m) for _, m in _rows(files[3])[1:]}
    out = _build(files)
    stored = _first_rows(out)
    with_taxon = [k for k in stored if k in taxa]
    elsewhere = {_key(m) for f in files[:3] for _, m in _rows(f)[1:]}
    # the case of the review: a UniProt hit whose sequence a non-pairing file held first
    assert sum(k in elsewhere for k in with_taxon) >= 100
    assert {k: stored[k] for k in with_taxon} == {k: taxa[k] for k in with_taxon}
    not_uniprot = [k for k in stored if k not in in_uniprot]
    assert len(not_uniprot) > 100
    assert all(stored[k] == 0 for k in not_uniprot)
    # uniprot hits without an OX= keep what their own header gives (a mnemonic) or 0, never another file's
    for i in range(1, out.depth):
        k = tuple(int(x) for x in out.residues[i])
        if k in in_uniprot and k not in taxa:
            assert out.species[i] <= 0


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_species_do_not_depend_on_chunks_or_the_cap(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    files = [_file(PROTENIX / "non_pairing.a3m"), _file(PROTENIX / "pairing.a3m")]
    whole = _build(files)
    monkeypatch.setattr(fmsa, "ENCODE_CHUNK_ROWS", chunk)
    for cap in (whole.depth, 50, 1):
        got = _build(files, cap)
        # since E11 (review RF3 s25 #2) the cap keeps the pairing rows' share, not the first rows
        keep = kept_rows(whole.species, cap)
        np.testing.assert_array_equal(got.species, whole.species[keep])
        np.testing.assert_array_equal(got.residues, whole.residues[keep])


# --- the rule on small alignments ----------------------------------------------------------------------------


def _msa(*rows: str, headers: tuple[str, ...]) -> ParsedMSA:
    return ParsedMSA(headers, rows, "a3m")


Q = "ACDEFG"


def test_two_pairing_copies_keep_the_first_in_merge_order_that_names_a_species() -> None:
    main = _msa(Q, "AC-EFG", "GGGGGG", headers=("q", "UniRef90_X n=2 Tax=Homininae TaxID=207598", "m"))
    # uniprot before pairing in merge order; within uniprot the first copy has no species
    uniprot = _msa(
        Q, "AC-EFG", "AC-EFG", Q, headers=("q", "no taxon here", "tr|B|B_X OX=9598", "sp|C|C_Y OX=7")
    )
    pairing = _msa(Q, "AC-EFG", "GGGGGG", headers=("q", "UniRef100_P69905_9606/", "UniRef100_Q5M7Y0-3_7955/"))
    labels = ["x/uniref90_hits.a3m", "x/uniprot_hits.a3m", "x/pairing.a3m"]
    for order in (labels, labels[::-1]):  # the caller's order is merge order; sorted here as the build sorts
        ordered = sorted(order, key=source_order_key)
        by_label = dict(zip(labels, (main, uniprot, pairing), strict=True))
        out = build_msa(Q, MolType.PROTEIN, [(la, by_label[la]) for la in ordered])
        assert out.depth == 5
        # query 0 (a pairing hit identical to it does not give it a species); AC-EFG: the uniprot
        # copy with OX=9598 (not the UniRef90 cluster taxon read first, not the later pairing.a3m
        # 9606); GGGGGG: only pairing.a3m names one, an isoform accession's taxon
        assert out.species.tolist()[:3] == [0, 9598, 7955]
        assert out.source.tolist()[:3] == [0, 1, 1]  # the rows stay where their first copy put them
        # since E11 (review RF3 s25 #1) a pairing copy of another species is a row of its own: the
        # query's sequence of species 7 (uniprot), AC-EFG of 9606 (pairing.a3m)
        assert out.species.tolist()[3:] == [7, 9606]
        assert out.source.tolist()[3:] == [2, 3]


def test_without_a_pairing_alignment_rows_keep_their_first_copys_species() -> None:
    main = _msa(Q, "AC-EFG", "GGGGGG", headers=("q", "UniRef90_X n=1 Tax=Homo TaxID=9606", "m"))
    other = _msa(Q, "GGGGGG", headers=("q", "tr|A|A_MOUSE OX=10090"))
    out = build_msa(Q, MolType.PROTEIN, [("x/uniref90_hits.a3m", main), ("x/msa.a3m", other)])
    assert out.species.tolist() == [0, 9606, 0]
    # with a pairing alignment, even one that holds neither row, those taxa are not pairing species
    out = build_msa(
        Q,
        MolType.PROTEIN,
        [("x/uniref90_hits.a3m", main), ("x/msa.a3m", other), ("x/pairing.a3m", _msa(Q, headers=("q",)))],
    )
    assert out.species.tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            "UniRef100_Q5M7Y0-3_7955/\t229\t0.816\t4.946E-64\t3\t236\t237\t145\t378\t379",
            7955,
        ),  # real, mmcif_msa/0
        ("UniRef100_Q5M7Y0_7955/\t229", 7955),
        ("UniRef100_A0A0S7JZT1-12_188132/", 188132),
        ("UniRef100_Q5M7Y0-3\t229", 0),  # no taxon given
    ],
)
def test_isoform_accessions_give_their_taxon(header: str, expected: int) -> None:
    assert species_id(header) == expected


def test_the_real_isoform_row_is_stored_with_its_taxon() -> None:
    pairing = _file(MSAS / "Protenix" / "mmcif_msa" / "0" / "pairing.a3m")
    rows = _rows(pairing)
    iso = [m for h, m in rows if h.startswith("UniRef100_Q5M7Y0-3_7955/")]
    assert len(iso) == 1
    out = _build([pairing, _file(MSAS / "Protenix" / "mmcif_msa" / "0" / "non_pairing.a3m")])
    got = [
        int(out.species[i])
        for i in range(out.depth)
        if tuple(int(x) for x in out.residues[i]) == _key(iso[0])
    ]
    want = _pairing_taxa([pairing])[_key(iso[0])]  # its first pairing copy with a taxon
    assert got == [want] and want > 0
