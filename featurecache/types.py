"""Numpy structured dtypes for the per-entry tables, and the frozen containers that carry them.

Ragged data is stored flat with start/count columns (``Token.atom_start``/``atom_count``), which is
what the Zarr store wants: every field becomes one flat array in a part (see ``store/layout.py``).
All indices inside an entry (``token_index``, ``centre_atom``, bond endpoints) are entry-local.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: One row per atom (heavy atoms only). Every residue whose component is defined (standard residues
#: always, per-atom residues with ``--ccd``) carries its full CCD heavy-atom set, with
#: ``is_present = False`` for atoms absent from the file, less the leaving atoms AF3 drops
#: (``get_link_drop_atoms``: OXT inside a protein chain, OP3 inside an RNA / DNA chain, O1 of a
#: glycan unless O1 is bonded); a chain's terminal residue keeps its OXT / OP3.
Atom = np.dtype(
    [
        ("coords", np.float32, (3,)),  # Å, model frame; 0 where not present
        ("is_present", np.bool_),  # resolved in the file
        ("element", np.uint8),  # atomic number
        # formal charge, per residue: the file's where it states any for the residue (an explicit 0
        # too; its other atoms 0), else the residue definition's, else 0
        ("charge", np.int8),
        ("name", np.uint8, (4,)),  # AF3 ref_atom_name_chars: ord(c) - 32
        ("token_index", np.int32),  # entry-local token of this atom
        ("ref_space_uid", np.int32),  # one id per residue (per chain, per residue number)
        ("occupancy", np.float32),
        ("b_factor", np.float32),  # pLDDT for predicted models
    ]
)

#: One row per token (AF3 tokenization: a standard residue, or one heavy atom of anything else).
Token = np.dtype(
    [
        ("restype", np.uint8),  # AF3 32-class vocabulary (const.RESTYPES)
        # 1-based number in the input chain (tokenize/af3.py): a polymer residue's entity-sequence
        # position, else its label_seq_id (gaps kept), else 1, 2, 3 … in file order; ligands 1, 2, 3 …
        ("residue_index", np.int32),
        ("asym_id", np.int32),  # chain (label_asym) number within the entry, 0-based
        ("entity_id", np.int32),  # entity number within the entry, 0-based
        ("sym_id", np.int32),  # copy number among chains of the same entity, 0-based
        ("mol_type", np.uint8),  # const.MolType
        ("res_name", np.uint8, (5,)),  # residue / CCD component code, ord(c) - 32
        ("is_standard", np.bool_),  # one-token standard residue (vs per-atom token)
        ("is_resolved", np.bool_),  # centre atom present in the file
        ("centre_atom", np.int32),  # entry-local atom index of Cα / C1′ / the atom
        ("atom_start", np.int32),
        ("atom_count", np.int32),
        # the centre atom's coords (Å; 0 where it is not present), so that a crop needs no atom
        # record (client/job.py); last, so a part written before it (featurizer < 0.7.0) holds
        # each record's other fields at the same offsets (store/root.py:record_dtype)
        ("centre_coords", np.float32, (3,)),
    ]
)

#: Covalent bonds AF3 marks in ``token_bonds``: polymer–ligand, ligand–ligand (incl. within a
#: ligand or per-atom-tokenized residue), from ``struct_conn`` and component connectivity.
Bond = np.dtype(
    [
        ("atom_i", np.int32),
        ("atom_j", np.int32),
        ("token_i", np.int32),
        ("token_j", np.int32),
        ("order", np.uint8),  # 1,2,3 ; 4 = aromatic ; 0 = unknown (struct_conn)
        ("source", np.uint8),  # BondSource
    ]
)

#: Chain pairs in contact (any heavy atoms within 5 Å): the AF3 interfaces.
Interface = np.dtype(
    [
        ("chain_i", np.int32),  # asym_id, chain_i < chain_j
        ("chain_j", np.int32),
        ("n_contacts", np.int32),  # heavy-atom pairs within the cutoff
        ("min_distance", np.float32),
    ]
)


class BondSource:
    STRUCT_CONN = 0
    COMPONENT = 1  # the CCD definition of the component
    PERCEIVED = 2  # inferred from coordinates


@dataclass(frozen=True)
class Chain:
    """One chain (label_asym) of an entry."""

    asym_id: int
    label_id: str
    auth_id: str
    entity_id: int
    sym_id: int
    mol_type: int
    sequence: str  # one-letter (protein X for unknown, RNA/DNA letters), ligands: CCD codes joined by ' '
    sequence_hash: str  # = MSA key for polymer chains
    token_start: int
    token_count: int
    n_resolved: int  # resolved tokens


@dataclass(frozen=True)
class EntryMeta:
    resolution: float  # Å, NaN when not stated
    release_date: str  # ISO date, "" when not stated
    method: str  # e.g. "X-RAY DIFFRACTION"; "" when not stated
    structure_id: str  # the id the file states (may differ from the entry id)
    n_models: int  # models in the file (only the first is used)


@dataclass(frozen=True)
class Structure:
    """A parsed, tokenized entry before it is written: what ``featurize`` returns."""

    entry_id: str
    atoms: np.ndarray  # Atom[n_atoms]
    tokens: np.ndarray  # Token[n_tokens]
    bonds: np.ndarray  # Bond[n_bonds]
    interfaces: np.ndarray  # Interface[n_interfaces]
    chains: tuple[Chain, ...]
    meta: EntryMeta
    warnings: tuple[str, ...] = field(default=())  # the tokenizer's (kept atoms, named chains, …)
    parse_warnings: tuple[str, ...] = field(default=())  # the parser's (other data blocks, connections, …)


@dataclass(frozen=True)
class Entry:
    """One entry as read back from a store (or the service).

    ``atoms``/``tokens``/``bonds``/``interfaces`` map field name → array (``coords`` is float32
    ``[n_atoms, 3]``, ``name`` uint8 ``[n_atoms, 4]``, …; dtypes as in :data:`Atom` etc.).
    A reader asked for a subset of arrays leaves the others out of the mappings.
    """

    id: str
    atoms: dict[str, np.ndarray]
    tokens: dict[str, np.ndarray]
    bonds: dict[str, np.ndarray]
    interfaces: dict[str, np.ndarray]
    meta: dict[str, Any]
    chains: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return int(self.meta["token_count"])

    @property
    def n_atoms(self) -> int:
        return int(self.meta["atom_count"])


def empty(dtype: np.dtype, n: int = 0) -> np.ndarray:
    return np.zeros(n, dtype=dtype)


# --- MSAs -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedMSA:
    """One alignment as read from a file, in a3m form, before encoding.

    ``rows[0]`` is the query. Every row has the same number of match characters (upper case letters
    and ``-``); lower case letters are insertions relative to the query (deletion counts after
    encoding) and ``.`` is an insert-state gap. ``headers`` are the full header lines without ``>``.
    """

    headers: tuple[str, ...]
    rows: tuple[str, ...]
    fmt: str  # "a3m" | "sto"
    path: str = ""
    block: int = 0  # which alignment of a multi-query file (NUL-separated a3m, multi-alignment sto)

    @property
    def depth(self) -> int:
        return len(self.rows)

    @property
    def query_sequence(self) -> str:
        """The query's residues, upper case, no gaps."""
        return self.rows[0].replace("-", "").replace(".", "").upper() if self.rows else ""


@dataclass(frozen=True)
class EncodedMSA:
    """One sequence's merged, deduplicated, depth-capped MSA as the build writes it.

    ``residues`` uint8 ``[depth, L]`` (const.RESTYPES classes, gap 31), ``deletions`` int16
    ``[depth, L]`` (insertions before each column), ``species`` int32 ``[depth]`` (> 0 NCBI taxon,
    < 0 UniProt species mnemonic code, 0 unknown), ``source`` uint8 ``[depth]`` (index into
    ``sources``), ``profile`` float32 ``[L, 32]`` and ``deletion_mean`` float32 ``[L]`` computed over
    the distinct rows of the main MSA (pairing-only sources left out: featurize.msa.PAIRING_SOURCES)
    before the depth cap. Row 0 is the query.
    """

    sequence: str
    mol_type: int
    residues: np.ndarray
    deletions: np.ndarray
    species: np.ndarray
    source: np.ndarray
    profile: np.ndarray
    deletion_mean: np.ndarray
    sources: tuple[str, ...]  # one label per input alignment ("<path>" or "<path>#<block>")
    n_input_rows: int  # rows read from the files (incl. each file's query)
    n_distinct: int  # distinct rows before the depth cap

    @property
    def depth(self) -> int:
        return int(self.residues.shape[0])

    @property
    def length(self) -> int:
        return int(self.residues.shape[1])


@dataclass(frozen=True)
class MSABlock:
    """The rows × columns of one stored MSA that a reader was asked for (``store.msa``).

    ``residues`` uint8 ``[r, c]``, ``deletions`` int16 ``[r, c]``, ``species`` int32 ``[r]``,
    ``source`` uint8 ``[r]``, ``profile`` float32 ``[c, 32]``, ``deletion_mean`` float32 ``[c]``.
    ``depth`` and ``length`` describe the whole stored MSA, not the block.
    """

    key: str
    residues: np.ndarray
    deletions: np.ndarray
    species: np.ndarray
    source: np.ndarray
    profile: np.ndarray
    deletion_mean: np.ndarray
    depth: int
    length: int
