"""Vocabularies shared by the featurizer, the store and the client.

The residue vocabulary is AlphaFold 3's 32 classes (supplement §2.8, ``restype``): 20 amino acids
and UNK, RNA A/G/C/U, DNA DA/DG/DC/DT, unknown RNA ``N``, unknown DNA ``DN``, and the gap. The MSA
uses the same 32 classes, so a one-hot of either is ``[..., 32]``.
"""

from __future__ import annotations

import functools
from enum import IntEnum

PROTEIN_RESIDUES: tuple[str, ...] = (
    "ALA", "ARG", "ASN", "ASP", "CYS", "GLN", "GLU", "GLY", "HIS", "ILE",
    "LEU", "LYS", "MET", "PHE", "PRO", "SER", "THR", "TRP", "TYR", "VAL",
)  # fmt: skip
PROTEIN_ONE_LETTER = "ARNDCQEGHILKMFPSTWYV"
RNA_RESIDUES: tuple[str, ...] = ("A", "G", "C", "U")
DNA_RESIDUES: tuple[str, ...] = ("DA", "DG", "DC", "DT")

#: AF3 ``restype`` order: protein (20) + UNK, RNA (4), DNA (4), unknown RNA, unknown DNA, gap.
RESTYPES: tuple[str, ...] = (*PROTEIN_RESIDUES, "UNK", *RNA_RESIDUES, *DNA_RESIDUES, "N", "DN", "-")
NUM_RESTYPES = len(RESTYPES)  # 32
RESTYPE_INDEX: dict[str, int] = {name: i for i, name in enumerate(RESTYPES)}
UNK_PROTEIN = RESTYPE_INDEX["UNK"]  # 20; also the restype of ligand tokens (AF3)
UNK_RNA = RESTYPE_INDEX["N"]  # 29
UNK_DNA = RESTYPE_INDEX["DN"]  # 30
GAP = RESTYPE_INDEX["-"]  # 31

WATER_NAMES: frozenset[str] = frozenset(("HOH", "DOD", "WAT", "H2O", "OH2", "TIP", "TIP3", "SOL"))
HYDROGEN_ELEMENTS: frozenset[str] = frozenset(("H", "D", "T"))
#: AF3's crystallization aids (supplement §2.5.4, Table 9): removed from structures whose method is
#: X-ray diffraction before training ("Crystallization aids are removed if the mmCIF method
#: information indicates that X-ray crystallography was used"); ``build --keep-cryst-aids``
#: keeps them.
CRYSTALLIZATION_AIDS: frozenset[str] = frozenset(
    (
        "SO4",
        "GOL",
        "EDO",
        "PO4",
        "ACT",
        "PEG",
        "DMS",
        "TRS",
        "PGE",
        "PG4",
        "FMT",
        "EPE",
        "MPD",
        "MES",
        "CD",
        "IOD",
    )
)


class MolType(IntEnum):
    """Molecule type of a chain / token (AF3 ``is_protein``, ``is_rna``, ``is_dna``, ``is_ligand``)."""

    PROTEIN = 0
    RNA = 1
    DNA = 2
    LIGAND = 3


MOL_TYPE_NAMES: tuple[str, ...] = ("protein", "rna", "dna", "ligand")

#: Token centre atom per molecule type (AF3: Cα for amino acids, C1′ for nucleotides).
CENTRE_ATOM: dict[MolType, str] = {MolType.PROTEIN: "CA", MolType.RNA: "C1'", MolType.DNA: "C1'"}

#: Atoms that AF3 removes from standard residues as leaving atoms (terminal OXT, 5′ OP3).
LEAVING_ATOMS: frozenset[str] = frozenset(("OXT", "OP3"))

# --- MSA alphabet -------------------------------------------------------------------------------
# One-letter codes in alignments map into the same 32 classes. Lower case letters are insertions
# and never reach the encoder (they become deletion counts); "." is an a3m/sto insert gap.
MSA_PROTEIN_LETTERS: dict[str, int] = {c: i for i, c in enumerate(PROTEIN_ONE_LETTER)}
MSA_RNA_LETTERS: dict[str, int] = {"A": RESTYPE_INDEX["A"], "G": RESTYPE_INDEX["G"],
                                   "C": RESTYPE_INDEX["C"], "U": RESTYPE_INDEX["U"], "T": RESTYPE_INDEX["U"]}  # fmt: skip
MSA_DNA_LETTERS: dict[str, int] = {"A": RESTYPE_INDEX["DA"], "G": RESTYPE_INDEX["DG"],
                                   "C": RESTYPE_INDEX["DC"], "T": RESTYPE_INDEX["DT"], "U": RESTYPE_INDEX["DT"]}  # fmt: skip
#: Gap letters of an alignment row: "-" a gap in a match column, "." an insert-state gap.
MSA_GAP_LETTERS = "-."

#: Depth cap for stored MSAs (rows after deduplication; the query is always row 0).
DEFAULT_MSA_DEPTH_CAP = 16384

# --- Atom names ---------------------------------------------------------------------------------
ATOM_NAME_CHARS = 4  # AF3 ref_atom_name_chars: 4 characters, each ord(c) - 32 in [0, 64)


@functools.lru_cache(maxsize=65536)
def encode_atom_name(name: str) -> tuple[int, int, int, int]:
    """Encode an atom name as AF3 does: 4 characters, each ``ord(c) - 32``, space-padded."""
    padded = name.strip().upper()[:ATOM_NAME_CHARS].ljust(ATOM_NAME_CHARS)
    return tuple(max(0, min(63, ord(c) - 32)) for c in padded)  # type: ignore[return-value]


def decode_atom_name(codes: Sequence[int]) -> str:
    return "".join(chr(int(c) + 32) for c in codes).rstrip()


# Residue / component names (up to 5 characters in the CCD) use the same encoding, 5 wide.
RES_NAME_CHARS = 5


@functools.lru_cache(maxsize=65536)
def encode_res_name(name: str) -> tuple[int, ...]:
    padded = name.strip().upper()[:RES_NAME_CHARS].ljust(RES_NAME_CHARS)
    return tuple(max(0, min(63, ord(c) - 32)) for c in padded)


def decode_res_name(codes: Sequence[int]) -> str:
    return "".join(chr(int(c) + 32) for c in codes).rstrip()


from collections.abc import Sequence  # noqa: E402  (used in string annotations above)

# --- Versions -----------------------------------------------------------------------------------
#: Bumped when the on-disk layout changes incompatibly: a featurecache refuses a store of a newer
#: format than its own at once (``store.root.check_format``: "written by a newer featurecache"), so an
#: older one never reads parts it cannot decode as damage. "2": featurizer 0.7.0's token records
#: (``types.Token.centre_coords``, 12 bytes wider), which featurecache before 0.7.0 cannot decode
#: (review RF1 s27 #1). This code reads format-1 stores too (their parts are all of featurizer 0.6.0
#: or older); a build into one raises its root to 2 before it writes a part (``store.root.init_store``).
STORE_FORMAT_VERSION = 2
#: the store formats this code reads (and prune / verify --repair write, leaving the format as it is)
READABLE_STORE_FORMATS = (1, 2)
#: Recorded in the root and in each part (``info`` shows it); no reader gates on it (review R16 s40
#: #3: this comment said readers check it, and none did). What a reader refuses is a newer
#: :data:`STORE_FORMAT_VERSION` (``store.root.check_format``); how a part's records decode is its
#: arrays' ``record_dtype`` (``store.root.record_dtype``), which a change of names or dtypes changes.
SCHEMA_VERSION = 1
#: Bumped when any featurization rule changes; part of every entry key, so a bump rebuilds.
#: "0.7.0": tokens carry their centre atom's coordinates (``types.Token.centre_coords``), which the
#: client's crop reads instead of every atom record; parts of older versions lack the field and
#: are read as before (``store.root.record_dtype``). "0.8.0": an X-ray structure's crystallization aids
#: (:data:`CRYSTALLIZATION_AIDS`) are removed, as AF3 removes them (review R11 s39 #1; ``build
#: --keep-cryst-aids`` keeps them), and ``token_bonds`` leaves out the bonds inside a
#: polymer's modified residue, which are polymer–polymer (review R11 s39 #3). "0.9.0": altlocs and
#: microheterogeneity resolved as AF3's ``ResolveMmcifAltLocs`` (the residue of highest occupancy,
#: and an atom modelled only under another altloc letter kept), and polymer chains made only of
#: unknown residues (UNK, N, DN) removed, as AF3 removes them (review R20 #1-#3). "0.9.1": waters
#: among a PDB chain's ATOM records are read after its polymer (gemmi ended the polymer at the first
#: water, and every residue after it became a ligand chain: review R25a s43 #7). "0.10.0":
#: ``token_bonds`` holds the bonds inside a polymer's per-atom (modified / non-standard) residue or
#: cap, as AF3's released featuriser adds the CCD bond graph of every non-standard residue (review
#: R25d s43 #1, reversing 0.8.0's reading of R11 s39 #3); links between polymer residues stay out.
#: "0.11.0": an atom whose file states no formal charge (mmCIF ``?`` / ``.`` or no column, PDB
#: columns 79-80 blank) has its residue definition's, as an atom the file lacks has (resolved LYS NZ
#: +1, not gemmi's 0; 1GBT's Ca²⁺ +2), a charge the file states kept (review R40a s51 #1).
FEATURIZER_VERSION = "0.11.0"

#: The build's MSA stage (``build.msa_stage``), here so that readers without the build's
#: dependencies (the lookup image) can compare with it. Bumped when the MSA part layout or the merge rules change (part of every MSA's inputs key, so a
#: bump rebuilds every stored MSA). "2": profile and deletion_mean over the main MSA only (the
#: pairing-only alignments left out, featurize.msa.PAIRING_SOURCES). "3": a row's species is its
#: pairing-source copy's (0 without one) when the sequence has a pairing alignment, and isoform
#: accessions (``UniRef100_Q5M7Y0-3_7955/``) give their taxon (featurize.msa, "Species of a stored row").
#: "4": a pairing-source copy naming another species than its row's is a row of its own, once per
#: (sequence, species) (featurize.msa, review RF3 s25 #1); also the first stage that every build
#: records (6ee8ed5 came after "3"), so an MSA that records no stage is truly older. "5": the depth
#: cap keeps at least half its rows for the pairing rows (featurize.msa, "Depth cap"; review RF3 s25
#: #2) instead of the first rows in merge order, where the pairing files come last. "6": profile and
#: deletion_mean over the rows a sample's unpaired block may hold (:data:`UNPAIRED_EXCLUDED_SOURCES`
#: left out), so Protenix's ``pairing.a3m`` rows count there too (review R11 s39 #2: they were left
#: out of the profile while 88 % of 102m's sampled rows came from them).
MSA_STAGE_VERSION = "6"

#: database labels (``featurize.msa.source_label``) whose rows serve species pairing alone: AF3's
#: UniProt search. A sample's unpaired rows leave them out (``client.assemble``), and so do an MSA's
#: ``profile`` and ``deletion_mean``, which describe exactly the rows the unpaired block draws from
#: (``featurize.msa``). Not Protenix's ``pairing.a3m`` nor ColabFold's ``pair.a3m``, which Protenix
#: uses as unpaired MSA too (``client.assemble``'s module docstring).
UNPAIRED_EXCLUDED_SOURCES: frozenset[str] = frozenset({"uniprot"})
