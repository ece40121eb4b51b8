"""Per-step assembly: a cropped entry → one sample (numpy), and samples → one padded batch (torch).

A *sample* is a dict of compact numpy arrays (small integer dtypes, MSA deletions as counts, token
bonds as index pairs) so that it is cheap to send between processes; :func:`collate` pads a list
of samples to the largest one and produces the tensors of
:data:`featurecache.client.schema.BATCH_SCHEMA` (int64 classes, float features, dense masks).
Nothing is one-hot encoded here: the model embeds the integer classes after the crop.

Sample arrays (N kept tokens, A their atoms, M MSA rows, K bonded token pairs):

=====================  ============  =========================================================
``restype``            uint8 [N]     const.RESTYPES
``residue_index``      int32 [N]
``asym_id`` …          int32 [N]     ``entity_id``, ``sym_id`` likewise; ``mol_type`` uint8
``token_index``        int64 [N]     token index in the uncropped entry
``centre_coords``      float32 [N,3] ground-truth centre atom; ``centre_mask`` bool [N]
``rep_coords``         float32 [N,3] ground-truth representative atom; ``rep_mask`` bool [N]
``token_bond_pairs``   int32 [K,2]   crop-local token pairs with a covalent bond (i < j)
``msa``                uint8 [M,N]   row 0 is the query; ``msa_mask`` bool [M,N]
``msa_deletions``      int16 [M,N]   deletion counts (→ ``has_deletion``, ``deletion_value``)
``profile``            float32 [N,32] over the whole stored MSA; ``deletion_mean`` float32 [N]
``atom_to_token``      int32 [A]     crop-local token of each atom
``atom_present``       bool [A];     ``atom_coords`` float32 [A,3]
``ref_pos``            float32 [A,3] reference conformer, randomly rotated + translated per uid
``ref_mask``           bool [A];     ``ref_element`` uint8, ``ref_charge`` int8 [A]
``ref_atom_name_chars`` uint8 [A,4]; ``ref_space_uid`` int32 [A] (renumbered 0.. per sample)
=====================  ============  =========================================================

plus metadata: ``entry_id`` (str), ``crop_method`` (str), ``crop_centre`` (int, -1 if none: the
centre token of a spatial crop as an index into the *uncropped* entry's tokens, as ``token_index``
counts them; the crop-local one is where ``token_index == crop_centre``).

Reference features (AF3 supplement Table 5): ``ref_pos``, ``ref_mask``, ``ref_element`` and
``ref_charge`` are the reference conformer's (the CCD component's atom: ``_chem_comp_atom.charge``
and ``type_symbol``), not the structure file's: a charge a file states (rare: wwPDB files write
``?``) can differ from the definition's, and AF3 takes the conformer's. An atom without a reference
(its component has no reference conformer in the store's table, or the atom name is not in the
component's definition), and every atom when the source has no component table, keeps the
entry's own element and charge (the parser's: the file's stated formal charge, else its
residue definition's, else 0: featurizer 0.11.0, review R40a s51)
with ``ref_mask`` False. With ``augment_ref`` each residue's conformer is centred on the centroid
of all its atoms with a reference (``ref_mask``) — the whole residue's also where the crop cut it,
as AF3 centres the conformer before cropping — then rotated and translated (:func:`augment_reference`).

Token centre and representative atoms. ``centre_coords`` is the token's centre atom (Cα, C1′,
the atom itself: what the croppers measure distances between). ``rep_coords`` is AF3's
representative atom for the distogram (supplement §4.4): Cβ of an amino acid (Cα of glycine;
``UNK`` has a Cβ), C4 of a purine (A, G, DA, DG), C2 of a pyrimidine (C, U, DC, DT), the atom
itself for a per-atom token (ligands, modified residues). ``rep_mask`` is False where that atom is
not resolved in the file, or not among the token's atoms at all (a residue without a CCD
definition is kept as its centre atom alone); ``rep_coords`` is then 0.

MSA rows (AF3 supplement §2.3). Protein chains of different sequences are *paired* by species:
rows of their MSAs from the same species (``MSABlock.species``, read from the alignment headers at
build time: UniProt ``OX=``, UniRef ``TaxID=``, ``<accession>_<taxid>/`` ids, species mnemonics)
share a row of the sample (:func:`species_pairs`, as AF3 matches them: the i-th row of a species
in each MSA in stored order, up to the fewest any of them has and at most 600; paired rows shared
by more MSAs first, then by the product of their row indices), and a chain whose MSA lacks the
species is gap there (``msa_mask`` False). AF-Multimer instead pairs a species' rows by their
rank in similarity to the query and skips a species with over 600 rows in some MSA; AF3 does
neither. (AF3's ``_align_species`` documents stored order; its code groups rows by species with
numpy's default, unstable ``argsort``, so its order within a species is in practice
implementation-defined. Here it is stored order, deterministically; a UniProt row whose sequence
another file of the chain holds too is stored, so ranked, at that file's place: review R18 s40.)

Which rows a sample holds (:func:`msa_row_plan`). The rows form one *stacked* MSA: the query,
the paired block (``P`` rows), then the merged unpaired block (``U`` rows), as AF3 builds it:
AF3 merges the chains' unpaired MSAs by padding each to the deepest one's depth ``U`` and setting
them side by side (``merging_features.merge_msa_features``), so its merged row ``j`` is every
chain's ``j``-th unpaired row (stored order, paired rows left out), a whole row spanning all
chains, as a paired row is. A chain's unpaired rows never include a *pairing-only* row: a row
whose ``source`` (``rows.source``, a number into the ``sources`` of the MSA index) is a UniProt
search (``featurize.msa.source_label`` ``uniprot``, :data:`UNPAIRED_EXCLUDED_SOURCES`). Protenix's
``pairing.a3m`` rows stay eligible: Protenix's own data configuration uses its pairing file as
unpaired MSA too (``prot_non_pairing_dbs: ["pairing-non_pairing"]``, "both pairing and
non_pairing are used as non_pairing, with pairing used first"; a store's further per-species
copies of a ``pairing.a3m`` row are then drawn as duplicates, a few rows in the Protenix MSAs
here). AF3 searches UniProt for pairing alone: its unpaired MSA is UniRef90 +
small BFD + MGnify, deduplicated (``alphafold3/data/pipeline.py``:
``Msa.from_multiple_msas([uniref90, small_bfd, mgnify], deduplicate=True)``), its UniProt MSA
(``from_multiple_msas([uniprot], deduplicate=False)``) is only paired, and a monomer or homomer,
which is not paired, does not use it at all. A stored MSA keeps a pairing-source copy once per
(sequence, species) for pairing (``featurize.msa``), so drawing unpaired rows from every stored row
drew exact duplicates (OpenFold 4zey_A: 458 of its 1,570 non-query rows). A stored row's
``source`` is its first copy's in merge order, which puts ``uniprot`` after the UniRef90, BFD,
MGnify and env files and ``pairing`` after ``non_pairing``: a row that one of those files also
holds keeps its source and stays unpaired-eligible, and pairing still draws on every row with a
species id. (A file merged after ``uniprot``, ``non_pairing.a3m`` or one labelled ``other``, loses
to it the rows both hold: they count as pairing-only here.) An MSA without a
pairing-source file, and a reader whose ``msas`` table does not list the MSA's ``sources``, keep
every row eligible; where the pairing-only rows are all an MSA has, its chain's unpaired rows are
the query's alone (AF3 likewise). ``pair_msa=False`` leaves them out all the same.
``D = 1 + P + U`` (the deepest chain's eligible rows when nothing is paired). The
number of rows ``n`` is drawn uniformly from ``1 … min(D, max_msa_rows)`` (Protenix's
``sample_msa``: ``k`` uniform in ``[1, n]``; AF3's released network truncates its shuffled MSA to
a fixed ``num_msa`` instead); row 0 is the query and the other ``n - 1`` rows are a uniform random
subset, without replacement, of the stacked MSA's ``D - 1`` non-query rows, kept in stacked order
(paired rows first). That is AF3's draw (``featurization.shuffle_msa`` samples uniformly over all
rows of the stacked MSA, then ``truncate_msa_batch``; Protenix likewise takes a uniform subset of
all rows): neither block is preferred, so a sample's share of paired rows is, on average, the
stacked MSA's (``P / (D - 1)``). (Before session 25 the paired block filled the budget first, so a
heteromer with many paired rows got few or no unpaired rows.) AF3's MSA module gives rows no
position, so stacked order instead of AF3's shuffled order changes nothing there.
A chain whose unpaired rows end before a drawn merged row ``j`` is gap there.
Unpaired row ``r`` of two different chains is in general from two organisms; copies of one
sequence (a homomer, or within a heteromer) carry the same MSA row in every row of the sample,
paired and unpaired. Nothing is paired in a monomer or a homomer (one protein sequence), nor for RNA / DNA chains
(as in AF3), nor rows without a species id (ColabFold / MMseqs2 headers carry none). A chain with
fewer rows is gap with ``msa_mask`` False where it has none. Each distinct MSA of the crop is read once
per sample (copies of one sequence share it): the union of its copies' rows and cropped columns.
The store keeps an MSA's residues in column strips of 64 columns over its full depth
(``store.msa.MSA_CHUNK``), so such a read decodes every row of the strips holding the cropped
columns, whichever rows were drawn (rows are drawn over the whole depth: a row range would save
little); only the selected rows and columns are kept. Also read: the column records of the
cropped columns, the row records of the selected rows' range and its deletion cells (all of the
MSA's when the range spans nearly all of it: ``store.msa.read_all_deletions``), and for a
heteromer the species ids of each protein MSA's rows (cached per reader). A chain
without a stored MSA (no MSA given, or depth 1) gets the single-sequence MSA: its tokens'
``restype`` as the query, the one-hot of it as the profile, and no further rows.

Ligand tokens (``mol_type`` ligand) take AF3's MSA of a non-polymer chain
(``Msa.from_empty(query_sequence='-' * n)`` in ``features.MSA.compute_features``, paired and
unpaired alike): the gap in every row, the query included, with ``msa_mask`` True (AF3's mask is
1 wherever a row exists), no deletions, a profile one-hot at the gap and ``deletion_mean`` 0. Their
``restype`` stays UNK.

Deviation from AF3: AF3 pairs the rows of a separate UniProt search and takes the unpaired rows
from the other databases; a store holds one merged MSA per sequence (Protenix's ``pairing.a3m``
rows included), so pairing draws on every row with a species id (a UniRef90 row whose species
its UniProt copy gave too), and the unpaired block holds the rest but the pairing-only rows
(above). AF3 also removes from its unpaired MSA the sequences of its paired rows
(``deduplicate_unpaired_sequences``); here a paired row is left out of its chain's unpaired rows,
a row of the same residues from another file is not. AF3 also caps the paired block at 8,191
rows; here ``max_msa_rows`` caps the whole MSA.
AF3 pairs chain by chain, so two copies of one sequence count as two MSAs: a species found only
in those copies is paired there too (each copy the same row), and copies count again in the
"shared by more" order and the product; here pairing is over the distinct MSAs of the crop.
AF3's ``msa_mask`` is 1 on every row of every token; here the rows a polymer chain lacks (a
shorter MSA: merged unpaired rows past its depth, which AF3 pads with gaps; a species it does not
have; the single-sequence MSA below row 0) are masked off.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from featurecache.const import (
    ATOM_NAME_CHARS,
    DNA_RESIDUES,
    GAP,
    NUM_RESTYPES,
    PROTEIN_RESIDUES,
    RESTYPE_INDEX,
    RNA_RESIDUES,
    UNPAIRED_EXCLUDED_SOURCES,
    MolType,
    encode_atom_name,
)
from featurecache.errors import NotFound
from featurecache.types import Entry, MSABlock

log = logging.getLogger(__name__)

#: AF3 trains with up to 16,384 MSA rows; a CPU/host-memory friendly default for the client.
DEFAULT_MAX_MSA_ROWS = 1024
#: AF3's ``max_paired_sequence_per_species`` (``WholePdbPipeline.Config``, 600): at most this many
#: rows of one species are paired; the species' other rows stay unpaired (:func:`species_pairs`).
MAX_PAIRED_PER_SPECIES = 600
#: Standard deviation (Å) of the random translation applied to each reference conformer.
REF_TRANSLATION_STD = 1.0

#: ``(key, rows, cols) -> MSABlock``: a reader's ``msa`` method.
MSAFetch = Callable[[str, "np.ndarray | None", "np.ndarray | None"], MSABlock]
#: ``key -> (depth, length)`` of a stored MSA, or None when it is not stored.
MSAShape = Callable[[str], "tuple[int, int] | None"]
#: ``(atoms, tokens) -> dict`` with ``ref_pos`` float32 [A,3] and ``ref_mask`` bool [A], and
#: where it knows them ``ref_element`` (atomic number) and ``ref_charge`` [A] of the reference
#: conformer (``chem.reference.reference_features``).
RefFeatures = Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray]], Mapping[str, np.ndarray]]


def _representative_names() -> dict[str, str]:
    names = {res: "CB" for res in (*PROTEIN_RESIDUES, "UNK")}
    names["GLY"] = "CA"
    for res in (*RNA_RESIDUES, *DNA_RESIDUES):
        names[res] = "C4" if res.lstrip("D") in ("A", "G") else "C2"
    return names


#: AF3 distogram representative atom of a one-token standard residue (supplement §4.4), by its
#: ``restype``: Cβ (Cα for glycine), C4 for purines, C2 for pyrimidines. Per-atom tokens use
#: their own atom.
REPRESENTATIVE_ATOM: dict[str, str] = _representative_names()
_REP_NAME_CODES = np.zeros((NUM_RESTYPES, ATOM_NAME_CHARS), dtype=np.uint8)
_HAS_REP_NAME = np.zeros(NUM_RESTYPES, dtype=bool)
for _res, _atom in REPRESENTATIVE_ATOM.items():
    _REP_NAME_CODES[RESTYPE_INDEX[_res]] = encode_atom_name(_atom)
    _HAS_REP_NAME[RESTYPE_INDEX[_res]] = True


# -------------------------------------------------------------------------------------- atoms
def atom_indices(tokens: Mapping[str, np.ndarray], keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entry atom indices of the kept tokens (int64 [A], token order) and each one's crop token."""
    start = np.asarray(tokens["atom_start"], dtype=np.int64)[keep]
    count = np.asarray(tokens["atom_count"], dtype=np.int64)[keep]
    total = int(count.sum())
    owner = np.repeat(np.arange(keep.size, dtype=np.int64), count)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return start[owner] + offsets, owner


def representative_atoms(
    tokens: Mapping[str, np.ndarray],
    keep: np.ndarray,
    atom_names: np.ndarray,
    aidx: np.ndarray,
    owner: np.ndarray,
) -> np.ndarray:
    """Entry atom index of each kept token's representative atom (:data:`REPRESENTATIVE_ATOM`),
    int64 [N], -1 where a standard token has no atom of that name.

    ``keep`` int64 [N] kept tokens; ``atom_names`` uint8 [n_atoms, 4] the entry's encoded atom
    names; ``aidx`` / ``owner`` int64 [A]: :func:`atom_indices` of ``keep``.
    """
    n = keep.size
    restype = np.asarray(tokens["restype"], dtype=np.int64)[keep]
    standard = np.asarray(tokens["is_standard"], dtype=bool)[keep]
    out = np.where(standard, -1, np.asarray(tokens["centre_atom"], dtype=np.int64)[keep])
    if not aidx.size or not standard.any():
        return out
    want = _REP_NAME_CODES[restype]  # [N, 4]
    names = np.asarray(atom_names, dtype=np.uint8).reshape(-1, ATOM_NAME_CHARS)[aidx]  # [A, 4]
    hit = (standard & _HAS_REP_NAME[restype])[owner] & np.all(names == want[owner], axis=1)
    first = np.full(n, -1, dtype=np.int64)
    rows = np.flatnonzero(hit)[::-1]  # reversed: the first match of a token is written last
    first[owner[rows]] = aidx[rows]
    return np.where(standard, first, out)


def whole_residue_atoms(uid: np.ndarray, aidx: np.ndarray) -> np.ndarray | None:
    """Sorted entry atom indices (int64) of every residue (``ref_space_uid``) with an atom in
    ``aidx``, or None when the crop cut none of them (``aidx`` holds every atom of each).

    ``uid`` int [n_atoms] the entry's ``ref_space_uid``; ``aidx`` int64 [A] the kept atoms
    (distinct). The tokenizer numbers residues in atom order, so ``uid`` is sorted and two binary
    searches find a residue's atoms; an entry whose ``uid`` is not sorted takes a full ``isin``.
    """
    uid = np.asarray(uid)
    kept = np.unique(uid[aidx])
    if uid.size < 2 or bool(np.all(uid[1:] >= uid[:-1])):
        lo, hi = np.searchsorted(uid, kept, "left"), np.searchsorted(uid, kept, "right")
        count = hi - lo
        if int(count.sum()) == aidx.size:
            return None
        return np.repeat(lo, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    whole = np.flatnonzero(np.isin(uid, kept))
    return None if whole.size == aidx.size else whole


def crop_atom_ranges(tokens: Mapping[str, np.ndarray], keep: np.ndarray) -> np.ndarray:
    """The entry-local atom rows :func:`assemble_sample` reads of an entry cropped to ``keep``
    (sorted int64 kept tokens), as ``[start, stop)`` ranges int64 ``[R, 2]``, one per kept token
    or residue: the kept tokens' atoms (their centre and representative atoms are among them), and
    every atom of each per-atom residue the crop kept some tokens of (:func:`whole_residue_atoms`).

    From the token records alone: a per-atom residue is a run of non-standard tokens of one chain,
    residue number and residue name whose atoms follow one another (``tokenize.af3`` lays each
    residue's atoms out together); two residues that share all three are taken together (more
    rows, never fewer); :func:`residues_within` checks the rule on the rows read."""
    keep = np.asarray(keep, dtype=np.int64)
    if not keep.size:
        return np.zeros((0, 2), dtype=np.int64)
    std = np.asarray(tokens["is_standard"], dtype=bool)
    asym = np.asarray(tokens["asym_id"])
    resi = np.asarray(tokens["residue_index"])
    name = np.asarray(tokens["res_name"]).reshape(std.size, -1)
    same = ~std[1:] & ~std[:-1] & (asym[1:] == asym[:-1]) & (resi[1:] == resi[:-1])
    same &= np.all(name[1:] == name[:-1], axis=1)
    run = np.concatenate([[0], np.cumsum(~same)])  # ascending run id of each token
    runs = np.unique(run[keep])
    lo = np.searchsorted(run, runs, "left")
    hi = np.searchsorted(run, runs, "right") - 1
    start = np.asarray(tokens["atom_start"], dtype=np.int64)
    count = np.asarray(tokens["atom_count"], dtype=np.int64)
    return np.stack([start[lo], start[hi] + count[hi]], axis=1)


def residues_within(uid: np.ndarray, rows: np.ndarray, ranges: np.ndarray, n_atoms: int) -> bool:
    """Whether the atom ``ranges`` (entry-local ``[start, stop)``, :func:`crop_atom_ranges`) hold
    whole residues: no range starts or stops inside a residue (``ref_space_uid``), judged from the
    atoms ``rows`` read (sorted entry-local row numbers; ``uid`` their ``ref_space_uid``), which
    must hold the row before and the row after each range (where the entry has one). False means
    the ranges' rule (:func:`crop_atom_ranges`) missed atoms of a residue the crop cut."""
    uid = np.asarray(uid)
    a, b = ranges[:, 0], ranges[:, 1]
    inner = a > 0
    at = np.searchsorted(rows, a[inner])
    if np.any(uid[at] == uid[at - 1]):
        return False
    inner = b < n_atoms
    at = np.searchsorted(rows, b[inner])
    return not np.any(uid[at] == uid[at - 1])


def token_bond_pairs(bonds: Mapping[str, np.ndarray], keep: np.ndarray, n_tokens: int) -> np.ndarray:
    """Crop-local (i < j) token pairs joined by a bond whose both tokens were kept, int32 [K, 2]."""
    if not len(bonds.get("token_i", ())):
        return np.zeros((0, 2), dtype=np.int32)
    local = np.full(n_tokens, -1, dtype=np.int64)
    local[keep] = np.arange(keep.size)
    ti = local[np.asarray(bonds["token_i"], dtype=np.int64)]
    tj = local[np.asarray(bonds["token_j"], dtype=np.int64)]
    ok = (ti >= 0) & (tj >= 0) & (ti != tj)
    pairs = np.stack([np.minimum(ti[ok], tj[ok]), np.maximum(ti[ok], tj[ok])], axis=1)
    return np.unique(pairs, axis=0).astype(np.int32) if pairs.size else np.zeros((0, 2), dtype=np.int32)


def random_rotations(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` rotation matrices uniform over SO(3) (normalized Gaussian quaternions), float64 [n,3,3]."""
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q.T
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], axis=-1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], axis=-1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], axis=-1),
        ],
        axis=1,
    )


def reference_centres(ref_pos: np.ndarray, ref_mask: np.ndarray, uid: np.ndarray, n_uid: int) -> np.ndarray:
    """Centroid of the masked atoms of each ``ref_space_uid``, float64 [n_uid, 3] (0 for a uid
    with no masked atom).

    ``ref_pos`` float [A,3], ``ref_mask`` bool [A], ``uid`` int [A] (compact 0..n_uid-1).
    """
    w = ref_mask.astype(np.float64)
    count = np.bincount(uid, weights=w, minlength=n_uid)
    sums = np.stack([np.bincount(uid, weights=ref_pos[:, k] * w, minlength=n_uid) for k in range(3)], axis=1)
    return sums / np.maximum(count, 1.0)[:, None]


def augment_reference(
    ref_pos: np.ndarray,
    ref_mask: np.ndarray,
    uid: np.ndarray,
    rng: np.random.Generator,
    centre: np.ndarray | None = None,
) -> np.ndarray:
    """AF3 reference-conformer augmentation: per ``ref_space_uid``, centre the conformer, apply
    a uniform random rotation and a N(0, 1 Å²) translation. Masked-out atoms stay at 0.

    ``ref_pos`` float32 [A,3], ``ref_mask`` bool [A], ``uid`` int [A] (compact 0..U-1).
    ``centre`` float [U,3]: each uid's centre, by default the centroid of its masked atoms here;
    a caller given only some atoms of a residue passes the whole residue's (AF3 centres the whole
    conformer before cropping). It does not change what is drawn from ``rng``.
    """
    if ref_pos.shape[0] == 0:
        return ref_pos.astype(np.float32)
    n_uid = int(uid.max()) + 1
    rot = random_rotations(n_uid, rng)
    shift = rng.normal(scale=REF_TRANSLATION_STD, size=(n_uid, 3))
    if centre is None:
        centre = reference_centres(ref_pos, ref_mask, uid, n_uid)
    x = ref_pos.astype(np.float64) - np.asarray(centre, dtype=np.float64)[uid]
    out = np.einsum("aij,aj->ai", rot[uid], x) + shift[uid]
    return np.where(ref_mask[:, None], out, 0.0).astype(np.float32)


# ---------------------------------------------------------------------------------------- MSA
def sequence_positions(tokens: Mapping[str, np.ndarray]) -> np.ndarray:
    """0-based position of each token's residue in its chain's sequence, int64 [n_tokens].

    A chain's tokens are contiguous and in sequence order, one residue's tokens together; the
    position counts the residues before it in the chain (a change of ``residue_index``), so it is
    ``residue_index - 1`` for a chain numbered 1 … L and stays gap-free where the input chain's
    numbering has gaps (no entity sequence to fill them): the chain sequence the MSAs are matched
    against has one letter per residue of the chain.
    """
    asym = np.asarray(tokens["asym_id"], dtype=np.int64)
    resi = np.asarray(tokens["residue_index"], dtype=np.int64)
    if not asym.size:
        return np.zeros(0, np.int64)
    new_chain = np.r_[True, asym[1:] != asym[:-1]]
    new_res = new_chain | np.r_[True, resi[1:] != resi[:-1]]
    count = np.cumsum(new_res) - 1
    base = np.maximum.accumulate(np.where(new_chain, count, 0))
    return (count - base).astype(np.int64)


def _chain_msa_keys(chains: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    out: dict[int, str] = {}
    for ch in chains:
        key = ch.get("msa_key")
        if key and int(ch.get("mol_type", MolType.LIGAND)) != MolType.LIGAND:
            out[int(ch["asym_id"])] = str(key)
    return out


def msa_features(
    tokens: Mapping[str, np.ndarray],
    keep: np.ndarray,
    chains: Sequence[Mapping[str, Any]],
    fetch: MSAFetch | None,
    rng: np.random.Generator,
    max_msa_rows: int = DEFAULT_MAX_MSA_ROWS,
    msa_shape: MSAShape | None = None,
    pair_msa: bool = True,
) -> dict[str, np.ndarray]:
    """MSA features of the kept tokens (see the module docstring for the sampling rule).

    ``chains``: the entry's chain rows (``asym_id``, ``mol_type``, ``msa_key`` where an MSA is
    stored); ``fetch``: the reader's ``msa(key, rows, cols)``; ``msa_shape``: key → (depth,
    length) from the MSA index, None when not stored (without it, one row is read to learn it).
    MSA column of a polymer token = the position of its residue in the chain sequence
    (:func:`sequence_positions`; ``residue_index - 1`` when the chain numbers its residues 1 … L;
    the per-atom tokens of a modified residue all take that residue's column). A stored MSA of depth 1 (the query alone) equals the
    single-sequence MSA and is not read. ``pair_msa``: pair the protein chains' rows by species
    (the default; False: every chain's rows unpaired).
    """
    n = keep.size
    restype = np.asarray(tokens["restype"])[keep].astype(np.uint8)
    asym = np.asarray(tokens["asym_id"])[keep].astype(np.int64)
    keys = _chain_msa_keys(chains) if fetch is not None else {}
    resi = sequence_positions(tokens)[keep] + 1 if keys else np.zeros(n, np.int64)
    blocks: dict[int, tuple[str, np.ndarray, int]] = {}  # asym -> (key, token positions, depth)
    for c in np.unique(asym).tolist():
        key = keys.get(int(c))
        if key is None:
            continue
        shape = msa_shape(key) if msa_shape is not None else _shape_by_reading(fetch, key)  # type: ignore[arg-type]
        if shape is None:
            log.debug("MSA %s of chain %d not stored; single sequence", key, c)
            continue
        d, length = shape
        pos = np.flatnonzero(asym == c)
        cols = resi[pos] - 1
        if cols.min() < 0 or cols.max() >= length:
            log.warning("MSA %s has %d columns but chain %d has a residue at sequence position %d; single sequence",
                        key, length, c, int(cols.max()) + 1)  # fmt: skip
            continue
        if d <= 1:
            continue  # the query alone: identical to the single-sequence MSA, no read needed
        blocks[int(c)] = (key, pos, int(d))
    paired, species = _paired_species(blocks, chains, fetch) if pair_msa else ({}, {})
    pairs = _memo_pairs(fetch, species) if len(species) >= 2 else None
    unpaired = _unpaired_rows(blocks, fetch)
    plan = msa_row_plan(
        {c: b[2] for c, b in blocks.items()}, rng, max_msa_rows, paired, species, pairs, unpaired
    )
    n_rows = max([rows.size for rows in plan.values()], default=1)

    msa = np.full((n_rows, n), GAP, dtype=np.uint8)
    mask = np.zeros((n_rows, n), dtype=bool)
    dels = np.zeros((n_rows, n), dtype=np.int16)
    msa[0] = restype
    mask[0] = True
    profile = np.zeros((n, NUM_RESTYPES), dtype=np.float32)
    profile[np.arange(n), restype] = 1.0
    deletion_mean = np.zeros(n, dtype=np.float32)
    # ligand columns (AF3: an empty MSA whose query is all gaps): gap in every row, real rows
    ligand = np.asarray(tokens["mol_type"])[keep] == MolType.LIGAND
    msa[0, ligand] = GAP
    mask[:, ligand] = True
    profile[ligand] = 0.0
    profile[ligand, GAP] = 1.0
    # one read per distinct MSA: copies of one sequence (a homomer's chains) share the key, so
    # the union of their rows and columns is fetched once and scattered to each copy
    by_key: dict[str, list[int]] = {}
    for c in sorted(blocks):
        by_key.setdefault(blocks[c][0], []).append(c)
    for key, copies in by_key.items():
        ats = [np.flatnonzero(plan[c] >= 0) for c in copies]  # sample rows each copy fills (gap elsewhere)
        # the rows in plan order, each once (one copy, or copies given the same rows: its plan rows)
        wanted = np.concatenate([plan[c][at] for c, at in zip(copies, ats, strict=True)])
        _, first = np.unique(wanted, return_index=True)
        rows = wanted[np.sort(first)]
        by_row = np.argsort(rows, kind="stable")
        ucols = np.unique(np.concatenate([resi[blocks[c][1]] - 1 for c in copies]))
        blk = fetch(key, rows, ucols)  # type: ignore[misc]
        for c, at in zip(copies, ats, strict=True):
            pos = blocks[c][1]
            # this copy's rows / columns in the block
            r_in = by_row[np.searchsorted(rows[by_row], plan[c][at])]
            c_in = np.searchsorted(ucols, resi[pos] - 1)
            where = _cells(at, n_rows, pos)
            msa[where] = _block_cells(blk.residues, r_in, c_in)
            dels[where] = _block_cells(blk.deletions, r_in, c_in)
            mask[where] = True
            profile[pos] = blk.profile[c_in]
            deletion_mean[pos] = blk.deletion_mean[c_in]
    return {
        "msa": msa,
        "msa_mask": mask,
        "msa_deletions": dels,
        "profile": profile,
        "deletion_mean": deletion_mean,
    }


def _block_cells(a: np.ndarray, r_in: np.ndarray, c_in: np.ndarray) -> np.ndarray:
    """``a[np.ix_(r_in, c_in)]`` (``a`` [rows, cols] of an MSA block): no gather along an axis its
    indices take whole and in order (one chain per MSA key, the common case), a ``take`` along one
    that is not; ``np.ix_`` costs ~3× that (review R27d s45 #2)."""
    if not _is_identity(r_in, a.shape[0]):
        a = a.take(r_in, axis=0)
    if not _is_identity(c_in, a.shape[1]):
        a = a.take(c_in, axis=1)
    return a


def _cells(at: np.ndarray, n_rows: int, pos: np.ndarray) -> tuple[Any, ...]:
    """Where ``np.ix_(at, pos)`` points in an [n_rows, n] sample array, as slices where it can:
    ``at`` (increasing sample rows) all ``n_rows`` rows, ``pos`` (increasing token positions) one
    run (a chain's kept tokens always are); ``np.ix_`` only when neither is."""
    rows: slice | np.ndarray = slice(None) if at.size == n_rows else at
    cols: slice | np.ndarray = pos
    if pos.size and int(pos[-1]) - int(pos[0]) + 1 == pos.size:
        cols = slice(int(pos[0]), int(pos[-1]) + 1)
    if isinstance(rows, np.ndarray) and isinstance(cols, np.ndarray):
        return np.ix_(rows, cols)
    return rows, cols


def _is_identity(idx: np.ndarray, size: int) -> bool:
    return idx.size == size and bool((idx == np.arange(size)).all())


def _paired_species(
    blocks: Mapping[int, tuple[str, np.ndarray, int]],
    chains: Sequence[Mapping[str, Any]],
    fetch: MSAFetch | None,
) -> tuple[dict[int, str], dict[str, np.ndarray]]:
    """The protein chains to pair (chain → MSA key) and the species ids of their MSAs' rows (key →
    int32 [depth], stored row order); nothing when the cropped chains hold fewer than two different
    protein MSAs (a monomer or a homomer: nothing to pair). The species ids are one read of an
    MSA's row records, cached per reader (:func:`_msa_species`)."""
    protein = {
        int(ch["asym_id"]) for ch in chains if int(ch.get("mol_type", MolType.LIGAND)) == MolType.PROTEIN
    }
    keys = {c: blocks[c][0] for c in blocks if c in protein}
    if fetch is None or len(set(keys.values())) < 2:
        return {}, {}
    depth = {key: blocks[c][2] for c, key in keys.items()}
    return keys, {key: _msa_species(fetch, key, depth[key]) for key in depth}


#: reader → {MSA key → (species ids, sources) of its rows}, the most recent
#: :data:`_SPECIES_CACHE_SIZE` keys per reader (reading every row record of an MSA costs ~5 ms a
#: sample otherwise)
_species_cache: weakref.WeakKeyDictionary[Any, OrderedDict[str, tuple[np.ndarray, np.ndarray]]]
_species_cache = weakref.WeakKeyDictionary()
_species_lock = threading.Lock()
_SPECIES_CACHE_SIZE = 256


def _reset_species_lock() -> None:  # a forked DataLoader worker must not inherit a held lock
    global _species_lock
    _species_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_species_lock)


def _msa_species(fetch: MSAFetch, key: str, depth: int) -> np.ndarray:
    """Species id of every row of the stored MSA ``key`` (int32 [depth]), cached per reader (read
    again when the MSA's depth is no longer the cached one's: a store rebuilt under a service)."""
    return _msa_row_records(fetch, key, depth)[0]


def _msa_row_records(fetch: MSAFetch, key: str, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """(species id, source) of every row of the stored MSA ``key`` (int32 / uint8 [depth]): one
    read of its row records, cached per reader (:func:`_msa_species`)."""
    owner = getattr(fetch, "__self__", None)
    try:
        with _species_lock:
            cache = _species_cache.setdefault(owner, OrderedDict()) if owner is not None else None
            if cache is not None and key in cache and cache[key][0].size == depth:
                cache.move_to_end(key)
                return cache[key]
    except TypeError:  # a reader that cannot be weakly referenced: no cache
        cache = None
    block = fetch(key, None, np.zeros(0, np.int64))
    records = (np.asarray(block.species), np.asarray(block.source))
    if cache is not None:
        for a in records:
            a.flags.writeable = False  # shared by samples, and the identity the pairs memo checks
        with _species_lock:
            cache[key] = records
            while len(cache) > _SPECIES_CACHE_SIZE:
                cache.popitem(last=False)
    return records


#: reader → (its ``msas`` table, {MSA key → row of the table}, {MSA key → the source numbers of its
#: pairing-only alignments}): read from the table the reader has now (a refreshed service client's
#: new table is looked up afresh)
_pairing_sources: weakref.WeakKeyDictionary[Any, tuple[Any, dict[str, int], dict[str, np.ndarray]]] = (
    weakref.WeakKeyDictionary()
)


def _pairing_only_sources(fetch: MSAFetch | None, key: str) -> np.ndarray | None:
    """The ``rows.source`` numbers (1 …) of the stored MSA ``key``'s pairing-only alignments
    (``featurize.msa.source_label`` of the file in :data:`UNPAIRED_EXCLUDED_SOURCES`: a UniProt
    search), from the reader's ``msas`` index table (its ``sources``
    list, the build's own labels; a lookup service serves the same table); None when the reader
    has no such table or it does not list ``key`` (every row then stays unpaired-eligible)."""
    from featurecache.featurize.msa import source_label

    owner = getattr(fetch, "__self__", None)
    if owner is None:
        return None
    lookup = getattr(owner, "lookup_columns", None)  # a lookup client: the columns asked for, not the table
    try:
        table = lookup("msas") if callable(lookup) else owner.msas
    except (AttributeError, NotFound):
        return None
    if table is None or "key" not in table.column_names or "sources" not in table.column_names:
        return None
    try:
        with _species_lock:
            held = _pairing_sources.get(owner)
            if held is None or held[0] is not table:
                held = (table, {str(k): i for i, k in enumerate(table.column("key").to_pylist())}, {})
                _pairing_sources[owner] = held
    except TypeError:  # a reader that cannot be weakly referenced: looked up afresh, not kept
        held = (table, {str(k): i for i, k in enumerate(table.column("key").to_pylist())}, {})
    found = held[2].get(key)
    if found is not None:
        return found
    row = held[1].get(key)
    if row is None:
        return None
    sources = table.column("sources")[row].as_py() or []  # source i (1 …) of rows.source
    found = np.asarray(
        [i for i, path in enumerate(sources, 1) if source_label(path) in UNPAIRED_EXCLUDED_SOURCES], np.int64
    )
    found.flags.writeable = False
    with _species_lock:
        held[2][key] = found
    return found


def _unpaired_rows(
    blocks: Mapping[int, tuple[str, np.ndarray, int]], fetch: MSAFetch | None
) -> dict[int, np.ndarray]:
    """Chain → bool [depth]: the rows of its MSA that the unpaired block may hold (row 0, the
    query, included), for each chain whose MSA merges a pairing-only alignment: the rows whose
    ``source`` is not one (module docstring: AF3's unpaired MSA leaves UniProt out). A chain whose
    MSA has none, or whose reader does not say, is left out (every row stays eligible, unread)."""
    out: dict[int, np.ndarray] = {}
    for c, (key, _, depth) in blocks.items():
        pairing = _pairing_only_sources(fetch, key)
        if pairing is None or not pairing.size:
            continue
        source = _msa_row_records(fetch, key, depth)[1]  # type: ignore[arg-type]
        if source.size != depth:  # the index and the rows of two snapshots: leave the rows be
            log.debug(
                "MSA %s: %d row records for depth %d; every row unpaired-eligible", key, source.size, depth
            )
            continue
        keep = ~np.isin(source, pairing)
        keep[:1] = True  # the query (source 0) is never a pairing row
        out[c] = keep
    return out


#: reader → {sorted MSA keys → (their species arrays, :func:`species_pairs` of them)}, the most recent
#: :data:`_PAIRS_MEMO_SIZE` key sets per reader: pairing deep MSAs costs ~12 ms a sample (3 × 16k
#: rows), and a heteromer drawn again pairs the same rows
_pairs_memo: weakref.WeakKeyDictionary[
    Any, OrderedDict[tuple[str, ...], tuple[tuple[np.ndarray, ...], np.ndarray]]
]
_pairs_memo = weakref.WeakKeyDictionary()
_PAIRS_MEMO_SIZE = 16


def _memo_pairs(fetch: MSAFetch | None, species: Mapping[str, np.ndarray]) -> np.ndarray:
    """:func:`species_pairs` of ``species``' arrays in sorted key order (what :func:`msa_row_plan`
    pairs), memoized per reader. An entry serves only the very arrays it was computed from (the
    reader's cached, read-only species arrays, :func:`_msa_species`): once one of them was read
    again, the pairs are computed again."""
    keys = tuple(sorted(species))
    arrays = tuple(species[k] for k in keys)
    owner = getattr(fetch, "__self__", None)
    memo = None
    if owner is not None and not any(a.flags.writeable for a in arrays):
        try:
            with _species_lock:
                memo = _pairs_memo.setdefault(owner, OrderedDict())
                hit = memo.get(keys)
                if hit is not None and all(a is b for a, b in zip(hit[0], arrays, strict=True)):
                    memo.move_to_end(keys)
                    return hit[1]
        except TypeError:  # a reader that cannot be weakly referenced: no memo
            memo = None
    pairs = species_pairs(arrays)
    if memo is not None:
        pairs.flags.writeable = False
        with _species_lock:
            memo[keys] = (arrays, pairs)
            memo.move_to_end(keys)
            while len(memo) > _PAIRS_MEMO_SIZE:
                memo.popitem(last=False)
    return pairs


def species_pairs(species: Sequence[np.ndarray], max_per_species: int = MAX_PAIRED_PER_SPECIES) -> np.ndarray:
    """Rows of ``K`` MSAs of different sequences paired by species, as AF3 pairs them
    (``alphafold3/model/msa_pairing.py``: ``create_paired_features``, ``_align_species``).

    ``species[k]``: int [d_k] the species id of each row of MSA ``k`` (row 0 is the query; id 0 =
    unknown, never paired). For every species found in at least two of the MSAs, the i-th row of
    that species in each MSA that has it (rows in stored order) share a paired row, for i below
    ``min(max_per_species, the fewest rows of that species among those MSAs)``; the other MSAs
    have a gap there. Order (AF3's): paired rows shared by more MSAs first; among those shared by
    equally many, by the product of their rows (a gap counts 1, AF3's ``|-1|``), smallest first,
    so that rows near the top of every MSA come first; ties by species id, then i.
    Returns int64 [P, K]: the row of each MSA in each paired row, -1 for a gap.
    """
    k_msas = len(species)
    parts = []
    for k, sp in enumerate(species):
        sp = np.asarray(sp, dtype=np.int64).reshape(-1)
        rows = np.flatnonzero(sp[1:] != 0) + 1
        parts.append(np.stack([sp[rows], np.full(rows.size, k), rows], axis=1))
    flat = np.concatenate(parts) if parts else np.zeros((0, 3), np.int64)
    if not flat.size or max_per_species < 1:
        return np.zeros((0, k_msas), np.int64)
    flat = flat[np.lexsort((flat[:, 2], flat[:, 1], flat[:, 0]))]  # by species, MSA, row
    sp, msa_k, row = flat.T
    new_species = np.r_[True, sp[1:] != sp[:-1]]
    new_group = new_species | np.r_[True, msa_k[1:] != msa_k[:-1]]  # a group: one species in one MSA
    group = np.cumsum(new_group) - 1
    group_start = np.flatnonzero(new_group)
    rank = np.arange(sp.size) - group_start[group]  # i: the row's place among its species' rows there
    s_of = np.cumsum(new_species) - 1  # species index of each row (species ids ascending)
    g_of_species = np.cumsum(new_species[group_start]) - 1
    n_msas = np.bincount(g_of_species)  # MSAs that have the species
    take = np.minimum.reduceat(np.diff(np.r_[group_start, sp.size]), np.flatnonzero(new_species[group_start]))
    take = np.minimum(take, max_per_species)
    ok = (n_msas[s_of] >= 2) & (rank < take[s_of])
    if not ok.any():
        return np.zeros((0, k_msas), np.int64)
    # a paired row is (species, i), numbered in that order
    stride = int(rank.max()) + 1
    pair_ids, pair_index = np.unique(s_of[ok] * stride + rank[ok], return_inverse=True)
    ps, pr = pair_ids // stride, pair_ids % stride
    out = np.full((pair_ids.size, k_msas), -1, dtype=np.int64)
    out[pair_index.reshape(-1), msa_k[ok]] = row[ok]
    return out[_af3_pair_order(out, -n_msas[ps], ps, pr)]


def _af3_pair_order(pairs: np.ndarray, minus_shared: np.ndarray, sp: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Order of the paired rows ``pairs`` (int64 [P, K], -1 gap): by ``minus_shared``, then the
    product of the rows (a gap counts 1), then ``sp``, then ``i`` (all int64 [P]). The product is
    compared exactly: in int64 while it fits (AF3 sums logs in float64, whose rounding would
    order equal products such as 1·6 and 2·3 by chance), as Python integers beyond."""
    factors = np.where(pairs >= 0, pairs, 1)
    if float(np.log(factors).sum(axis=1).max()) < 43.0:  # e^43 < 2^63: the int64 product is exact
        return np.lexsort((i, sp, np.prod(factors, axis=1), minus_shared))
    prods = [math.prod(r) for r in factors.tolist()]
    keys = list(zip(minus_shared.tolist(), prods, sp.tolist(), i.tolist(), strict=True))
    return np.asarray(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)


def msa_row_plan(
    depths: Mapping[int, int],
    rng: np.random.Generator,
    max_msa_rows: int = DEFAULT_MAX_MSA_ROWS,
    paired: Mapping[int, str] | None = None,
    species: Mapping[str, np.ndarray] | None = None,
    pairs: np.ndarray | None = None,
    unpaired: Mapping[int, np.ndarray] | None = None,
) -> dict[int, np.ndarray]:
    """Which stored row of each chain's MSA fills each row of the sample: chain → int64 [n_c]
    (row r of the sample takes row ``plan[c][r]`` of chain c's MSA; -1, and rows past n_c, are gaps).

    ``depths``: chain → depth of its stored MSA (> 1). ``paired``: chain → MSA key of the chains to
    pair, ``species``: MSA key → species id of each of its rows (:func:`species_pairs` pairs the
    different MSAs, ``P`` paired rows; chains of one sequence share their MSA's paired rows; none
    given: nothing is paired; ``pairs``: ``species_pairs`` of them in sorted key order, when the
    caller has it already). ``unpaired``: chain → bool [depth], the stored rows its unpaired rows
    may be (False: a pairing-only row, module docstring); a chain not in it: every row. The stacked
    MSA is the query, the ``P`` paired rows (pairing order), then the merged unpaired block of
    ``U`` rows (AF3's ``merge_msa_features``: each chain's unpaired rows, its rows other than the
    query, its paired rows and the rows ``unpaired`` excludes, in stored order, padded to ``U``,
    the most any chain has, and set side by side), ``D = 1 + P + U`` rows (without pairing:
    the deepest MSA). The sample has ``n`` rows, ``n`` uniform in ``1 … min(D, max_msa_rows)``:
    row 0 is the query, then ONE set of ``n - 1`` indices ``s`` drawn uniformly without
    replacement from the stacked MSA's non-query rows ``0 … D - 2`` (kept in order), for all
    chains: ``s < P`` is paired row ``s``, ``s >= P`` merged unpaired row ``j = s - P``, chain c
    taking ``pool_c[j]``, its ``j``-th unpaired row, where ``j < U_c`` and -1 (a gap) beyond.
    Paired and unpaired rows are thus drawn alike (AF3 shuffles the whole stacked MSA and
    truncates it; module docstring), and chains of one MSA get the same row in every sample row.
    Without pairing these are the draws of an unpaired MSA.
    """
    chains = sorted(depths)
    paired = dict(paired or {})
    keys = sorted(set(paired.values()))
    column = {c: keys.index(key) for c, key in paired.items()}
    if len(keys) >= 2 and species is not None:
        if pairs is None:
            pairs = species_pairs([species[key] for key in keys])
    else:
        pairs, column = np.zeros((0, 0), np.int64), {}
    n_paired = pairs.shape[0]
    pools: dict[int, np.ndarray] = {}
    for c in chains:
        pool = np.arange(1, depths[c], dtype=np.int64)
        if unpaired is not None and c in unpaired:
            pool = pool[np.asarray(unpaired[c], dtype=bool)[1:]]
        if c in column and n_paired:
            pool = pool[~np.isin(pool, pairs[:, column[c]])]
        pools[c] = pool
    n_unpaired = max([p.size for p in pools.values()], default=0)  # U: the merged unpaired block
    depth = 1 + n_paired + n_unpaired  # D: the stacked MSA [query; paired; merged unpaired]
    n_rows = int(rng.integers(1, min(depth, max_msa_rows), endpoint=True)) if depth > 1 else 1
    # one uniform draw over the stacked MSA's non-query rows, 0 … D - 2 (kept in stacked order):
    # below P a paired row, from P on merged unpaired row j = s - P; no block is preferred
    stacked = (
        np.sort(rng.choice(depth - 1, size=n_rows - 1, replace=False))
        if n_rows > 1
        else np.zeros(0, np.int64)
    )
    chosen = stacked[stacked < n_paired]
    merged = stacked[stacked >= n_paired] - n_paired
    plan: dict[int, np.ndarray] = {}
    for c in chains:
        rows_paired = pairs[chosen, column[c]] if c in column else np.full(chosen.size, -1, np.int64)
        inside = merged < pools[c].size  # merged row j holds chain c's j-th unpaired row, a gap past U_c
        others = np.full(merged.size, -1, np.int64)
        others[inside] = pools[c][merged[inside]]
        plan[c] = np.concatenate([[0], rows_paired, others]).astype(np.int64)
    return plan


def _shape_by_reading(fetch: MSAFetch, key: str) -> tuple[int, int] | None:
    try:
        head = fetch(key, np.zeros(1, np.int64), np.zeros(0, np.int64))
    except NotFound:
        return None
    return int(head.depth), int(head.length)


# ------------------------------------------------------------------------------------- sample
class Sample(dict):  # type: ignore[type-arg]
    """One sample (a plain ``dict`` otherwise). Its type tells torch's default collate to batch it
    with :func:`collate` (registered when :mod:`featurecache.client.dataset` is imported), so a
    plain ``DataLoader(dataset, batch_size=B)`` without ``collate_fn`` pads and stacks the samples
    as ``collate_fn=collate`` does; before, torch's default collate stacked their arrays and failed
    on the first two of different lengths ("stack expects each tensor to be equal size")."""

    __slots__ = ()


def assemble_sample(
    entry: Entry,
    keep: np.ndarray,
    rng: np.random.Generator,
    *,
    chains: Sequence[Mapping[str, Any]] | None = None,
    msa_fetch: MSAFetch | None = None,
    msa_shape: MSAShape | None = None,
    ref_features: RefFeatures | None = None,
    max_msa_rows: int = DEFAULT_MAX_MSA_ROWS,
    augment_ref: bool = True,
    pair_msa: bool = True,
) -> dict[str, Any]:
    """One sample from ``entry`` restricted to the sorted token indices ``keep`` (int64 [N]).

    ``chains``: chain rows with ``msa_key`` (default ``entry.chains``); ``pair_msa``: pair the
    protein chains' MSA rows by species (:func:`msa_features`). ``ref_features``: the
    reference conformer of the atoms it is given (``ref_pos``, ``ref_mask``, and ``ref_element`` /
    ``ref_charge`` where it returns them); atoms it has no reference for, and all atoms when it
    is None, keep the entry's element and charge (module docstring, "Reference features"). It is
    given whole residues: where the crop cut a residue (a per-atom ligand or modified residue),
    every atom of that residue (:func:`whole_residue_atoms`), and the kept atoms take their rows,
    so they get the conformer they get when the residue is kept whole, as AF3 computes reference
    features per residue before cropping.

    Draws from ``rng`` in a fixed order (MSA rows, then reference augmentation) so that a sample is
    a function of the entry, the crop and the generator's seed.
    """
    tok, atoms = entry.tokens, entry.atoms
    keep = np.asarray(keep, dtype=np.int64)
    n_entry_tokens = len(tok["restype"])
    centre = np.asarray(tok["centre_atom"], dtype=np.int64)[keep]
    coords = np.asarray(atoms["coords"], dtype=np.float32)
    present = np.asarray(atoms["is_present"], dtype=bool)
    sample: dict[str, Any] = Sample({
        "restype": np.asarray(tok["restype"])[keep].astype(np.uint8),
        "residue_index": np.asarray(tok["residue_index"])[keep].astype(np.int32),
        "asym_id": np.asarray(tok["asym_id"])[keep].astype(np.int32),
        "entity_id": np.asarray(tok["entity_id"])[keep].astype(np.int32),
        "sym_id": np.asarray(tok["sym_id"])[keep].astype(np.int32),
        "mol_type": np.asarray(tok["mol_type"])[keep].astype(np.uint8),
        "token_index": keep.copy(),
        "centre_coords": coords[centre],
        "centre_mask": present[centre],
        "token_bond_pairs": token_bond_pairs(entry.bonds, keep, n_entry_tokens),
    })  # fmt: skip
    sample.update(
        msa_features(
            tok,
            keep,
            entry.chains if chains is None else chains,
            msa_fetch,
            rng,
            max_msa_rows,
            msa_shape,
            pair_msa,
        )
    )

    aidx, owner = atom_indices(tok, keep)
    rep = representative_atoms(tok, keep, np.asarray(atoms["name"]), aidx, owner)
    has_rep = rep >= 0
    rep_safe = np.where(has_rep, rep, 0)
    sample["rep_coords"] = np.where(has_rep[:, None], coords[rep_safe], 0.0).astype(np.float32)
    sample["rep_mask"] = has_rep & present[rep_safe]
    sub_atoms = {k: np.asarray(v)[aidx] for k, v in atoms.items()}
    _, uid = np.unique(np.asarray(sub_atoms["ref_space_uid"], dtype=np.int64), return_inverse=True)
    uid = uid.reshape(-1).astype(np.int32)
    # the entry's element / charge: the fallback for atoms without a reference (module docstring)
    ref_element = np.asarray(sub_atoms["element"])
    ref_charge = np.asarray(sub_atoms["charge"])
    ref_centre = None
    if ref_features is not None and aidx.size:
        # decided per whole residue, then cropped (AF3): a residue the crop cut is looked up over
        # all its atoms, so its kept atoms get the conformer they get when it is kept whole
        whole = whole_residue_atoms(np.asarray(atoms["ref_space_uid"]), aidx)
        rows: slice | np.ndarray = slice(None)
        if whole is None:
            ref = ref_features(sub_atoms, tok)
        else:
            ref = ref_features({k: np.asarray(v)[whole] for k, v in atoms.items()}, tok)
            rows = np.searchsorted(whole, aidx)
            # and centred on the whole residue, as AF3's random_augmentation centres the conformer
            # before the crop: the centroid of all the residue's atoms with a reference (ref_mask),
            # not of the atoms kept. The uids of ``whole`` are those of ``aidx``: same compact ids.
            _, whole_uid = np.unique(
                np.asarray(atoms["ref_space_uid"], dtype=np.int64)[whole], return_inverse=True
            )
            ref_centre = reference_centres(
                np.asarray(ref["ref_pos"], dtype=np.float32).reshape(-1, 3),
                np.asarray(ref["ref_mask"], dtype=bool),
                whole_uid.reshape(-1),
                int(uid.max()) + 1,
            )
        ref_pos = np.asarray(ref["ref_pos"], dtype=np.float32).reshape(-1, 3)[rows]
        ref_mask = np.asarray(ref["ref_mask"], dtype=bool)[rows]
        if "ref_element" in ref:
            ref_element = np.asarray(ref["ref_element"])[rows]
        if "ref_charge" in ref:
            ref_charge = np.asarray(ref["ref_charge"])[rows]
    else:
        ref_pos = np.zeros((aidx.size, 3), dtype=np.float32)
        ref_mask = np.zeros(aidx.size, dtype=bool)
    if augment_ref and ref_mask.any():
        ref_pos = augment_reference(ref_pos, ref_mask, uid, rng, ref_centre)
    sample.update(
        {
            "atom_to_token": owner.astype(np.int32),
            "atom_present": present[aidx],
            "atom_coords": coords[aidx],
            "ref_pos": ref_pos,
            "ref_mask": ref_mask,
            "ref_element": ref_element.astype(np.uint8),
            "ref_charge": ref_charge.astype(np.int8),
            "ref_atom_name_chars": np.asarray(sub_atoms["name"]).astype(np.uint8).reshape(-1, 4),
            "ref_space_uid": uid,
        }
    )
    sample["entry_id"] = entry.id
    return sample


# ------------------------------------------------------------------------------------ collate
#: sample key -> (batch key, pad value, axes padded: "N" tokens, "A" atoms, "M" rows)
_PADDED: dict[str, tuple[str, float, str]] = {
    "restype": ("int64", GAP, "N"),
    "residue_index": ("int64", 0, "N"),
    "asym_id": ("int64", 0, "N"),
    "entity_id": ("int64", 0, "N"),
    "sym_id": ("int64", 0, "N"),
    "mol_type": ("int64", 0, "N"),
    "token_index": ("int64", 0, "N"),
    "centre_coords": ("float32", 0, "N"),
    "centre_mask": ("bool", 0, "N"),
    "rep_coords": ("float32", 0, "N"),
    "rep_mask": ("bool", 0, "N"),
    "msa": ("int64", GAP, "MN"),
    "msa_mask": ("bool", 0, "MN"),
    "profile": ("float32", 0, "N"),
    "deletion_mean": ("float32", 0, "N"),
    "atom_to_token": ("int64", 0, "A"),
    "atom_present": ("bool", 0, "A"),
    "atom_coords": ("float32", 0, "A"),
    "ref_pos": ("float32", 0, "A"),
    "ref_mask": ("bool", 0, "A"),
    "ref_element": ("int64", 0, "A"),
    "ref_charge": ("float32", 0, "A"),
    "ref_atom_name_chars": ("int64", 0, "A"),
    "ref_space_uid": ("int64", 0, "A"),
}


def _pad_into(out: np.ndarray, b: int, arr: np.ndarray) -> None:
    index: tuple[Any, ...] = (b, *(slice(0, s) for s in arr.shape))
    out[index] = arr


def collate(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pad samples to the largest of the batch and stack them into the batch dict (torch).

    Tensors follow :data:`~featurecache.client.schema.BATCH_SCHEMA` (``token_mask``, ``atom_mask``
    mark what is real; padded ``msa`` / ``restype`` are gap). Metadata stays per sample:
    ``entry_id``, ``crop_method`` (lists), ``crop_centre``, ``position``, ``reorder_depth``
    (int64 [B] tensors) and ``skipped`` (list of skip-record dicts of the whole batch).
    """
    import torch

    if not samples:
        raise ValueError("collate needs at least one sample")
    bsz = len(samples)
    n = max(int(s["restype"].shape[0]) for s in samples)
    a = max(int(s["atom_to_token"].shape[0]) for s in samples)
    m = max(int(s["msa"].shape[0]) for s in samples)
    dims = {"N": n, "A": a, "M": m}
    arrays: dict[str, np.ndarray] = {}
    for key, (dtype, pad, axes) in _PADDED.items():
        first = np.asarray(samples[0][key])
        tail = first.shape[len(axes) :]
        shape = (bsz, *[dims[x] for x in axes], *tail)
        out = np.full(shape, pad, dtype=dtype)
        for b, s in enumerate(samples):
            _pad_into(out, b, np.asarray(s[key]))
        arrays[key] = out
    token_mask = np.zeros((bsz, n), dtype=bool)
    atom_mask = np.zeros((bsz, a), dtype=bool)
    token_bonds = np.zeros((bsz, n, n), dtype=bool)
    dels = np.zeros((bsz, m, n), dtype=np.float32)
    for b, s in enumerate(samples):
        token_mask[b, : s["restype"].shape[0]] = True
        atom_mask[b, : s["atom_to_token"].shape[0]] = True
        pairs = np.asarray(s["token_bond_pairs"], dtype=np.int64).reshape(-1, 2)
        token_bonds[b, pairs[:, 0], pairs[:, 1]] = True
        token_bonds[b, pairs[:, 1], pairs[:, 0]] = True
        d = np.asarray(s["msa_deletions"])
        dels[b, : d.shape[0], : d.shape[1]] = d
    batch: dict[str, Any] = {k: torch.from_numpy(v) for k, v in arrays.items()}
    batch["token_mask"] = torch.from_numpy(token_mask)
    batch["atom_mask"] = torch.from_numpy(atom_mask)
    batch["token_bonds"] = torch.from_numpy(token_bonds)
    batch["has_deletion"] = torch.from_numpy((dels > 0).astype(np.float32))
    batch["deletion_value"] = torch.from_numpy((2.0 / math.pi * np.arctan(dels / 3.0)).astype(np.float32))
    batch["entry_id"] = [str(s.get("entry_id", "")) for s in samples]
    batch["crop_method"] = [str(s.get("crop_method", "")) for s in samples]
    batch["crop_centre"] = torch.tensor([int(s.get("crop_centre", -1)) for s in samples], dtype=torch.int64)
    batch["position"] = torch.tensor([int(s.get("position", -1)) for s in samples], dtype=torch.int64)
    batch["reorder_depth"] = torch.tensor(
        [int(s.get("reorder_depth", 0)) for s in samples], dtype=torch.int64
    )
    batch["skipped"] = [rec for s in samples for rec in s.get("skipped", ())]
    return batch
