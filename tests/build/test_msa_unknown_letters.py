"""An MSA query that leaves out residues of its chain joins only when they are the chain type's
unknown residues, left out in exactly one way (a review's finding).

The unknown residue's letter is ``X`` in a protein and ``N`` in RNA / DNA (AF3's
``residue_names``: ``PROTEIN_TYPES_ONE_LETTER_WITH_UNKNOWN`` ends in ``X``,
``UNK_NUCLEIC_ONE_LETTER`` is ``N``). Before, ``N`` counted as unknown in a protein too, so a
layout-named query that lacked a real Asn joined silently, and a query that left out an ``X`` could
have its gap column put at an Asn instead. The expected outputs below are worked out by hand from
the strings; the builds use the real 1psm (gemmi-edited where a residue must be unknown, written
into ``tmp_path``) with a3m files written here, and the chain sequence comes from gemmi's reading.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gemmi
import pytest

import featurecache
from featurecache.build.msa_stage import _adopt, omissions, omitted_unknowns
from featurecache.const import GAP, MSA_PROTEIN_LETTERS, UNK_PROTEIN, MolType
from featurecache.types import ParsedMSA
from tests.conftest import STRUCTURES, build_store

P, R, D = MolType.PROTEIN, MolType.RNA, MolType.DNA


# --- omitted_unknowns / _adopt on strings, expected outputs by hand ------------------------------------


def test_asn_is_not_an_unknown_residue_in_a_protein() -> None:
    # MANKXLV less its X (index 4) is MANKLV; the N at index 2 is Asn (before: (2,), the Asn)
    assert omitted_unknowns("MANKLV", "MANKXLV", P) == (4,)
    # a protein query lacking a real Asn does not join (before: (2,))
    assert omitted_unknowns("MAKXLV", "MANKXLV", P) is None
    assert omitted_unknowns("MAKLV", "MANKLV", P) is None
    # an N in the query matches only an Asn outside the left-out positions: MXDLV less X is MDLV,
    # and N (query) vs D (chain) is a difference (before: (1,))
    assert omitted_unknowns("MNLV", "MXDLV", P) is None
    # 209d's actinomycin peptide: PXA (index 5) left out, X in the query for MVA (V in the chain)
    assert omitted_unknowns("TXPGVTXPGV", "TVPGVXTVPGV", P) == (5,)
    # two left out: both X, the only choice
    assert omitted_unknowns("MAKLV", "MXAKXLV", P) == (1, 4)


def test_nucleic_unknown_is_n() -> None:
    # ACNGU less N (index 2) is ACGU, in RNA and in DNA; in a protein N is Asn: no join
    assert omitted_unknowns("ACGU", "ACNGU", R) == (2,)
    assert omitted_unknowns("ACGT", "ACNGT", D) == (2,)
    assert omitted_unknowns("ACGU", "ACNGU", P) is None
    # X is no nucleic letter of an unknown residue
    assert omitted_unknowns("ACGU", "ACXGU", R) is None


def test_more_than_one_choice_is_refused() -> None:
    # MXXA less index 1 or less index 2 is MXA either way: two choices, no join
    assert omitted_unknowns("MXA", "MXXA", P) is None
    assert omissions("MXA", "MXXA", P).ways == 2
    # with a K in the query's place it is the same: X matches K at either kept position
    assert omitted_unknowns("MKA", "MXXA", P) is None
    # RNA: NN with one left out
    assert omitted_unknowns("ANU", "ANNU", R) is None
    # not shorter, or nothing to leave out: no choice at all
    assert omissions("MANK", "MANK", P).ways == 0
    assert omissions("MAN", "MANK", P).ways == 0


def _msa(*rows: str) -> ParsedMSA:
    return ParsedMSA(tuple(f"r{i}" for i in range(len(rows))), rows, "a3m")


def test_adopt_puts_the_gap_column_at_the_unknown_residue() -> None:
    # query MANKLV, chain MANKXLV: X is the 5th residue, after the query's 4th column (K); the hit
    # MSNRLI gets its gap there: MSNR-LI (before: after the 2nd column, MS-NRLI); a copy of the
    # query becomes the chain sequence; the insertion k before L stays before L
    out = _adopt(_msa("MANKLV", "MSNRLI", "MANKLV", "MSNRkLI"), "MANKXLV", P)
    assert out.rows == ("MANKXLV", "MSNR-LI", "MANKXLV", "MSNR-kLI")
    # RNA: ACNGU, query ACGU: the gap after the 2nd column
    out = _adopt(_msa("ACGU", "AUGU"), "ACNGU", R)
    assert out.rows == ("ACNGU", "AU-GU")


# --- real builds: 1psm (38 residues) with a3m files in its OpenFold-layout folders --------------------

HIT_ASN = "EAYRKAKQASQDAEQAAKDAENASKEAEEAAKEAVLR"  # the reviewer's hit for the Asn-less query
HIT_X = "EAYKKAKQASQDAEQAAKDAEQGKEAEEAAKEAVNLK"  # the reviewer's hit for the X-less query


def _one_letter(st: gemmi.Structure) -> str:
    """Chain A's entity sequence in one-letter code as gemmi tabulates it (X: not a standard amino
    acid, PXA's case)."""
    st.setup_entities()
    ent = next(e for e in st.entities if "A" in e.subchains)
    out = []
    for name in (x.split(",")[0] for x in ent.full_sequence):
        info = gemmi.find_tabulated_residue(name)
        out.append(
            info.one_letter_code.upper()
            if info is not None and info.is_amino_acid() and info.is_standard()
            else "X"
        )
    return "".join(out)


def _to_pxa(st: gemmi.Structure, numbers: tuple[int, ...]) -> None:
    """Residues ``numbers`` of chain A renamed PXA (a component the tables do not know as an amino
    acid: X in the sequence), in every model and in the entity sequence."""
    for model in st:
        for res in model["A"]:
            if res.seqid.num in numbers:
                res.name = "PXA"
                res.het_flag = "H"
    st.setup_entities()
    ent = next(e for e in st.entities if "A" in e.subchains)
    ent.full_sequence = ["PXA" if i + 1 in numbers else n for i, n in enumerate(ent.full_sequence)]


def _encode(letters: str) -> list[int]:
    return [GAP if c == "-" else MSA_PROTEIN_LETTERS.get(c, UNK_PROTEIN) for c in letters]


@dataclass
class Built:
    store: Path
    seqs: dict[str, str]  # entry -> chain A's sequence as gemmi reads the written file
    warnings: list[str]  # what the MSA stage logged at WARNING
    summary: Any


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """One build of three entries: 1psm as it is, 1psm-x1 (SER 24 → PXA), 1psm-x2 (SER 24 and
    LYS 25 → PXA), each with one a3m in its OpenFold folder; the near-miss warnings it logged."""
    root = tmp_path_factory.mktemp("msa_unknown")
    pdb, msa = root / "pdb", root / "msa"
    pdb.mkdir()
    seqs: dict[str, str] = {}
    for entry, numbers in (("1psm", ()), ("1psm-x1", (24,)), ("1psm-x2", (24, 25))):
        st = gemmi.read_structure(str(STRUCTURES / "1psm.cif"))
        if numbers:
            _to_pxa(st, numbers)
        path = pdb / f"{entry}.cif"
        st.make_mmcif_document().write_file(str(path))
        seqs[entry] = _one_letter(gemmi.read_structure(str(path)))
    plain = seqs["1psm"]
    assert len(plain) == 38 and plain[35] == "N" and plain[21] == "N" and "X" not in plain
    assert seqs["1psm-x1"] == plain[:23] + "X" + plain[24:]
    assert seqs["1psm-x2"] == plain[:23] + "XX" + plain[25:]
    # 1psm: the query leaves out the Asn at 36 (a real residue): must not join
    q_asn = plain[:35] + plain[36:]
    assert q_asn == "EAYKKAKQASQDAEQAAKDAENASKEAEEAAKEAVLK"
    # 1psm-x1 / -x2: the query leaves out the X (residue 24), K in its 25th column
    q_x = plain[:23] + plain[24:]
    assert q_x == "EAYKKAKQASQDAEQAAKDAENAKEAEEAAKEAVNLK"
    for entry, query, hit in (("1psm", q_asn, HIT_ASN), ("1psm-x1", q_x, HIT_X), ("1psm-x2", q_x, HIT_X)):
        (msa / f"{entry}_A").mkdir(parents=True)
        (msa / f"{entry}_A" / "uniref90_hits.a3m").write_text(f">query\n{query}\n>hit OX=9606\n{hit}\n")

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(record.getMessage())

    keep = Keep()
    logger = logging.getLogger("featurecache.build.msa_stage")
    logger.addHandler(keep)
    try:
        summary = build_store(root / "store", pdb, workers=1, msa_dir=msa)
    finally:
        logger.removeHandler(keep)
    assert summary.n_built == 3, summary.failures
    return Built(root / "store", seqs, keep.lines, summary)


def _chain(store: Path, entry: str) -> dict[str, Any]:
    reader = featurecache.open_store(store)
    try:
        return next(c for c in reader.entry_chains(entry) if c["label_id"] == "A")
    finally:
        reader.close()


def test_query_without_a_real_asn_does_not_join(built: Built) -> None:
    """The reviewer's /tmp/rf20b/asn: before, joined by layout (N taken for an unknown residue)."""
    chain = _chain(built.store, "1psm")
    assert chain["sequence"] == built.seqs["1psm"]
    assert (chain["msa_files"], chain["msa_depth"]) == (0, 1)
    assert (
        "MSA near miss: 1psm_A/uniref90_hits.a3m: query does not match chain 1psm/A: layout names this "
        "chain; different sequence (37 vs 38 residues)"
    ) in built.warnings


def test_query_without_the_x_gets_the_gap_column_at_the_x(built: Built) -> None:
    """The reviewer's /tmp/rf20b/asn2: before, the gap column went after the Asn at 22."""
    chain = _chain(built.store, "1psm-x1")
    seq = built.seqs["1psm-x1"]
    assert chain["sequence"] == seq
    assert (chain["msa_files"], chain["msa_depth"]) == (1, 2)
    reader = featurecache.open_store(built.store)
    try:
        full = reader.msa(chain["msa_key"])
    finally:
        reader.close()
    assert full.residues.shape == (2, 38)
    assert full.residues[0].tolist() == _encode(seq)
    # the hit's 23 first columns, the gap for PXA (residue 24), then the rest
    assert full.residues[1].tolist() == _encode("EAYKKAKQASQDAEQAAKDAEQG-KEAEEAAKEAVNLK")
    assert not any("1psm-x1_A" in w for w in built.warnings)


def test_two_ways_to_leave_out_an_x_is_a_near_miss(built: Built) -> None:
    """1psm-x2 (…NA XX EA…): the 37-residue query fits leaving out either X; not joined, and the
    warning names the file and says why."""
    chain = _chain(built.store, "1psm-x2")
    assert chain["sequence"] == built.seqs["1psm-x2"]
    assert (chain["msa_files"], chain["msa_depth"]) == (0, 1)
    # (the stage's line on every unmatched alignment names it too: review R27b s45 #1)
    (line,) = [w for w in built.warnings if "1psm-x2_A" in w and w.startswith("MSA near miss")]
    (unmatched,) = [w for w in built.warnings if "matched no polymer chain's sequence" in w]
    assert "1psm-x2_A/uniref90_hits.a3m (37 residues, " in unmatched, unmatched
    assert line.startswith(
        "MSA near miss: 1psm-x2_A/uniref90_hits.a3m: query does not match chain 1psm-x2/A: "
    )
    assert "(X at 24, 25) in more than one way; not joined" in line
    stage = built.summary.stages["msa"]
    assert stage["alignments joined (exact / by layout)"] == "0 / 1"
    assert stage["alignments unmatched (near misses)"] == "2 (2)"
