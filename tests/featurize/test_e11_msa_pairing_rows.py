"""Pairing rows keep every organism's copy (review RF3 s25 #1).

AF3 pairs its UniProt MSA without deduplicating it (``Msa.from_multiple_msas([uniprot_msa],
deduplicate=False)``) and pairs the i-th row of each species per chain, so a UniProt hit whose
aligned sequence equals another organism's hit is a pairing candidate of its own species. The
store deduplicated every row by its match columns, so such a copy was dropped and its species
lost: OpenFold 4zey_A kept 438 of the 774 species of its ``uniprot_hits.sto``. Now a pairing-source
copy naming another species than its row's is a row of its own, once per (sequence, species);
rows of the other sources stay deduplicated.

Expected values come from the files themselves: rows split here (a3m by lines, Stockholm through
Biopython), species read with this file's own patterns, and the expected rows built by this
file's own walk over the files in merge order.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from featurecache.client.assemble import MAX_PAIRED_PER_SPECIES, species_pairs
from featurecache.const import GAP, RESTYPE_INDEX, UNK_PROTEIN, MolType
from featurecache.featurize import msa as fmsa
from featurecache.featurize.msa import build_msa, source_order_key
from featurecache.parse.a3m import parse_a3m
from featurecache.parse.sto import parse_sto
from featurecache.types import ParsedMSA
from tests.conftest import MSAS
from tests.featurize.msa_file_rows import _rows

OPENFOLD = MSAS / "openfold" / "4zey_A"  # uniref90, bfd, mgnify, uniprot_hits.sto (OX=)
PROTENIX_1K1A = MSAS / "Protenix" / "mmcif_msa" / "1"  # pairing.a3m (UniRef100_<acc>_<taxid>/) + non_pairing
#: the files of the real data that hold pairing alignments (SOURCES.tsv), named here
PAIRING_FILES = ("uniprot_hits.sto", "pairing.a3m")

_AA = dict(zip("ARNDCQEGHILKMFPSTWYV", (
    "ALA", "ARG", "ASN", "ASP", "CYS", "GLN", "GLU", "GLY", "HIS", "ILE",
    "LEU", "LYS", "MET", "PHE", "PRO", "SER", "THR", "TRP", "TYR", "VAL",
), strict=True))  # fmt: skip


def _species(header: str) -> str:
    """A header's species, read here ('' for none): ``OX=`` taxon, ``UniRef100_<acc>[-n]_<taxid>/``,
    else a UniProt entry name's mnemonic (``tr|A0A…|NAME_HUMAN``)."""
    m = re.search(r"\bOX=(\d+)", header) or re.match(r"(?:UniRef100_)?[A-Z0-9]+(?:-\d+)?_(\d+)/", header)
    if m:
        return "taxon " + m.group(1) if int(m.group(1)) else ""  # taxon 0: unknown (UniRef100_UPI…_0/)
    m = re.match(r"(?:sp|tr)\|[^|]+\|[A-Z0-9]+_([A-Z0-9]{1,5})\b", header)
    return "mnemonic " + m.group(1) if m else ""


def _key(match: str) -> tuple[int, ...]:
    return tuple(GAP if c == "-" else RESTYPE_INDEX[_AA[c]] if c in _AA else UNK_PROTEIN for c in match)


def _files(chain_dir: Path) -> list[Path]:
    return sorted(
        (p for p in chain_dir.iterdir() if not p.name.startswith("hmm_output")),
        key=lambda p: source_order_key(str(p)),
    )


def _load(path: Path) -> ParsedMSA:
    return parse_sto(path)[0].to_msa(0) if ".sto" in path.name else parse_a3m(path)[0]


def _build(files: list[Path], cap: int = 1 << 20) -> fmsa.EncodedMSA:
    msas = [(str(p), _load(p)) for p in files]
    return build_msa(msas[0][1].query_sequence, MolType.PROTEIN, msas, depth_cap=cap)


def _is_pairing(p: Path) -> bool:
    return p.name.removesuffix(".gz") in PAIRING_FILES


def _expected(files: list[Path]) -> list[tuple[str, int, str]]:
    """The rows (match string, source number, species) the rule gives, walked here: the query, then
    each file's hits in order; a new match string is a row at its first copy; its species is that of
    its first pairing-file copy naming one; a later pairing-file copy naming another species is a
    row of its own, once per (string, species); the query keeps no species."""
    query = _rows(files[0])[0][1]
    rows: list[list] = [[query, 0, ""]]
    at = {query: 0}
    taken = {query: ""}  # string -> species its first row took
    extra: set[tuple[str, str]] = set()
    for k, p in enumerate(files, start=1):
        for header, match in _rows(p)[1:]:
            if match not in at:
                at[match] = len(rows)
                rows.append([match, k, ""])
            sp = _species(header) if _is_pairing(p) else ""
            if not sp:
                continue
            if match not in taken:
                taken[match] = sp
                rows[at[match]][2] = sp
            elif taken[match] != sp and (match, sp) not in extra:
                extra.add((match, sp))
                rows.append([match, k, sp])
    return [(m, k, sp) for m, k, sp in rows]


def _same_species(stored: np.ndarray, expected: list[str]) -> None:
    """``stored`` ids name the same partition of rows into species as ``expected`` names ('' = 0)."""
    assert len(stored) == len(expected)
    assert [int(s) == 0 for s in stored] == [e == "" for e in expected]
    pairs = {(int(s), e) for s, e in zip(stored, expected, strict=True) if e}
    assert len({s for s, _ in pairs}) == len(pairs) == len({e for _, e in pairs})  # one id per species


def test_4zey_keeps_every_species_of_its_uniprot_hits() -> None:
    files = _files(OPENFOLD)
    uniprot = [p for p in files if _is_pairing(p)]
    assert [p.name.removesuffix(".gz") for p in uniprot] == ["uniprot_hits.sto"]
    hits = [(_species(h), m) for h, m in _rows(uniprot[0])[1:]]
    species = {sp for sp, _ in hits if sp}
    assert len(species) > 700  # RF3 counted 774
    # one row per distinct (sequence, species) of the hits: rows of a species, counted in the file
    per_species = Counter(sp for sp, _ in {(sp, m) for sp, m in hits if sp})

    out = _build(files)
    stored = Counter(int(s) for s in out.species if s)
    assert len(stored) == len(species)  # before: 438
    assert sorted(stored.values()) == sorted(per_species.values())
    assert out.depth == out.n_distinct


@pytest.mark.parametrize("chain_dir", [OPENFOLD, PROTENIX_1K1A, MSAS / "Protenix" / "mmcif_msa" / "3"])
def test_rows_sources_and_species_follow_the_rule(chain_dir: Path) -> None:
    files = _files(chain_dir)
    want = _expected(files)
    out = _build(files)
    assert out.depth == out.n_distinct == len(want)
    assert [tuple(int(x) for x in r) for r in out.residues] == [_key(m) for m, _, _ in want]
    assert out.source.tolist() == [k for _, k, _ in want]
    _same_species(out.species, [sp for _, _, sp in want])
    # rows of the non-pairing files stay deduplicated: every further row comes from a pairing file
    first = {}
    for i, (m, k, _) in enumerate(want):
        if m in first:
            assert _is_pairing(files[k - 1]), (i, files[k - 1])
        first.setdefault(m, i)
    if chain_dir == OPENFOLD:
        assert len(want) - len(first) > 400  # RF3: 469 copies lost on 4zey


def kept_rows(species: np.ndarray, cap: int) -> list[int]:
    """Rows a cap keeps of an MSA whose species come from its pairing files, walked here: the rows
    with a species get at least half the cap (AF3 keeps up to 8,191 paired rows beside 16,384),
    more where the rows without one leave room; those without one get the rest; each in order."""
    n_paired = int((species != 0).sum())
    n_other = species.size - n_paired
    if species.size <= cap:
        return list(range(species.size))
    paired_budget = min(n_paired, max(cap // 2, cap - n_other))
    out, n_p, n_o = [], 0, 0
    for i, s in enumerate(species.tolist()):
        if s != 0 and n_p < paired_budget:
            out.append(i)
            n_p += 1
        elif s == 0 and n_o < cap - paired_budget:
            out.append(i)
            n_o += 1
    return out


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_rows_do_not_depend_on_chunks_and_the_cap_keeps_pairing_rows(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files(OPENFOLD)
    whole = _build(files)
    monkeypatch.setattr(fmsa, "ENCODE_CHUNK_ROWS", chunk)
    n_paired = int((whole.species != 0).sum())
    assert 300 < n_paired and whole.depth - n_paired > 300  # 4zey: 1041 and 530
    for cap in (whole.depth, whole.depth - 1, 1200, 600, 2, 1):
        got = _build(files, cap)
        keep = kept_rows(whole.species, cap)
        assert got.depth == min(cap, whole.depth) == len(keep) and got.n_distinct == whole.n_distinct
        np.testing.assert_array_equal(got.species, whole.species[keep])
        np.testing.assert_array_equal(got.residues, whole.residues[keep])
        np.testing.assert_array_equal(got.deletions, whole.deletions[keep])
        np.testing.assert_array_equal(got.source, whole.source[keep])
        np.testing.assert_array_equal(got.profile, whole.profile)
        assert got.residues[0].tolist() == whole.residues[0].tolist()  # the query stays row 0
        if cap == 600:  # half the cap is the pairing rows'
            assert int((got.species != 0).sum()) == 300


def test_a_deep_unpaired_msa_leaves_the_pairing_rows_their_share() -> None:
    """Protenix 7pzb: 6,001 pairing.a3m rows with a species after about 6,400 non_pairing rows. At
    --msa-depth 1000 the merged MSA kept 17 rows with a species (RF3 s25 #2); now half the cap."""
    files = _files(MSAS / "Protenix" / "7pzb" / "msa" / "1")
    pairing = [p for p in files if _is_pairing(p)]
    with_species = {(m, _species(h)) for h, m in _rows(pairing[0])[1:] if _species(h)}
    assert len(with_species) > 5000
    got = _build(files, 1000)
    assert got.depth == 1000
    assert int((got.species != 0).sum()) == 500
    whole = _build(files)
    keep = kept_rows(whole.species, 1000)
    np.testing.assert_array_equal(got.species, whole.species[keep])
    np.testing.assert_array_equal(got.residues, whole.residues[keep])
    # a cap the unpaired rows do not fill leaves the rest to the pairing rows
    n_other = int((whole.species == 0).sum())
    got = _build(files, n_other + 100)
    assert int((got.species != 0).sum()) == max(100, (n_other + 100) // 2)


Q = "ACDEFG"


def _msa(*rows: str, headers: tuple[str, ...]) -> ParsedMSA:
    return ParsedMSA(headers, (Q, *rows), "a3m")


def test_the_rule_on_small_alignments() -> None:
    main = _msa("AC-EFG", "GGGGGG", headers=("q", "UniRef90_X n=2 Tax=Homininae TaxID=207598", "m"))
    uniprot = _msa(
        "AC-EFG", "AC-EFG", "AC-EFG", "AcC-EFG", Q, Q,
        headers=("4zey_A", "no taxon", "tr|B|B_X OX=9598", "tr|C|C_X OX=9598", "tr|D|D_Y OX=10090",
                 "sp|E|E_Y OX=7", "sp|F|F_Y OX=7"),
    )  # fmt: skip
    pairing = _msa("AC-EFG", "GGGGGG", headers=("101", "UniRef100_P69905_9606/", "UniRef100_Q5M7Y0_7955/"))
    labels = ["x/uniref90_hits.a3m", "x/uniprot_hits.a3m", "x/pairing.a3m"]
    out = build_msa(Q, MolType.PROTEIN, list(zip(labels, (main, uniprot, pairing), strict=True)))
    # query; AC-EFG (uniref90 copy, first uniprot species 9598); GGGGGG (pairing.a3m's 7955);
    # AC-EFG of 10090 (its own deletions: "AcC-EFG" inserts one before column 2); the query's
    # sequence of species 7 (once); AC-EFG of 9606 from pairing.a3m
    assert out.species.tolist() == [0, 9598, 7955, 10090, 7, 9606]
    assert out.source.tolist() == [0, 1, 1, 2, 2, 3]
    assert out.deletions[3].tolist() == [0, 1, 0, 0, 0, 0] and not out.deletions[1].any()
    assert out.residues[4].tolist() == out.residues[0].tolist()
    assert out.n_distinct == out.depth == 6
    # the profile is the main MSA's: the further rows do not count there
    alone = build_msa(Q, MolType.PROTEIN, [(labels[0], main)])
    np.testing.assert_array_equal(out.profile, alone.profile)
    # a non-pairing source naming species stays deduplicated
    other = build_msa(
        Q, MolType.PROTEIN, [(labels[0], main), ("x/bfd.a3m", _msa("AC-EFG", headers=("q", "tr|Z|Z_W OX=5")))]
    )
    assert other.depth == 3


def test_the_client_pairs_every_organism_copy() -> None:
    """4zey (OpenFold) with 1k1a (Protenix mmcif_msa/1): the client's species_pairs pairs, per shared
    species, min(rows of that species in each MSA, 600) rows; counted here from the files."""
    counts = []
    builds = []
    for d in (OPENFOLD, PROTENIX_1K1A):
        files = _files(d)
        per: Counter[str] = Counter()
        for p in files:
            if _is_pairing(p):
                per.update(sp for sp, _ in {(_species(h), m) for h, m in _rows(p)[1:]} if sp)
        counts.append(per)
        builds.append(_build(files))
    shared = set(counts[0]) & set(counts[1])
    want = sum(min(counts[0][s], counts[1][s], MAX_PAIRED_PER_SPECIES) for s in shared)
    assert len(shared) > 300  # RF3: 410 shared species, 311 before
    pairs = species_pairs([b.species for b in builds])
    assert pairs.shape == (want, 2)
    assert (pairs >= 1).all()  # every paired row is a hit of each MSA (no gap: two MSAs)
    for k in range(2):  # a row is paired once, with a row of its own species
        assert len(set(pairs[:, k].tolist())) == want
    np.testing.assert_array_equal(builds[0].species[pairs[:, 0]], builds[1].species[pairs[:, 1]])
