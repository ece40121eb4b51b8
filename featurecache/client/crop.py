"""AlphaFold 3 croppers (supplement §2.7): contiguous, spatial and spatial-interface.

Pure functions over token arrays; randomness comes only from the ``rng`` passed in, so the same
generator state gives the same crop. Every cropper returns the *sorted* entry-local indices of the
kept tokens and respects two budgets: ``max_tokens`` (AF3's crop size, 384 by default) and
``max_atoms`` (atoms of the kept tokens, ``None`` = no atom budget).

Molecules are never cut (whole-ligand snapping): tokens of one *snap group* are kept or dropped
together. A group is a standard residue's single token, every per-atom token of one non-standard
residue (modified residue, ligand residue), and, for ligands, every per-atom token of residues
joined by covalent ligand–ligand bonds (a glycan is one group). See :func:`snap_groups`.

Unresolved tokens (centre atom absent from the file), as AF3 / AF-Multimer handle them:

* contiguous crops count them like any other token (they are part of the sequence);
* spatial crops never choose them as the reference token, and rank them after every resolved
  token (infinite distance), in entry order — they enter a crop only when the resolved tokens do
  not fill the budget;
* interface detection uses resolved tokens only.

Distances are between token centre atoms (Cα, C1′, or the atom itself); ties are broken as in
AF-Multimer by adding ``1e-3 × token index`` Å. An entry that fits both budgets is kept whole.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from featurecache.const import MolType
from featurecache.errors import InvalidRequest

log = logging.getLogger(__name__)

#: Names of the crop methods, in the order of :attr:`Cropper.weights`.
CROP_METHODS: tuple[str, ...] = ("contiguous", "spatial", "spatial_interface")
#: AF3 weighted-PDB crop mix (supplement Table 4): contiguous 0.2, spatial 0.4, spatial interface 0.4.
DEFAULT_CROP_WEIGHTS: tuple[float, float, float] = (0.2, 0.4, 0.4)
DEFAULT_CROP_SIZE = 384
#: Our default atom budget: 12 heavy atoms per token on average over a 384-token crop.
DEFAULT_MAX_ATOMS = 4608
#: AF3 interface criterion for spatial-interface crops: a token centre within 15 Å of a token
#: centre of another chain.
INTERFACE_CUTOFF = 15.0
_TIE_BREAK = 1e-3  # Å per token index (AF-Multimer)
_BLOCK = 2048  # rows of a distance block (bounds memory of interface detection)


@dataclass(frozen=True)
class CropInput:
    """The token-level view of an entry that the croppers need.

    ``asym_id`` int ``[N]`` chain of each token; ``is_resolved`` bool ``[N]``; ``centre`` float32
    ``[N, 3]`` centre-atom coordinates (anything where unresolved); ``atom_count`` int ``[N]``;
    ``group`` int64 ``[N]`` snap group of each token (:func:`snap_groups`); ``interfaces`` int
    ``[I, 2]`` chain pairs in contact (the store's interface table, asym ids).
    """

    asym_id: np.ndarray
    is_resolved: np.ndarray
    centre: np.ndarray
    atom_count: np.ndarray
    group: np.ndarray
    interfaces: np.ndarray

    @property
    def n_tokens(self) -> int:
        return int(self.asym_id.shape[0])

    @classmethod
    def from_arrays(
        cls,
        tokens: dict[str, np.ndarray],
        atoms: dict[str, np.ndarray],
        bonds: dict[str, np.ndarray] | None = None,
        interfaces: dict[str, np.ndarray] | None = None,
    ) -> CropInput:
        """Build from an entry's column dicts (``types.Entry.tokens`` / ``.atoms`` / …).

        Needs tokens ``asym_id, residue_index, mol_type, is_standard, is_resolved, centre_atom,
        atom_count`` and atoms ``coords``; bonds ``token_i, token_j`` and interfaces
        ``chain_i, chain_j`` are optional.
        """
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


def drop_partial_groups(inp: CropInput, keep: np.ndarray) -> np.ndarray:
    """Remove from the sorted index array ``keep`` every token whose snap group is not wholly kept."""
    if keep.size == 0:
        return keep
    sizes = np.bincount(inp.group, minlength=int(inp.group.max()) + 1)
    kept_sizes = np.bincount(inp.group[keep], minlength=sizes.size)
    whole = kept_sizes[inp.group[keep]] == sizes[inp.group[keep]]
    return keep[whole]


# ---------------------------------------------------------------------------------- contiguous
def crop_contiguous(
    inp: CropInput,
    rng: np.random.Generator,
    max_tokens: int = DEFAULT_CROP_SIZE,
    max_atoms: int | None = None,
) -> CropResult:
    """AF-Multimer Algorithm 1 over AF3 tokens, with whole-molecule snapping.

    Chains are visited in a random order; each chain contributes one contiguous run of tokens whose
    length is drawn uniformly from [n_min, n_max], where n_max is what is left of the budget
    (capped at the chain length) and n_min is what the remaining chains could not supply. A run
    boundary that falls inside a snap group is moved to the nearer group edge (outwards only while
    the budgets allow), so a ligand chain of one molecule is kept whole when at least half of it
    was drawn. The atom budget then trims the run from its end, whole groups at a time.
    """
    _check_budgets(max_tokens, max_atoms)
    n = inp.n_tokens
    chains, chain_start, chain_len = _chain_runs(inp.asym_id)
    budget = _Budget(max_tokens, max_atoms)
    n_remaining = n
    keep: list[np.ndarray] = []
    atoms_cum = np.concatenate([[0], np.cumsum(inp.atom_count)])
    for c in rng.permutation(len(chains)).tolist():
        start0, n_k = int(chain_start[c]), int(chain_len[c])
        n_remaining -= n_k
        n_max = min(max_tokens - budget.tokens, n_k)
        n_min = min(n_k, max(0, max_tokens - (budget.tokens + n_remaining)))
        if n_max <= 0:
            # AF-M still draws for every chain; drawing keeps the random stream independent of the
            # budget state, which makes crops easier to reason about.
            rng.integers(0, 1, endpoint=True)
            rng.integers(0, 1, endpoint=True)
            continue
        size = int(rng.integers(n_min, n_max, endpoint=True))
        offset = int(rng.integers(0, n_k - size, endpoint=True))
        lo, hi = start0 + offset, start0 + offset + size
        lo, hi = _snap_run(inp.group, lo, hi, start0, start0 + n_k, budget, atoms_cum)
        hi = _trim_atoms(inp.group, lo, hi, budget, atoms_cum)
        if hi > lo:
            budget.take(hi - lo, int(atoms_cum[hi] - atoms_cum[lo]))
            keep.append(np.arange(lo, hi, dtype=np.int64))
    idx = np.sort(np.concatenate(keep)) if keep else np.zeros(0, dtype=np.int64)
    return CropResult(drop_partial_groups(inp, idx), "contiguous")


def _chain_runs(asym_id: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chains as runs of consecutive tokens: (chain id, first token, length) per run, entry order."""
    n = asym_id.shape[0]
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    starts = np.flatnonzero(np.concatenate([[True], asym_id[1:] != asym_id[:-1]]))
    lengths = np.diff(np.concatenate([starts, [n]]))
    return asym_id[starts], starts, lengths


def _snap_run(
    group: np.ndarray, lo: int, hi: int, chain_lo: int, chain_hi: int, budget: _Budget, atoms_cum: np.ndarray
) -> tuple[int, int]:
    """Move the edges of run ``[lo, hi)`` out of snap groups.

    An edge inside a group goes to the group's outer edge when at least half of the group is in the
    run and the grown run still fits the budgets; otherwise to its inner edge (dropping the part).
    """
    if hi <= lo:
        return lo, lo
    if lo > chain_lo and group[lo] == group[lo - 1]:
        g_lo = _group_edge_left(group, lo, chain_lo)
        g_hi = _group_edge_right(group, lo, chain_hi)
        inside = min(g_hi, hi) - lo
        if 2 * inside >= g_hi - g_lo and _fits_range(budget, g_lo, max(hi, g_hi), atoms_cum):
            lo, hi = g_lo, max(hi, g_hi)
        else:
            lo = min(g_hi, hi)
    if hi <= lo:
        return lo, lo
    if hi < chain_hi and group[hi - 1] == group[hi]:
        g_lo = _group_edge_left(group, hi - 1, chain_lo)
        g_hi = _group_edge_right(group, hi - 1, chain_hi)
        inside = hi - max(g_lo, lo)
        if g_lo >= lo and 2 * inside >= g_hi - g_lo and _fits_range(budget, lo, g_hi, atoms_cum):
            hi = g_hi
        else:
            hi = max(g_lo, lo)
    return lo, max(lo, hi)


def _group_edge_left(group: np.ndarray, i: int, floor: int) -> int:
    g = group[i]
    while i > floor and group[i - 1] == g:
        i -= 1
    return i


def _group_edge_right(group: np.ndarray, i: int, ceil: int) -> int:
    g = group[i]
    while i < ceil and group[i] == g:
        i += 1
    return i


def _fits_range(budget: _Budget, lo: int, hi: int, atoms_cum: np.ndarray) -> bool:
    return budget.fits(hi - lo, int(atoms_cum[hi] - atoms_cum[lo]))


def _trim_atoms(group: np.ndarray, lo: int, hi: int, budget: _Budget, atoms_cum: np.ndarray) -> int:
    """Largest ``hi' ≤ hi`` at a group edge such that tokens [lo, hi') fit the budgets."""
    while hi > lo and not _fits_range(budget, lo, hi, atoms_cum):
        hi = _group_edge_left(group, hi - 1, lo)
    return hi


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
    chains when ``None`` or when those chains have no resolved token). Tokens are ranked by centre
    distance to it (+ the tie-break); whole snap groups are taken in rank order while they fit the
    budgets — a group that does not fit is passed over, and smaller ones behind it may still enter.
    """
    _check_budgets(max_tokens, max_atoms)
    candidates = _resolved_in(inp, reference_chains)
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
    cutoff: float = INTERFACE_CUTOFF,
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
    candidates = interface_tokens(inp, chains, cutoff)
    if candidates.size == 0:
        res = crop_spatial(inp, rng, max_tokens, max_atoms, chains or None)
        return res
    ref = int(candidates[rng.integers(candidates.size)])
    return CropResult(_nearest(inp, ref, max_tokens, max_atoms), "spatial_interface", ref)


def interface_tokens(inp: CropInput, chains: Sequence[int], cutoff: float = INTERFACE_CUTOFF) -> np.ndarray:
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
    """Masks over ``a`` and over ``b``: has a partner in the other set within ``cutoff``."""
    near_a = np.zeros(a.size, dtype=bool)
    near_b = np.zeros(b.size, dtype=bool)
    if a.size == 0 or b.size == 0:
        return near_a, near_b
    pa = xyz[a].astype(np.float64)
    pb = xyz[b].astype(np.float64)
    # Cheap prefilter: only tokens inside the other set's box grown by the cutoff can be near.
    in_a = np.all((pa >= pb.min(0) - cutoff) & (pa <= pb.max(0) + cutoff), axis=1)
    in_b = np.all((pb >= pa.min(0) - cutoff) & (pb <= pa.max(0) + cutoff), axis=1)
    ia, ib = np.flatnonzero(in_a), np.flatnonzero(in_b)
    c2 = cutoff * cutoff
    for s in range(0, ia.size, _BLOCK):
        rows = ia[s : s + _BLOCK]
        d2 = ((pa[rows, None, :] - pb[None, ib, :]) ** 2).sum(-1) if ib.size else np.zeros((rows.size, 0))
        hit = d2 < c2
        near_a[rows] = hit.any(1)
        if ib.size:
            near_b[ib] |= hit.any(0)
    return near_a, near_b


def _resolved_in(inp: CropInput, chains: Sequence[int] | None) -> np.ndarray:
    if chains:
        sel = np.flatnonzero(inp.is_resolved & np.isin(inp.asym_id, list(chains)))
        if sel.size:
            return sel
    return np.flatnonzero(inp.is_resolved)


def spatial_ranking(inp: CropInput, ref: int) -> np.ndarray:
    """Tokens in crop-preference order around reference token ``ref`` (int64 ``[N]``).

    Distance between centres + ``1e-3 × index``; unresolved tokens last, in entry order.
    """
    d = np.linalg.norm(inp.centre.astype(np.float64) - inp.centre[ref].astype(np.float64), axis=1)
    d += _TIE_BREAK * np.arange(inp.n_tokens)
    d[~inp.is_resolved] = np.inf
    return np.argsort(d, kind="stable")


def _nearest(inp: CropInput, ref: int, max_tokens: int, max_atoms: int | None) -> np.ndarray:
    order = spatial_ranking(inp, ref)
    groups = inp.group[order]
    # groups in order of their nearest token
    _, first = np.unique(groups, return_index=True)
    g_order = groups[np.sort(first)]
    g_tokens = np.bincount(inp.group, minlength=int(inp.group.max()) + 1)
    g_atoms = np.bincount(inp.group, weights=inp.atom_count, minlength=g_tokens.size).astype(np.int64)
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
    return np.flatnonzero(np.isin(inp.group, np.asarray(taken, dtype=np.int64))).astype(np.int64)


# ------------------------------------------------------------------------------------- chooser
class Cropper:
    """Draws one of the three AF3 croppers per sample and applies it.

    ``weights`` (contiguous, spatial, spatial-interface) default to AF3's 0.2 / 0.4 / 0.4.
    ``reference_chains`` (from the sampler: a sampled chain or interface) centre spatial crops.
    """

    def __init__(
        self,
        max_tokens: int = DEFAULT_CROP_SIZE,
        max_atoms: int | None = DEFAULT_MAX_ATOMS,
        weights: Sequence[float] = DEFAULT_CROP_WEIGHTS,
        interface_cutoff: float = INTERFACE_CUTOFF,
    ) -> None:
        _check_budgets(max_tokens, max_atoms)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (3,) or (w < 0).any() or w.sum() <= 0:
            raise InvalidRequest(
                f"crop weights must be 3 non-negative numbers with a positive sum, got {weights}"
            )
        self.max_tokens = max_tokens
        self.max_atoms = max_atoms
        self.weights = w / w.sum()
        self.interface_cutoff = interface_cutoff

    def __call__(
        self, inp: CropInput, rng: np.random.Generator, reference_chains: Sequence[int] | None = None
    ) -> CropResult:
        # The method is always drawn (even when the entry fits) so that the generator's stream does
        # not depend on the entry's size.
        method = CROP_METHODS[int(rng.choice(3, p=self.weights))]
        if fits_whole(inp, self.max_tokens, self.max_atoms):
            return CropResult(np.arange(inp.n_tokens, dtype=np.int64), "none")
        if method == "contiguous":
            return crop_contiguous(inp, rng, self.max_tokens, self.max_atoms)
        if method == "spatial":
            return crop_spatial(inp, rng, self.max_tokens, self.max_atoms, reference_chains)
        return crop_spatial_interface(inp, rng, self.max_tokens, self.max_atoms, reference_chains,
                                      self.interface_cutoff)  # fmt: skip
