"""AlphaFold 3 croppers (supplement §2.7): contiguous, spatial and spatial-interface.

Pure functions over token arrays; randomness comes only from the ``rng`` passed in, so the same
generator state gives the same crop. Every cropper returns the *sorted* entry-local indices of the
kept tokens and respects two budgets: ``max_tokens`` (AF3's crop size, 384 by default) and
``max_atoms`` (atoms of the kept tokens, ``None`` = no atom budget, the default: see
:data:`DEFAULT_MAX_ATOMS`).

Per-token crops (the default) or whole groups. AF3 crops tokens one by one (supplement §2.7): a
ligand or modified residue is one token per atom, ranked and taken like any residue, so a crop can
hold part of a molecule. That is the default (``Cropper(whole_groups=False)``,
``FeatureDataset(crop_whole_groups=False)``): the croppers see every token as its own group
(:meth:`CropInput.per_token`), a spatial crop without an atom budget is exactly the
``max_tokens`` nearest tokens (centre distance + ``1e-3 × index``) and a contiguous crop is
AF-Multimer Algorithm 1 over tokens.
``whole_groups=True`` snaps instead (whole-ligand snapping, featurecache's rule before session 25):
tokens of one *snap group* are kept or dropped together. A group is a standard residue's single
token, every per-atom token of one non-standard residue (modified residue, ligand residue), and,
for ligands, every per-atom token of residues joined by covalent ligand–ligand bonds (a glycan is
one group). See :func:`snap_groups`. Snapping changes which tokens a crop holds, not (much) how
many: a spatial crop ranks a group by its nearest token and takes it whole, so a group straddling
AF3's cut is kept whole more often than dropped, ligands are over-represented against AF3's crop
and polymer tokens nearer the reference make room for them (review R1 s25 #3: e.g. 25.0 vs 20.6
ligand tokens per 128-token spatial crop of 721p); a contiguous crop takes a ligand chain whole or
not at all. The crop functions below follow ``inp.group`` as given: :meth:`CropInput.from_arrays`
gives snap groups, :meth:`CropInput.per_token` one group per token.

Oversized groups (whole-group mode). A group that *alone* exceeds a budget (more tokens than ``max_tokens``, or more
atoms than ``max_atoms``) cannot be kept whole by any crop; keeping none of it would leave a
ligand-only entry with an empty crop and a spatial crop centred on it without its reference token.
Such a group is therefore cropped token by token, as AF3 crops every atomized token: the spatial
croppers keep its atom tokens nearest the reference, the contiguous cropper treats them as
ordinary sequence positions. Only such groups are ever split; a group that fits the budgets but
not what is left of them is kept whole or dropped whole. See :func:`crop_groups`.

What every crop guarantees (``N`` tokens, ``N`` > 0):

* it is not empty, unless some token's own atom count exceeds ``max_atoms`` (such a token can be
  in no crop; with any realistic atom budget this does not happen);
* a spatial or spatial-interface crop contains its reference token (the reference is drawn among
  tokens that fit the atom budget alone, and its group is taken first);
* without an atom budget, a contiguous crop holds exactly ``T`` tokens: the largest number
  ≤ ``min(N, max_tokens)`` that one run per chain, each starting and ending at group edges, can
  hold together. ``T = min(N, max_tokens)`` unless group sizes rule it out (two chains that are
  one 10-token ligand each and a crop of 15: ``T = 10``); an entry with a chain free of
  multi-token groups at least as long as the crop always reaches it. Under an atom budget it
  holds what the atoms allow: runs are trimmed, then grown while the next group fits.

Unresolved tokens (centre atom absent from the file), as AF3 / AF-Multimer handle them:

* contiguous crops count them like any other token (they are part of the sequence);
* spatial crops never choose them as the reference token, and rank them after every resolved
  token (infinite distance), in entry order — they enter a crop only when the resolved tokens do
  not fill the budget;
* interface detection uses resolved tokens only.

Distances are between token centre atoms (Cα, C1′, or the atom itself), plus ``1e-3 × token index``
Å as in AF-Multimer (Algorithm 2's δ·j) and Protenix: it breaks ties, and on large entries it is also a
bias of up to N mÅ toward earlier tokens (6.8 Å on the 6,828-token 1ffk; review R31c s47 #4). An entry
that fits both budgets is kept whole.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from featurecache.const import MolType
from featurecache.errors import InvalidRequest

log = logging.getLogger(__name__)

#: Names of the crop methods, in the order of :attr:`Cropper.weights`.
CROP_METHODS: tuple[str, ...] = ("contiguous", "spatial", "spatial_interface")
#: AF3 weighted-PDB crop mix (supplement Table 4): contiguous 0.2, spatial 0.4, spatial interface 0.4.
DEFAULT_CROP_WEIGHTS: tuple[float, float, float] = (0.2, 0.4, 0.4)
DEFAULT_CROP_SIZE = 384
#: Crop token by token (False, AF3's rule: the default since session 25) or keep each ligand,
#: glycan and modified residue whole (True, the rule before): module docstring.
DEFAULT_CROP_WHOLE_GROUPS = False
#: The default atom budget: none. AF3 crops by tokens alone (supplement §2.7), so a crop holds
#: ``min(N, crop_size)`` tokens whatever its atoms. A budget is only worth having for what the
#: atom-level arrays cost, and that is little: the trunk reads no atom-level array (they stay on
#: the host: ``schema.MODEL_INPUT_KEYS``), and a sample's atom arrays take ~87 bytes per atom in a
#: batch (``atom_to_token`` 8, ``atom_mask`` 1, ``atom_present`` 1, ``atom_coords`` 12, ``ref_pos`` 12,
#: ``ref_mask`` 1, ``ref_element`` 8, ``ref_charge`` 4, ``ref_atom_name_chars`` 32, ``ref_space_uid``
#: 8). Without a budget a crop's atoms are bounded by its tokens: at most 24 heavy atoms per token
#: (a G nucleotide starting an RNA chain, which keeps OP3; 23 elsewhere; TRP has 14, 15 when it
#: ends a protein chain and keeps OXT; a per-atom token 1), so a 768-token crop has ≤ 18,432
#: atoms, ~1.6 MB per sample, while its pair activations are N² × c_pair. An atom-level model (AF3's
#: sequence-local atom attention) is likewise linear in the atoms. A fixed budget instead cut
#: crops short without saying so: the former 4608 atoms (12 per token at crop 384) kept 272–368 of
#: 384 tokens of the ribosomal RNA of 1ffk (~21 atoms per nucleotide) and ~575 of 640 or 768
#: tokens of a protein (2XHE). Pass ``max_atoms`` to bound the atoms of a crop for a model that
#: needs it; a crop then holds fewer tokens whenever the atoms run out first.
DEFAULT_MAX_ATOMS: int | None = None
#: AF3's spatial-interface crop distance: an interface token (a crop centre candidate) has its
#: centre within 15 Å of a token centre of another chain. Not the build's chain-chain contact
#: distance (``featurize.interfaces.INTERFACE_CUTOFF``, 5 Å between heavy atoms).
INTERFACE_CROP_CUTOFF = 15.0
_TIE_BREAK = 1e-3  # Å per token index (AF-Multimer)
#: Å added to the k-d tree's search radius in interface detection, whose candidate pairs are then
#: tested exactly (float64 squared distance < cutoff²): the tree's own float rounding at the
#: boundary never decides which tokens count
_KD_SLACK = 1e-3


@dataclass(frozen=True)
class CropInput:
    """The token-level view of an entry that the croppers need.

    ``asym_id`` int ``[N]`` chain of each token; ``is_resolved`` bool ``[N]``; ``centre`` float32
    ``[N, 3]`` centre-atom coordinates (anything where unresolved); ``atom_count`` int ``[N]``;
    ``group`` int64 ``[N]`` snap group of each token (:func:`snap_groups`); ``interfaces`` int
    ``[I, 2]`` chain pairs in contact (the store's interface table, asym ids). ``singleton_groups``:
    every token is its own group (set by :meth:`per_token`, which builds such a ``group``; False
    says nothing either way), so a spatial crop without an atom budget needs no group bookkeeping.
    """

    asym_id: np.ndarray
    is_resolved: np.ndarray
    centre: np.ndarray
    atom_count: np.ndarray
    group: np.ndarray
    interfaces: np.ndarray
    singleton_groups: bool = False

    @property
    def n_tokens(self) -> int:
        return int(self.asym_id.shape[0])

    def per_token(self) -> CropInput:
        """This input with every token its own group: the croppers then crop token by token, as
        AF3 does (module docstring, "Per-token crops")."""
        return replace(self, group=np.arange(self.n_tokens, dtype=np.int64), singleton_groups=True)

    @classmethod
    def from_arrays(
        cls,
        tokens: dict[str, np.ndarray],
        atoms: dict[str, np.ndarray] | None,
        bonds: dict[str, np.ndarray] | None = None,
        interfaces: dict[str, np.ndarray] | None = None,
    ) -> CropInput:
        """Build from an entry's column dicts (``types.Entry.tokens`` / ``.atoms`` / …).

        Needs tokens ``asym_id, residue_index, mol_type, is_standard, is_resolved, atom_count``
        and the centre atoms' coordinates: tokens ``centre_coords`` (stores of featurizer 0.7.0
        on), else tokens ``centre_atom`` and atoms ``coords`` (``atoms`` may be None when the
        tokens have ``centre_coords``: a crop then needs no atom); bonds ``token_i, token_j`` and
        interfaces ``chain_i, chain_j`` are optional.
        """
        if "centre_coords" in tokens:
            centre = np.asarray(tokens["centre_coords"]).reshape(-1, 3)
        elif atoms is None:
            raise ValueError("CropInput.from_arrays: tokens without centre_coords need the atoms' coords")
        else:
            centre = np.asarray(atoms["coords"])[np.asarray(tokens["centre_atom"], dtype=np.int64)]
        if interfaces is not None and len(interfaces.get("chain_i", ())):
            pairs = np.stack([np.asarray(interfaces["chain_i"]), np.asarray(interfaces["chain_j"])], axis=1)
        else:
            pairs = np.zeros((0, 2), dtype=np.int32)
        return cls(
            asym_id=np.asarray(tokens["asym_id"]),
            is_resolved=np.asarray(tokens["is_resolved"], dtype=bool),
            centre=centre.astype(np.float32, copy=False),
            atom_count=np.asarray(tokens["atom_count"], dtype=np.int64),
            group=snap_groups(tokens, bonds),
            interfaces=pairs.astype(np.int64, copy=False),
        )


@dataclass(frozen=True)
class CropResult:
    """``indices`` int64 ``[n]`` sorted entry-local kept tokens; ``method`` the cropper that ran
    (``"none"`` when the entry fit whole); ``centre_token`` the reference token of a spatial crop
    (-1 otherwise)."""

    indices: np.ndarray
    method: str
    centre_token: int = -1


# ------------------------------------------------------------------------------------ snap groups
def snap_groups(tokens: dict[str, np.ndarray], bonds: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Snap group of every token: int64 ``[N]``, groups numbered 0.. in order of first token.

    One-token standard residues are groups of one. Per-atom tokens (``is_standard`` False) of one
    residue (same ``asym_id`` and ``residue_index``) form one group; ligand tokens
    (``mol_type == LIGAND``) joined by a bond (``bonds["token_i"]``, ``bonds["token_j"]``) are
    merged into one group, so a covalently linked glycan or a multi-residue ligand is one molecule.
    Polymer–ligand bonds never merge (a ligand attached to a protein is not part of the protein).
    """
    n = len(tokens["asym_id"])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    asym = np.asarray(tokens["asym_id"], dtype=np.int64)
    resi = np.asarray(tokens["residue_index"], dtype=np.int64)
    per_atom = ~np.asarray(tokens["is_standard"], dtype=bool)
    # provisional key: standard tokens are their own group; per-atom tokens share (asym, residue)
    key = np.where(per_atom, -1, np.arange(n, dtype=np.int64))
    pa = np.flatnonzero(per_atom)
    if pa.size:
        pairs = np.stack([asym[pa], resi[pa]], axis=1)
        _, first_idx, inv = np.unique(pairs, axis=0, return_index=True, return_inverse=True)
        key[pa] = pa[first_idx[inv.reshape(-1)]]  # representative = first token of the residue
    if bonds is not None and len(bonds.get("token_i", ())) and pa.size:
        ligand = np.asarray(tokens["mol_type"]) == MolType.LIGAND
        ti = np.asarray(bonds["token_i"], dtype=np.int64)
        tj = np.asarray(bonds["token_j"], dtype=np.int64)
        sel = (ti != tj) & ligand[ti] & ligand[tj]
        if sel.any():
            key = _union(key, ti[sel], tj[sel])
    _, group = np.unique(key, return_inverse=True)
    # renumber in order of first token so group ids are stable and readable
    order = np.full(group.max() + 1, -1, dtype=np.int64)
    first = np.unique(group, return_index=True)[1]
    order[group[np.sort(first)]] = np.arange(first.size)
    return order[group].astype(np.int64)


def _union(key: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merge the groups (representatives ``key``) joined by edges ``a``–``b`` (union–find)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    for i, j in zip(key[a].tolist(), key[b].tolist(), strict=True):
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    if not parent:
        return key
    out = key.copy()
    for k in np.unique(key[np.isin(key, list(parent))]).tolist():
        out[key == k] = find(int(k))
    # members whose representative was itself a merged root already map correctly
    return out


# ------------------------------------------------------------------------------------- budgets
@dataclass
class _Budget:
    max_tokens: int
    max_atoms: int | None
    tokens: int = 0
    atoms: int = 0

    def fits(self, n_tokens: int, n_atoms: int) -> bool:
        if self.tokens + n_tokens > self.max_tokens:
            return False
        return self.max_atoms is None or self.atoms + n_atoms <= self.max_atoms

    def take(self, n_tokens: int, n_atoms: int) -> None:
        self.tokens += n_tokens
        self.atoms += n_atoms


def _check_budgets(max_tokens: int, max_atoms: int | None) -> None:
    if max_tokens < 1:
        raise InvalidRequest(f"max_tokens must be >= 1, got {max_tokens}")
    if max_atoms is not None and max_atoms < 1:
        raise InvalidRequest(f"max_atoms must be >= 1 or None, got {max_atoms}")


def fits_whole(inp: CropInput, max_tokens: int, max_atoms: int | None) -> bool:
    if inp.n_tokens > max_tokens:
        return False
    return max_atoms is None or int(inp.atom_count.sum()) <= max_atoms


def crop_groups(inp: CropInput, max_tokens: int, max_atoms: int | None) -> np.ndarray:
    """The groups a crop under these budgets keeps whole: int64 ``[N]``.

    ``inp.group``, except that a group that alone exceeds a budget (more than ``max_tokens``
    tokens, or more than ``max_atoms`` atoms) becomes one group per token: no crop could keep it
    whole, so it is cropped token by token (module docstring, "Oversized groups").
    """
    group = inp.group
    if group.size == 0:
        return group
    n_tok = np.bincount(group)
    over = n_tok > max_tokens
    if max_atoms is not None:
        over |= np.bincount(group, weights=inp.atom_count, minlength=n_tok.size) > max_atoms
    split = over[group]
    if not split.any():
        return group
    out = group.copy()
    out[split] = n_tok.size + np.arange(int(split.sum()), dtype=np.int64)
    return out


def _drop_partial_groups(groups: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Remove from the sorted index array ``keep`` every token whose group is not wholly kept."""
    if keep.size == 0:
        return keep
    sizes = np.bincount(groups)
    kept_sizes = np.bincount(groups[keep], minlength=sizes.size)
    whole = kept_sizes[groups[keep]] == sizes[groups[keep]]
    return keep[whole]


def _fits_alone(inp: CropInput, tokens: np.ndarray, max_atoms: int | None) -> np.ndarray:
    """The tokens of ``tokens`` whose own atoms fit ``max_atoms`` (only these can be in a crop)."""
    if max_atoms is None:
        return tokens
    return tokens[inp.atom_count[tokens] <= max_atoms]


# ---------------------------------------------------------------------------------- contiguous
def crop_contiguous(
    inp: CropInput,
    rng: np.random.Generator,
    max_tokens: int = DEFAULT_CROP_SIZE,
    max_atoms: int | None = None,
) -> CropResult:
    """AF-Multimer Algorithm 1 over AF3 tokens, runs cut only between groups (:func:`crop_groups`).

    Chains are visited in a random order; each contributes one contiguous run whose ends are group
    edges, its length drawn uniformly among the feasible lengths and its start uniformly among the
    group edges where a run of that length fits. Algorithm 1's bounds
    ``n_max = min(L, crop − n_added)`` and ``n_min = min(L, max(0, crop − n_added − n_remaining))``
    are exactly the lengths after which the chains not yet visited can still fill the crop; with
    groups, not every length can be cut, so the feasible lengths are those after which the later
    chains can still reach *goal*: the largest total ≤ ``crop − n_added`` that this chain and the
    later ones can hold (``crop = min(N, max_tokens)``; ``n_added`` counts what was kept). Without
    multi-token groups these are Algorithm 1's bounds and draws; with them the crop holds
    ``min(N, max_tokens)`` tokens whenever one run per chain between group edges can, and
    otherwise the largest number ≤ that which such runs can.

    The atom budget trims a run from its end, a group at a time, and later chains make up the
    tokens when they can. What an atom budget still leaves missing is topped up at the end: chains
    in the same order grow their run a group at a time, alternately at its end and its start, while
    the next group fits both budgets; a chain with no run gets the longest run that fits, at a
    random start. Without an atom budget there is nothing to top up.
    """
    _check_budgets(max_tokens, max_atoms)
    n = inp.n_tokens
    crop = min(n, max_tokens)
    groups = crop_groups(inp, max_tokens, max_atoms)
    cut = _cut_points(groups, inp.asym_id)
    _, chain_start, chain_len = _chain_runs(inp.asym_id)
    atoms_cum = np.concatenate([[0], np.cumsum(inp.atom_count)])
    budget = _Budget(max_tokens, max_atoms)
    runs: dict[int, tuple[int, int]] = {}
    order = rng.permutation(chain_start.size).tolist()
    # Sets of sizes are bool [crop + 1] arrays, or None for "every size 0..top" (a chain without
    # multi-token groups, and any sum of such chains: then the draw below is Algorithm 1's).
    # lengths[i]: the run lengths of chain order[i]; reach[i]: the totals chains order[i:] can hold.
    inner = (~cut[:n]).astype(np.int64)  # positions inside a chain where no run may end
    free = np.add.reduceat(inner, chain_start) == 0 if n else np.zeros(0, dtype=bool)
    lengths: list[_SizeSet] = []
    for c in order:
        top = min(int(chain_len[c]), crop)
        if free[c]:
            lengths.append(_SizeSet(top, None))
        else:
            lo0 = int(chain_start[c])
            lengths.append(_SizeSet.of(_run_lengths(cut[lo0 : lo0 + int(chain_len[c]) + 1], crop)))
    reach = [_SizeSet(0, None)] * (len(order) + 1)
    for i in range(len(order) - 1, -1, -1):
        reach[i] = reach[i + 1].plus(lengths[i], crop)
    for i, c in enumerate(order):
        lo0, n_k = int(chain_start[c]), int(chain_len[c])
        goal = reach[i].largest_upto(crop - budget.tokens)
        if lengths[i].sizes is None and reach[i + 1].sizes is None:
            n_min, n_max = max(0, goal - reach[i + 1].top), min(lengths[i].top, goal)
            size = int(rng.integers(n_min, n_max, endpoint=True))
        else:
            sizes = np.flatnonzero(lengths[i].array(crop)[: goal + 1])
            sizes = sizes[reach[i + 1].array(crop)[goal - sizes]]  # never empty: goal ∈ reach[i]
            size = int(sizes[rng.integers(sizes.size)])
        if free[c]:
            lo = lo0 + int(rng.integers(0, n_k - size, endpoint=True))
        else:
            lo = lo0 + _draw_start(cut[lo0 : lo0 + n_k + 1], size, rng)
        hi = _trim_atoms(cut, lo, lo + size, budget, atoms_cum)
        if hi > lo:
            budget.take(hi - lo, int(atoms_cum[hi] - atoms_cum[lo]))
            runs[c] = (lo, hi)
    if budget.tokens < crop and max_atoms is not None:
        _top_up(order, runs, chain_start, chain_len, cut, budget, crop, atoms_cum, rng)
    keep = [np.arange(lo, hi, dtype=np.int64) for lo, hi in runs.values()]
    idx = np.sort(np.concatenate(keep)) if keep else np.zeros(0, dtype=np.int64)
    # A no-op unless a group spans two chains (bonded ligand residues of different chains).
    return CropResult(_drop_partial_groups(groups, idx), "contiguous")


def _chain_runs(asym_id: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chains as runs of consecutive tokens: (chain id, first token, length) per run, entry order."""
    n = asym_id.shape[0]
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    starts = np.flatnonzero(np.concatenate([[True], asym_id[1:] != asym_id[:-1]]))
    lengths = np.diff(np.concatenate([starts, [n]]))
    return asym_id[starts], starts, lengths


def _cut_points(groups: np.ndarray, asym_id: np.ndarray) -> np.ndarray:
    """bool ``[N + 1]``: ``cut[p]`` when a run may start or end between tokens ``p − 1`` and ``p``.

    Every chain boundary is a cut; inside a chain, ``p`` is not a cut when a group has tokens on
    both sides of it (first token < ``p`` ≤ last token, so interleaved groups count too).
    """
    n = groups.size
    cut = np.ones(n + 1, dtype=bool)
    if n < 2:
        return cut
    pos = np.arange(n, dtype=np.int64)
    first = np.full(int(groups.max()) + 1, n, dtype=np.int64)
    last = np.full(first.size, -1, dtype=np.int64)
    np.minimum.at(first, groups, pos)
    np.maximum.at(last, groups, pos)
    multi = last > first
    inside = np.zeros(n + 2, dtype=np.int64)
    np.add.at(inside, first[multi] + 1, 1)
    np.add.at(inside, last[multi] + 1, -1)
    cut &= np.cumsum(inside)[: n + 1] == 0
    cut[np.flatnonzero(asym_id[1:] != asym_id[:-1]) + 1] = True
    return cut


def _run_lengths(chain_cut: np.ndarray, cap: int) -> np.ndarray:
    """bool ``[cap + 1]``: which lengths ≤ ``cap`` a run between two cuts of one chain can have.

    ``chain_cut`` bool ``[L + 1]``: the chain's slice of :func:`_cut_points`.
    """
    out = np.zeros(cap + 1, dtype=bool)
    if chain_cut.all():
        out[: chain_cut.size] = True
        return out
    pos = np.flatnonzero(chain_cut)
    if pos.size <= 64:  # a ligand chain: few cuts, all their differences
        d = (pos[None, :] - pos[:, None]).ravel()
        out[d[(d >= 0) & (d <= cap)]] = True
        return out
    # The lengths are the differences of cut positions: the autocorrelation of the cut indicator,
    # by FFT (O(L log L); a chain can have thousands of tokens and is cropped every step).
    m = 1 << int(2 * chain_cut.size).bit_length()
    f = np.fft.rfft(chain_cut.astype(np.float64), m)
    corr = np.fft.irfft(f * np.conj(f), m)[: min(chain_cut.size, cap + 1)]
    out[: corr.size] = corr > 0.5
    return out


@dataclass(frozen=True)
class _SizeSet:
    """A set of sizes in ``0..top``: ``sizes`` bool ``[≥ top + 1]``, or None for all of ``0..top``."""

    top: int
    sizes: np.ndarray | None

    @classmethod
    def of(cls, sizes: np.ndarray) -> _SizeSet:
        top = int(np.flatnonzero(sizes)[-1])
        return cls(top, None if sizes[: top + 1].all() else sizes)

    def array(self, cap: int) -> np.ndarray:
        if self.sizes is not None:
            return self.sizes
        return np.arange(cap + 1) <= self.top

    def largest_upto(self, k: int) -> int:
        if self.sizes is None:
            return min(k, self.top)
        return int(np.flatnonzero(self.sizes[: k + 1])[-1])

    def plus(self, other: _SizeSet, cap: int) -> _SizeSet:
        """The sums ``≤ cap`` of a size of ``self`` and a size of ``other``."""
        if self.sizes is None and other.sizes is None:
            return _SizeSet(min(cap, self.top + other.top), None)
        a, b = self.array(cap), other.array(cap)
        if other.sizes is None:
            a, b = b, a  # b is the interval when one of them is
        nb = np.flatnonzero(b)
        if nb.size == int(nb[-1]) + 1:
            # b = 0..m: t is a sum when a holds some x in [t − m, t] (a sliding window over a)
            c = np.concatenate([[0], np.cumsum(a)])
            t = np.arange(cap + 1)
            out = c[t + 1] - c[np.maximum(t - int(nb[-1]), 0)] > 0
        elif nb.size <= 64:
            out = np.zeros(cap + 1, dtype=bool)
            for y in nb.tolist():
                out[y:] |= a[: cap + 1 - y]
        else:
            out = np.convolve(a.astype(np.int64), b.astype(np.int64))[: cap + 1] > 0
        return _SizeSet.of(np.asarray(out))


def _draw_start(chain_cut: np.ndarray, size: int, rng: np.random.Generator) -> int:
    """A uniform chain-local start among the cuts ``p`` where ``p + size`` is also a cut."""
    n_k = chain_cut.size - 1
    starts = np.flatnonzero(chain_cut[: n_k + 1 - size] & chain_cut[size:])
    return int(starts[rng.integers(starts.size)])


def _trim_atoms(cut: np.ndarray, lo: int, hi: int, budget: _Budget, atoms_cum: np.ndarray) -> int:
    """Largest cut ``hi' ≤ hi`` such that tokens ``[lo, hi')`` fit the budgets (``lo`` if none)."""
    if _fits_range(budget, lo, hi, atoms_cum):
        return hi
    ends = lo + np.flatnonzero(cut[lo : hi + 1])  # a prefix of these fits (both sums grow)
    fit = ends - lo + budget.tokens <= budget.max_tokens
    if budget.max_atoms is not None:
        fit &= atoms_cum[ends] - atoms_cum[lo] + budget.atoms <= budget.max_atoms
    return int(ends[fit][-1]) if fit.any() else lo


def _fits_range(budget: _Budget, lo: int, hi: int, atoms_cum: np.ndarray) -> bool:
    return budget.fits(hi - lo, int(atoms_cum[hi] - atoms_cum[lo]))


def _top_up(
    order: list[int],
    runs: dict[int, tuple[int, int]],
    chain_start: np.ndarray,
    chain_len: np.ndarray,
    cut: np.ndarray,
    budget: _Budget,
    crop: int,
    atoms_cum: np.ndarray,
    rng: np.random.Generator,
) -> None:
    """Grow ``runs`` (in place) towards ``crop`` tokens: see :func:`crop_contiguous`."""
    cuts = np.flatnonzero(cut)
    for c in order:
        if budget.tokens >= crop:
            return
        lo0, hi0 = int(chain_start[c]), int(chain_start[c] + chain_len[c])
        if c in runs:
            lo, hi = runs[c]
        else:
            chain_cut = cut[lo0 : hi0 + 1]
            size = int(np.flatnonzero(_run_lengths(chain_cut, crop - budget.tokens))[-1])
            if size == 0:
                continue
            lo = lo0 + _draw_start(chain_cut, size, rng)
            hi = _trim_atoms(cut, lo, lo + size, budget, atoms_cum)
            if hi == lo:
                continue
            budget.take(hi - lo, int(atoms_cum[hi] - atoms_cum[lo]))
        grew = True
        while grew and budget.tokens < crop:
            grew = False
            if hi < hi0:
                nxt = int(cuts[np.searchsorted(cuts, hi, side="right")])
                if _fits_range(budget, hi, nxt, atoms_cum):
                    budget.take(nxt - hi, int(atoms_cum[nxt] - atoms_cum[hi]))
                    hi, grew = nxt, True
            if lo > lo0 and budget.tokens < crop:
                prv = int(cuts[np.searchsorted(cuts, lo, side="left") - 1])
                if _fits_range(budget, prv, lo, atoms_cum):
                    budget.take(lo - prv, int(atoms_cum[lo] - atoms_cum[prv]))
                    lo, grew = prv, True
        runs[c] = (lo, hi)


# ------------------------------------------------------------------------------------- spatial
def crop_spatial(
    inp: CropInput,
    rng: np.random.Generator,
    max_tokens: int = DEFAULT_CROP_SIZE,
    max_atoms: int | None = None,
    reference_chains: Sequence[int] | None = None,
) -> CropResult:
    """AF3 spatial crop: the tokens nearest a random resolved reference token.

    The reference token is drawn uniformly from the resolved tokens of ``reference_chains`` (all
    chains when ``None`` or when those chains have no resolved token) whose own atoms fit
    ``max_atoms``. Tokens are ranked by centre distance to it (+ the tie-break), the reference
    first; whole groups (:func:`crop_groups`) are taken in rank order while they fit the budgets —
    a group that does not fit is passed over, and smaller ones behind it may still enter. The
    reference's group is taken first and fits alone, so the crop always contains the reference.
    """
    _check_budgets(max_tokens, max_atoms)
    candidates = _fits_alone(inp, _resolved_in(inp, reference_chains), max_atoms)
    if candidates.size == 0 and reference_chains:
        candidates = _fits_alone(inp, _resolved_in(inp, None), max_atoms)
    if candidates.size == 0:
        log.debug("no resolved token to centre a spatial crop on; falling back to contiguous")
        return crop_contiguous(inp, rng, max_tokens, max_atoms)
    ref = int(candidates[rng.integers(candidates.size)])
    return CropResult(_nearest(inp, ref, max_tokens, max_atoms), "spatial", ref)


def crop_spatial_interface(
    inp: CropInput,
    rng: np.random.Generator,
    max_tokens: int = DEFAULT_CROP_SIZE,
    max_atoms: int | None = None,
    reference_chains: Sequence[int] | None = None,
    cutoff: float = INTERFACE_CROP_CUTOFF,
) -> CropResult:
    """AF3 spatial-interface crop: a spatial crop centred on a random *interface* token.

    Interface tokens are resolved tokens within ``cutoff`` Å (centre to centre) of a resolved token
    of another chain. With two ``reference_chains`` (a sampled interface) they are the tokens of
    either chain near the other one; with one chain, that chain's tokens near any other chain;
    with none, an interface is drawn uniformly from ``inp.interfaces`` (and when the entry has
    none, tokens near any other chain are used). Without any interface token it is a spatial crop.
    """
    _check_budgets(max_tokens, max_atoms)
    chains = list(reference_chains) if reference_chains is not None else []
    if not chains and inp.interfaces.shape[0]:
        chains = [int(c) for c in inp.interfaces[rng.integers(inp.interfaces.shape[0])]]
    candidates = _fits_alone(inp, interface_tokens(inp, chains, cutoff), max_atoms)
    if candidates.size == 0:
        return crop_spatial(inp, rng, max_tokens, max_atoms, chains or None)
    ref = int(candidates[rng.integers(candidates.size)])
    return CropResult(_nearest(inp, ref, max_tokens, max_atoms), "spatial_interface", ref)


def interface_tokens(
    inp: CropInput, chains: Sequence[int], cutoff: float = INTERFACE_CROP_CUTOFF
) -> np.ndarray:
    """Resolved tokens within ``cutoff`` Å of a resolved token of another chain, sorted int64.

    ``chains``: two asym ids → tokens of either near the other; one → its tokens near any other
    chain; none → every chain against every other.
    """
    res = inp.is_resolved
    if len(chains) == 2 and chains[0] != chains[1]:
        a = np.flatnonzero(res & (inp.asym_id == chains[0]))
        b = np.flatnonzero(res & (inp.asym_id == chains[1]))
        near_a, near_b = _near_pairs(inp.centre, a, b, cutoff)
        return np.sort(np.concatenate([a[near_a], b[near_b]]))
    if len(chains) >= 1:
        a = np.flatnonzero(res & np.isin(inp.asym_id, chains))
        b = np.flatnonzero(res & ~np.isin(inp.asym_id, chains))
        near_a, _ = _near_pairs(inp.centre, a, b, cutoff)
        return a[near_a]
    out = []
    for c in np.unique(inp.asym_id[res]).tolist():
        a = np.flatnonzero(res & (inp.asym_id == c))
        b = np.flatnonzero(res & (inp.asym_id != c))
        near_a, _ = _near_pairs(inp.centre, a, b, cutoff)
        out.append(a[near_a])
    return np.sort(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def _near_pairs(
    xyz: np.ndarray, a: np.ndarray, b: np.ndarray, cutoff: float
) -> tuple[np.ndarray, np.ndarray]:
    """Masks over ``a`` and over ``b``: has a partner in the other set within ``cutoff``.

    The candidate pairs come from k-d trees (scipy's ``cKDTree``, memory ∝ the pairs within the
    cutoff) and are decided by the exact test ``‖x_a − x_b‖² < cutoff²`` in float64. A dense
    ``[rows, |b|, 3]`` comparison made a spatial-interface crop of a large chain in a large entry
    (1ffk's 23S rRNA, 2,922 tokens against 3,906) take 0.7–1.4 s and ~230 MiB in every loader
    thread at once (review R14 s40)."""
    from scipy.spatial import cKDTree  # loaded with job.py (SAMPLE_PATH_MODULES): no import here

    near_a = np.zeros(a.size, dtype=bool)
    near_b = np.zeros(b.size, dtype=bool)
    if a.size == 0 or b.size == 0:
        return near_a, near_b
    pa = xyz[a].astype(np.float64)
    pb = xyz[b].astype(np.float64)
    pairs = cKDTree(pa).sparse_distance_matrix(cKDTree(pb), cutoff + _KD_SLACK, output_type="ndarray")
    i, j = pairs["i"].astype(np.int64), pairs["j"].astype(np.int64)
    hit = ((pa[i] - pb[j]) ** 2).sum(-1) < cutoff * cutoff
    near_a[i[hit]] = True
    near_b[j[hit]] = True
    return near_a, near_b


def _resolved_in(inp: CropInput, chains: Sequence[int] | None) -> np.ndarray:
    if chains:
        sel = np.flatnonzero(inp.is_resolved & np.isin(inp.asym_id, list(chains)))
        if sel.size:
            return sel
    return np.flatnonzero(inp.is_resolved)


def spatial_ranking(inp: CropInput, ref: int) -> np.ndarray:
    """Tokens in crop-preference order around reference token ``ref`` (int64 ``[N]``).

    ``ref`` first (another token can sit on the same centre and win the tie-break), then by
    distance between centres + ``1e-3 × index``; unresolved tokens last, in entry order.
    """
    d = np.linalg.norm(inp.centre.astype(np.float64) - inp.centre[ref].astype(np.float64), axis=1)
    d += _TIE_BREAK * np.arange(inp.n_tokens)
    d[~inp.is_resolved] = np.inf
    d[ref] = -np.inf
    return np.argsort(d, kind="stable")


def _nearest(inp: CropInput, ref: int, max_tokens: int, max_atoms: int | None) -> np.ndarray:
    if inp.singleton_groups and max_atoms is None:
        # one token per group, no atom budget: the greedy below takes the first max_tokens tokens of
        # the ranking, ties and all (review R27d s45 #7: 2.2x the group bookkeeping's cost)
        return np.sort(spatial_ranking(inp, ref)[: max(max_tokens, 0)]).astype(np.int64)
    group = crop_groups(inp, max_tokens, max_atoms)
    order = spatial_ranking(inp, ref)
    groups = group[order]
    # groups in order of their nearest token
    _, first = np.unique(groups, return_index=True)
    g_order = groups[np.sort(first)]
    g_tokens = np.bincount(group, minlength=int(group.max()) + 1)
    g_atoms = np.bincount(group, weights=inp.atom_count, minlength=g_tokens.size).astype(np.int64)
    sz_t = g_tokens[g_order]
    sz_a = g_atoms[g_order]
    # Vectorized prefix: every group up to the first that would overflow a budget is taken.
    ok = np.cumsum(sz_t) <= max_tokens
    if max_atoms is not None:
        ok &= np.cumsum(sz_a) <= max_atoms
    n_prefix = int(np.argmin(ok)) if not ok.all() else ok.size
    taken = list(g_order[:n_prefix].tolist())
    budget = _Budget(max_tokens, max_atoms, int(sz_t[:n_prefix].sum()), int(sz_a[:n_prefix].sum()))
    # The tail: greedy over the rest, passing over groups that do not fit.
    for k in range(n_prefix, g_order.size):
        if budget.tokens >= max_tokens:
            break
        if budget.fits(int(sz_t[k]), int(sz_a[k])):
            budget.take(int(sz_t[k]), int(sz_a[k]))
            taken.append(int(g_order[k]))
    return np.flatnonzero(np.isin(group, np.asarray(taken, dtype=np.int64))).astype(np.int64)


# ------------------------------------------------------------------------------------- chooser
class Cropper:
    """Draws one of the three AF3 croppers per sample and applies it.

    ``weights`` (contiguous, spatial, spatial-interface) default to AF3's 0.2 / 0.4 / 0.4.
    ``reference_chains`` (from the sampler: a sampled chain or interface) centre spatial crops.
    ``whole_groups``: False (the default, AF3's rule) crops token by token
    (:meth:`CropInput.per_token`); True keeps or drops each snap group (ligand, glycan, modified
    residue) whole (module docstring).
    """

    def __init__(
        self,
        max_tokens: int = DEFAULT_CROP_SIZE,
        max_atoms: int | None = DEFAULT_MAX_ATOMS,
        weights: Sequence[float] = DEFAULT_CROP_WEIGHTS,
        interface_cutoff: float = INTERFACE_CROP_CUTOFF,
        whole_groups: bool = DEFAULT_CROP_WHOLE_GROUPS,
    ) -> None:
        _check_budgets(max_tokens, max_atoms)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (3,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise InvalidRequest(
                f"crop weights must be 3 finite non-negative numbers with a positive sum, got {weights}"
            )
        try:
            cutoff = float(interface_cutoff)
        except (TypeError, ValueError):
            cutoff = math.nan
        if not 0 < cutoff < math.inf:  # nan, negative: every spatial-interface crop became spatial
            raise InvalidRequest(
                f"interface_cutoff must be a finite distance > 0 (Å), got {interface_cutoff!r}"
            )
        self.max_tokens = max_tokens
        self.max_atoms = max_atoms
        self.weights = w / w.sum()
        self.interface_cutoff = cutoff
        self.whole_groups = bool(whole_groups)

    def __call__(
        self, inp: CropInput, rng: np.random.Generator, reference_chains: Sequence[int] | None = None
    ) -> CropResult:
        # The method is always drawn (even when the entry fits) so that the generator's stream does
        # not depend on the entry's size.
        method = CROP_METHODS[int(rng.choice(3, p=self.weights))]
        if fits_whole(inp, self.max_tokens, self.max_atoms):
            return CropResult(np.arange(inp.n_tokens, dtype=np.int64), "none")
        if not self.whole_groups:
            inp = inp.per_token()
        if method == "contiguous":
            return crop_contiguous(inp, rng, self.max_tokens, self.max_atoms)
        if method == "spatial":
            return crop_spatial(inp, rng, self.max_tokens, self.max_atoms, reference_chains)
        return crop_spatial_interface(inp, rng, self.max_tokens, self.max_atoms, reference_chains,
                                      self.interface_cutoff)  # fmt: skip
