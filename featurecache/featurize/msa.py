"""MSA features: encode a3m rows, merge several files, deduplicate, cap the depth, profile.

All functions are pure. The build calls :func:`build_msa` once per unique sequence with every
alignment found for it, in the order :func:`source_order_key` gives; the result is an
:class:`~featurecache.types.EncodedMSA` ready for the store.

Conventions (as AlphaFold 2/3):

* residues in the 32-class ``const.RESTYPES`` vocabulary; letters outside the chain's alphabet
  become that alphabet's unknown (protein ``UNK``, RNA ``N``, DNA ``DN``); ``-`` is the gap (31);
* ``deletions[i, j]`` = number of insertions (lower case letters) in row ``i`` between match
  columns ``j-1`` and ``j``; insertions after the last column are dropped;
* duplicates are rows whose match columns are identical (insertions ignored), the first one in
  merge order is kept; the query is always row 0 and removes every hit identical to it; except
  that a pairing-source copy naming another species than its row's is a row of its own, once per
  (sequence, species) (see "Species of a stored row");
* ``profile`` (fraction of each class per column, gaps included) and ``deletion_mean`` (mean raw
  count per column) are taken over the distinct rows of the main MSA, before the depth cap: the
  query and the rows of every alignment but the UniProt ones (``const.UNPAIRED_EXCLUDED_SOURCES``),
  the rows a sample's unpaired block may hold (``client.assemble``), as AF3 computes them from the
  unpaired MSA alone (SI Table 5; its UniProt search feeds only the paired ``*_all_seq`` features).
  Protenix's ``pairing.a3m`` (and ColabFold's ``pair.a3m``) count there, since their rows are
  unpaired rows too (MSA stage 6; stages 2–5 left them out of the profile while the samples drew
  from them). UniProt rows are still stored, for pairing.
* ``species`` (for pairing chains by species, :func:`species_id`) of a stored row is read from its
  pairing-source copy (:data:`PAIRING_SOURCES`), not from the copy that is kept: see
  "Species of a stored row" below.

Species of a stored row. AF3 pairs the rows of its UniProt MSA by the species in their own headers
and does not deduplicate that MSA against the others (``pipeline.py``:
``Msa.from_multiple_msas([uniprot_msa], deduplicate=False)`` for the paired MSA; uniref90, small
BFD and MGnify, deduplicated, for the unpaired one); AF-Multimer likewise pairs only its
``uniprot_hits``. Here one row is stored per distinct sequence, at the place of its first copy in
merge order, so:

* when any of the sequence's alignments is a pairing source, a row's species is that of its first
  pairing-source copy (merge order: ``uniprot`` files, then ``pairing`` files, each by path, then
  row order) whose header gives one; a row with no such copy gets 0 and is never paired, even if a
  non-pairing header names a taxon (UniRef90 ``TaxID=`` is the cluster's common taxon, e.g.
  Catarrhini, and BFD / MGnify / ``non_pairing.a3m`` rows are not AF3's pairing rows). A further
  pairing copy of the sequence naming another species (an identical aligned sequence in another
  organism, common in jackhmmer ``uniprot_hits``: OpenFold 4zey_A has 774 species among its
  UniProt hits, 438 of them on a row of their own) is stored as a row of its own, with its own
  deletions and source, at its place in merge order, once per (sequence, species): AF3 keeps every
  copy in the MSA it pairs (``deduplicate=False``) and pairs the i-th row of each species per
  chain, so each organism's copy is a pairing candidate; copies of one species beyond the first
  are still dropped (AF3 would pair them too, as further rows of that species; the store keeps one
  row per sequence and species). A pairing hit identical to the query naming a species is such a
  row too (the query itself, row 0, has species 0; AF3 keeps that hit as well). Rows of non-pairing
  sources stay deduplicated as before;
* when none is (a layout without a pairing file, e.g. one merged a3m whose headers carry UniProt
  ids, or AF2's monomer layout without ``uniprot_hits``), nothing tells the pairing rows apart,
  and every row keeps the species of its first copy, as before; AF3 would pair nothing there.

The result depends only on the alignments and their order (merge order, fixed by
:func:`source_order_key`), not on the worker count.

Depth cap. ``depth_cap`` (``--msa-depth``) bounds the stored rows; ``n_distinct`` counts the rows
before it (distinct rows and further pairing rows), and a cap ``c`` stores ``min(n_distinct, c)``
rows. AF3 keeps its paired MSA apart from the unpaired one (up to 8,191 paired rows, placed first,
and the stacked MSA up to 16,384 rows), so a deep unpaired search never crowds out the pairing
rows. A store holds one merged MSA in which the pairing files come last in merge order, so a cap
taking the first ``c`` rows cut the pairing rows first (Protenix 7pzb at cap 1000: 17 rows with a
species of 6,001; review RF3 s25 #2). So, when the sequence has a pairing file, the rows with a
species (its pairing rows) get at least half the cap, ``max(c // 2, c - N)`` for ``N`` rows without
one, AF3's share at its defaults (8,191 of 16,384), and the rows without a species the rest (AF3
caps its paired block after pairing instead; a store's MSA of a sequence is written before its
partners are known, so a binding cap keeps its first species rows, some of species no partner has:
docs/build.md "MSAs", review R18 s40); each
kind keeps its first rows in merge order, and the kept rows stay in merge order (the query is
always row 0). A kind that needs less leaves the rest to the other, so a cap the MSA does not
reach keeps every row and a cap is still one number of rows. A sample's unpaired rows leave out
the UniProt rows (``const.UNPAIRED_EXCLUDED_SOURCES``), so under a binding cap a monomer
draws from fewer than ``c`` rows (OpenFold 4zey_A at cap 1000: 820). Without a pairing file the cap
keeps the first ``c`` rows, as before.
(:func:`capped_rows`.)

:func:`build_msa` encodes rows in chunks of about :data:`ENCODE_CHUNK_CELLS` cells (at most
:data:`ENCODE_CHUNK_ROWS` rows: :func:`encode_chunk_rows`), first to find the rows, their species and
the profile (keeping a 16-byte digest per distinct row and per further pairing row and three numbers
per row), then once more only for the rows the cap keeps, so its memory does not grow with the
number of input rows beyond those, nor its temporaries with the query's length.
"""

from __future__ import annotations

import hashlib
import logging
import re
from array import array
from collections.abc import Sequence
from pathlib import PurePath

import numpy as np

from featurecache.const import (
    DEFAULT_MSA_DEPTH_CAP,
    GAP,
    MSA_DNA_LETTERS,
    MSA_PROTEIN_LETTERS,
    MSA_RNA_LETTERS,
    NUM_RESTYPES,
    UNK_DNA,
    UNK_PROTEIN,
    UNK_RNA,
    UNPAIRED_EXCLUDED_SOURCES,
    MolType,
)
from featurecache.errors import MSAError
from featurecache.types import EncodedMSA, ParsedMSA

log = logging.getLogger(__name__)

#: Label of the query row in ``EncodedMSA.sources`` (always source 0).
QUERY_SOURCE = "query"
#: Most alignments one MSA can merge (``source`` is uint8 and 0 is the query).
MAX_SOURCES = 255
DELETION_MAX = np.iinfo(np.int16).max
#: Most rows encoded at a time by :func:`build_msa` (its memory does not grow with the input rows).
ENCODE_CHUNK_ROWS = 4096
#: Match cells encoded at a time by :func:`build_msa` (rows × query length): :func:`encode_rows`
#: makes ~35-40 bytes of temporaries per cell, so 4,096 rows of a 5,312-column MSA took ~750 MB
#: (review R32b s47 #2); 2**21 cells keep 4,096 rows up to 512 columns.
ENCODE_CHUNK_CELLS = 2**21

#: Database labels whose alignments give a stored row its species (AF3's UniProt search, Protenix's
#: ``pairing.a3m``, ColabFold's ``pair.a3m``: "Species of a stored row"). Of these only UniProt's
#: rows are left out of ``profile`` and ``deletion_mean`` (``const.UNPAIRED_EXCLUDED_SOURCES``).
PAIRING_SOURCES: frozenset[str] = frozenset({"uniprot", "pairing"})

#: Merge order of the files found for one sequence, by the database their name points to (AF2's
#: uniref90 → bfd → mgnify, then UniProt (pairing), then Protenix's split files, then anything
#: else); ties are broken by path.
MSA_SOURCE_ORDER: tuple[str, ...] = (
    "uniref90",
    "bfd",
    "uniref",
    "mgnify",
    "env",
    "uniprot",
    "non_pairing",
    "pairing",
    "other",
)
_SOURCE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("uniref90", re.compile(r"uniref90")),
    ("bfd", re.compile(r"bfd|uniclust|small_bfd")),
    ("mgnify", re.compile(r"mgnify|mgy")),
    ("uniref", re.compile(r"uniref")),
    ("env", re.compile(r"env|metaeuk|colabfold_envdb")),
    ("uniprot", re.compile(r"uniprot")),
    ("non_pairing", re.compile(r"non_?pair|unpaired")),
    # Protenix's pairing.a3m; ColabFold's pair.a3m (its paired search, ``<job>_pair*/pair.a3m``):
    # ``pair`` as a word of the name, not inside one (``repair``); unpaired / non_pair* are above
    ("pairing", re.compile(r"pairing|paired|(?<![a-z])pair(?![a-z])")),
)


def source_label(path: str) -> str:
    """Database label of an MSA file from its name (one of :data:`MSA_SOURCE_ORDER`)."""
    name = PurePath(path.split("#", 1)[0]).name.lower()
    for label, pattern in _SOURCE_PATTERNS:
        if pattern.search(name):
            return label
    return "other"


def source_order_key(path: str) -> tuple[int, str]:
    """Sort key that puts the files of one sequence in merge order."""
    return MSA_SOURCE_ORDER.index(source_label(path)), path


# --- species ------------------------------------------------------------------------------------

_OX = re.compile(r"\bOX=(\d+)")
_TAXID = re.compile(r"\bTaxID=(\d+)")
# Protenix / AF3 pairing headers: UniRef100_<accession>_<taxid>/, the accession of an isoform too
# (UniRef100_Q5M7Y0-3_7955/)
_ACC_TAXID = re.compile(
    r"^(?:UniRef\d+_)?(?:UPI[0-9A-F]{10}|[OPQ][0-9][A-Z0-9]{3}[0-9]|[A-NR-Z][0-9](?:[A-Z][A-Z0-9]{2}[0-9]){1,2})"
    r"(?:-\d+)?_(\d+)/"
)
# UniProt entry names: sp|P12345|NAME_HUMAN, tr|A0A024VQI0|A0A024VQI0_PLAFA, RepID=Q9NIG6_PLAFA
_MNEMONIC = re.compile(r"^(?:sp|tr)\|[^|]+\|[A-Z0-9]+_([A-Z0-9]{1,5})\b|\bRepID=[A-Z0-9]+_([A-Z0-9]{1,5})\b")
_B37 = {c: i + 1 for i, c in enumerate("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")}


def species_id(header: str) -> int:
    """Species of an MSA row from its header, for pairing chains by species later.

    ``> 0``: NCBI taxonomy id (UniProt ``OX=``, UniRef ``TaxID=``, ``<accession>_<taxid>/`` ids);
    ``< 0``: a UniProt species mnemonic (``_HUMAN``, ``_PLAFA``) encoded base 37 when no taxon id
    is given; ``0``: unknown (e.g. ColabFold/MMseqs2 headers carry only the accession).
    """
    for pattern in (_OX, _TAXID, _ACC_TAXID):
        m = pattern.search(header)
        if m:
            return min(int(m.group(1)), np.iinfo(np.int32).max)
    m = _MNEMONIC.search(header)
    if m:
        return -mnemonic_code(m.group(1) or m.group(2))
    return 0


def mnemonic_code(mnemonic: str) -> int:
    """Positive int (< 37**5) for a UniProt species mnemonic of at most 5 characters."""
    value = 0
    for c in mnemonic.upper()[:5]:
        value = value * 37 + _B37.get(c, 0)
    return value


# --- encoding -----------------------------------------------------------------------------------


def _lookup(letters: dict[str, int], unknown: int) -> np.ndarray:
    table = np.full(256, unknown, dtype=np.uint8)
    for c, v in letters.items():
        table[ord(c)] = v
    table[ord("-")] = GAP
    return table


_TABLES: dict[int, np.ndarray] = {
    MolType.PROTEIN: _lookup(MSA_PROTEIN_LETTERS, UNK_PROTEIN),
    MolType.RNA: _lookup(MSA_RNA_LETTERS, UNK_RNA),
    MolType.DNA: _lookup(MSA_DNA_LETTERS, UNK_DNA),
}
_A, _Z, _NL, _DOT = ord("a"), ord("z"), ord("\n"), ord(".")


def encode_rows(rows: Sequence[str], length: int, first_row: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Split a3m rows into match characters and deletion counts.

    Returns ``chars`` uint8 ``[n, length]`` (ASCII of the match columns, upper case / ``-``) and
    ``deletions`` int16 ``[n, length]``. Raises :class:`MSAError` if a row has a different number
    of match columns (naming it as row ``first_row + i``).
    """
    n = len(rows)
    if n == 0:
        return np.zeros((0, length), np.uint8), np.zeros((0, length), np.int16)
    try:
        buf = np.frombuffer(("\n".join(rows) + "\n").encode("ascii"), dtype=np.uint8)
    except UnicodeEncodeError as exc:
        raise MSAError(f"non-ASCII characters in MSA rows: {exc}") from exc
    is_lower = (buf >= _A) & (buf <= _Z)
    pos = np.flatnonzero(~is_lower & (buf != _DOT))  # match columns and row ends
    if pos.size != n * (length + 1) or not np.all(buf[pos].reshape(n, length + 1)[:, length] == _NL):
        for i, r in enumerate(rows):
            m = len(r) - sum(1 for c in r if c.islower() or c == ".")
            if m != length:
                raise MSAError(f"row {first_row + i} has {m} match columns, the query has {length}")
        raise MSAError("inconsistent MSA rows")
    # a running count of insertions; int32 holds any chunk's (build_msa: ~2**21 cells of text)
    cum = np.cumsum(is_lower, dtype=np.int32 if buf.size < 2**31 else np.int64)[pos]
    counts = np.diff(cum, prepend=0).reshape(n, length + 1)[:, :length]
    chars = buf[pos].reshape(n, length + 1)[:, :length]
    return chars, np.minimum(counts, DELETION_MAX).astype(np.int16)


def encode_chunk_rows(length: int, chunk_cells: int | None = None) -> int:
    """Rows of a ``length``-column MSA that :func:`build_msa` encodes at a time: ``chunk_cells``
    (default :data:`ENCODE_CHUNK_CELLS`) cells' worth, at least 1, at most :data:`ENCODE_CHUNK_ROWS`."""
    cells = ENCODE_CHUNK_CELLS if chunk_cells is None else chunk_cells
    return max(1, min(ENCODE_CHUNK_ROWS, cells // max(length, 1)))


def to_restypes(chars: np.ndarray, mol_type: int) -> np.ndarray:
    """Map upper case match characters (uint8 ASCII) to the 32-class vocabulary (uint8)."""
    try:
        table = _TABLES[int(mol_type)]
    except KeyError:
        raise MSAError(f"no MSA alphabet for molecule type {mol_type}") from None
    return table[chars]


def _class_counts(residues: np.ndarray) -> np.ndarray:
    """int64 ``[L * 32]``: rows of ``residues`` (uint8 ``[n, L]``) with each class at each column,
    flat (column-major in blocks of 32)."""
    length = residues.shape[1]
    cells = residues.astype(np.int64) + NUM_RESTYPES * np.arange(length, dtype=np.int64)[None, :]
    return np.bincount(cells.ravel(), minlength=length * NUM_RESTYPES)


# --- building one sequence's MSA ----------------------------------------------------------------


def build_msa(
    sequence: str,
    mol_type: int,
    alignments: Sequence[tuple[str, ParsedMSA]],
    depth_cap: int = DEFAULT_MSA_DEPTH_CAP,
    chunk_cells: int | None = None,
) -> EncodedMSA:
    """Merge ``(label, alignment)`` pairs (already in merge order) into one encoded MSA.

    Every alignment must be rooted at ``sequence`` (its row 0 is the query, gap-free). Row 0 of
    the result is the query itself; the other rows follow the alignments' order, duplicates and
    hits identical to the query removed (but one row per further species of a pairing-source copy,
    module docstring), truncated to ``depth_cap`` rows. ``profile`` and
    ``deletion_mean`` cover the distinct rows of the query and of the alignments whose
    :func:`source_label` (read from ``label``, a path) is not in ``const.UNPAIRED_EXCLUDED_SOURCES``.
    ``species``: from the pairing-source copies of each row when any alignment is a pairing
    source, else from each row's first copy (module docstring). ``chunk_cells``: cells encoded at a
    time (:func:`encode_chunk_rows`); the result does not depend on it.
    """
    sequence = sequence.upper()
    length = len(sequence)
    if length == 0:
        raise MSAError("empty query sequence")
    if depth_cap < 1:
        raise MSAError(f"depth cap must be at least 1, got {depth_cap}")
    if len(alignments) >= MAX_SOURCES:
        raise MSAError(f"{len(alignments)} alignments for one sequence; at most {MAX_SOURCES - 1}")
    # species from pairing-source copies only, when there is one (module docstring)
    pairing_given = any(msa.depth > 0 and source_label(label) in PAIRING_SOURCES for label, msa in alignments)
    acc = _Accumulator(length, mol_type, depth_cap, pairing_only_species=pairing_given)
    chunk = encode_chunk_rows(length, chunk_cells)
    q_chars, q_del = encode_rows([sequence], length)
    acc.add(q_chars, q_del, (), 0, in_profile=True)
    labels = [QUERY_SOURCE]
    rows_of: dict[int, Sequence[str]] = {0: (sequence,)}
    n_input = 0
    for k, (label, msa) in enumerate(alignments, start=1):
        if msa.depth == 0:
            continue
        main = source_label(label) not in UNPAIRED_EXCLUDED_SOURCES
        pairing = source_label(label) in PAIRING_SOURCES
        if msa.rows[0] != sequence:
            raise MSAError(
                f"{label}: the alignment's query ({msa.query_sequence[:30]}…, {len(msa.query_sequence)} aa) "
                f"is not the chain sequence ({sequence[:30]}…, {length})",
                path=msa.path or label,
                stage="msa",
            )
        for start in range(0, msa.depth, chunk):
            stop = min(start + chunk, msa.depth)
            try:
                chars, dels = encode_rows(msa.rows[start:stop], length, first_row=start)
            except MSAError as exc:
                raise MSAError(f"{label}: {exc}", path=msa.path or label, stage="msa") from exc
            headers = msa.headers[start:stop]
            if start == 0 and headers:  # row 0 is the alignment's query, not a hit of some species
                headers = ("", *headers[1:])
            acc.add(chars, dels, headers, k, in_profile=main, pairing=pairing, first_row=start)
        labels.append(label)
        rows_of[k] = msa.rows
        n_input += msa.depth
    return acc.finish(sequence, tuple(labels), n_input, rows_of, chunk)


def capped_rows(species: np.ndarray, pairing_rows: bool, depth_cap: int) -> np.ndarray:
    """Which of an MSA's rows before the cap (``species`` int [n], row 0 the query) the cap keeps,
    int64 ascending: all when ``n <= depth_cap``; else, with ``pairing_rows`` (a pairing source
    gave the species), the first ``p`` rows with a species and the first ``depth_cap - p`` without,
    ``p = min(P, max(depth_cap // 2, depth_cap - N))`` for ``P`` rows with a species and ``N``
    without (module docstring, "Depth cap"); without, the first ``depth_cap`` rows."""
    n = species.size
    if n <= depth_cap:
        return np.arange(n, dtype=np.int64)
    if not pairing_rows:
        return np.arange(depth_cap, dtype=np.int64)
    paired = np.flatnonzero(species != 0)
    other = np.flatnonzero(species == 0)
    p = min(paired.size, max(depth_cap // 2, depth_cap - other.size))
    return np.sort(np.concatenate([paired[:p], other[: depth_cap - p]])).astype(np.int64)


class _Accumulator:
    """Rows of one MSA, fed in chunks in merge order.

    The rows (before the cap) are the distinct rows by match columns, each at the place of its
    first copy (whatever its source), plus, with ``pairing_only_species``, one more row for each
    further (sequence, species) of a pairing copy (module docstring, "Species of a stored row").
    For each it records where its copy is (alignment, row) and its species; :meth:`finish` keeps
    those :func:`capped_rows` selects and encodes them again from the alignments. Over the distinct
    rows of the main MSA (rows added ``in_profile``) it sums the class counts per column and the
    deletions that the profile and the deletion mean are made of: a row is distinct once in the
    main MSA (a pairing row that a later main-MSA alignment holds too counts there), and a pairing
    row of a further species never counts there.

    Species: with ``pairing_only_species``, a distinct row's species is that of its first copy added
    with ``pairing`` whose header gives one (0 if none does), whichever copy was kept, and a later
    pairing copy naming another species is a row of its own (its own deletions and source), once
    per (sequence, species); the query keeps 0, a pairing hit identical to it naming a species is
    such a row. Without it, that of the kept (first) copy. Memory: a 16-byte digest and its row per
    distinct row, one per further (sequence, species), and three numbers per row before the cap,
    whatever the number of input rows; encoded rows only for the ``depth_cap`` kept ones.
    """

    def __init__(
        self, length: int, mol_type: int, depth_cap: int, pairing_only_species: bool = False
    ) -> None:
        self.length, self.mol_type, self.cap = length, int(mol_type), depth_cap
        self.pairing_only_species = pairing_only_species
        self.row_of: dict[bytes, int] = {}  # digest -> its distinct row (with pairing_only_species)
        self.first_species: dict[bytes, int] = {}  # digest -> species its distinct row took (query: 0)
        self.further: set[tuple[bytes, int]] = set()  # (digest, species) of the further pairing rows
        self.seen: dict[bytes, bool] = {}  # digest -> counted in the profile (seen in the main MSA)
        self.n_profile = 0
        self.counts = np.zeros(length * NUM_RESTYPES, np.int64)
        self.del_sum = np.zeros(length, np.int64)
        # every row before the cap: its alignment, its row there, its species
        self.src = array("B")
        self.at = array("q")
        self.sp = array("i")

    def add(
        self,
        chars: np.ndarray,
        dels: np.ndarray,
        headers: Sequence[str],
        source: int,
        in_profile: bool,
        pairing: bool = False,
        first_row: int = 0,
    ) -> None:
        """Add encoded rows ``chars`` uint8 [n, L], ``dels`` int16 [n, L] (``headers``: n, or empty
        for the query, whose species is 0), rows ``first_row …`` of alignment ``source``;
        ``in_profile``: the alignment is part of the main MSA (not a pairing-only one); ``pairing``:
        it is a pairing source (its rows' species are the ones kept under ``pairing_only_species``)."""
        n, length = chars.shape
        if n == 0:
            return
        flat = np.ascontiguousarray(chars).tobytes()
        counted = np.zeros(n, bool)
        by_pairing = pairing and bool(headers) and self.pairing_only_species
        for i in range(n):
            d = hashlib.blake2b(flat[i * length : (i + 1) * length], digest_size=16).digest()
            in_main = self.seen.get(d)
            if in_main is None:  # a new distinct row
                if self.pairing_only_species:
                    self.row_of[d] = len(self.sp)
                    if source == 0:
                        self.first_species[d] = 0  # the query is never paired
                    sp_new = 0
                else:
                    sp_new = species_id(headers[i]) if headers else 0
                self.src.append(source)
                self.at.append(first_row + i)
                self.sp.append(sp_new)
            if by_pairing:
                sp = species_id(headers[i])
                if sp != 0:
                    first = self.first_species.get(d)
                    if first is None:  # its distinct row takes its first pairing species
                        self.first_species[d] = sp
                        self.sp[self.row_of[d]] = sp
                    elif first != sp and (d, sp) not in self.further:  # another organism's copy
                        self.further.add((d, sp))
                        self.src.append(source)
                        self.at.append(first_row + i)
                        self.sp.append(sp)
            if in_profile and not in_main:
                counted[i] = True
            if in_main is None or counted[i]:
                self.seen[d] = bool(in_main) or in_profile
        cnt = np.flatnonzero(counted)
        if cnt.size:
            self.counts += _class_counts(to_restypes(chars[cnt], self.mol_type))
            self.del_sum += dels[cnt].sum(axis=0, dtype=np.int64)
            self.n_profile += int(cnt.size)

    def finish(
        self,
        sequence: str,
        labels: tuple[str, ...],
        n_input: int,
        rows_of: dict[int, Sequence[str]],
        chunk_rows: int,
    ) -> EncodedMSA:
        """The MSA of the rows :func:`capped_rows` keeps, encoded again from ``rows_of`` (alignment
        → its rows, 0 the query), ``chunk_rows`` rows at a time."""
        n = len(self.sp)
        m = self.n_profile  # >= 1: the query is always in the main MSA
        counts = self.counts.reshape(self.length, NUM_RESTYPES)
        species_all = np.frombuffer(self.sp, np.int32) if n else np.zeros(0, np.int32)
        keep = capped_rows(species_all, self.pairing_only_species, self.cap)
        src = np.frombuffer(self.src, np.uint8)[keep]
        at = np.frombuffer(self.at, np.int64)[keep]
        residues = np.empty((keep.size, self.length), np.uint8)
        deletions = np.empty((keep.size, self.length), np.int16)
        for k in np.unique(src).tolist():
            pos = np.flatnonzero(src == k)
            rows = rows_of[k]
            for start in range(0, pos.size, chunk_rows):
                chunk = pos[start : start + chunk_rows]
                chars, dels = encode_rows([rows[i] for i in at[chunk].tolist()], self.length)
                residues[chunk] = to_restypes(chars, self.mol_type)
                deletions[chunk] = dels
        return EncodedMSA(
            sequence=sequence,
            mol_type=self.mol_type,
            residues=residues,
            deletions=deletions,
            species=species_all[keep].copy(),
            source=src.copy(),
            profile=(counts / m).astype(np.float32),
            deletion_mean=(self.del_sum.astype(np.float64) / m).astype(np.float32),
            sources=labels,
            n_input_rows=n_input,
            n_distinct=n,
        )


# --- queries that differ from the chain only at unknown residues ------------------------------------


def compatible_query(query: str, sequence: str, unknown: str = "XN") -> bool:
    """Same length and every difference has an unknown residue on one side: ``unknown`` holds the
    chain type's letters for one (``X`` for a protein, ``N`` for RNA / DNA: in a protein ``N`` is
    Asn, which must match; the default, both, is for callers that do not know the chain's type).

    Alignment tools write ``X`` for modified residues that the structure maps to their parent
    (``MVA`` → ``V``); such a file, when its layout names the chain, is still that chain's MSA.
    """
    if len(query) != len(sequence) or not query:
        return False
    letters = frozenset(unknown)
    return all(a == b or a in letters or b in letters for a, b in zip(query, sequence, strict=True))


def adopt_query(msa: ParsedMSA, sequence: str, unknown: str = "XN") -> ParsedMSA:
    """``msa`` with its query row, and every row identical to it, replaced by ``sequence``.

    Only for a :func:`compatible_query`; the copies of the old query would otherwise survive
    deduplication as rows that differ from the query only by ``X``.
    """
    if not compatible_query(msa.query_sequence, sequence.upper(), unknown) or not msa.rows:
        raise MSAError(f"query {msa.query_sequence[:30]!r} is not compatible with {sequence[:30]!r}")
    old = msa.rows[0]
    new = sequence.upper()
    rows = tuple(new if r == old else r for r in msa.rows)
    return ParsedMSA(msa.headers, rows, msa.fmt, path=msa.path, block=msa.block)
