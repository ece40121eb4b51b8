"""Chain–chain interfaces: pairs of chains with resolved heavy atoms within 5 Å (AF3 §2.5).

The work is linear in atoms: the present atoms are grouped by chain once (one sort), and only the
chain pairs whose bounding boxes come within the cutoff are measured with k-d trees. Capsids and
filaments have many chains, so a mask per chain and a Python loop over every chain pair grew as the
square of such an entry (a 960-chain, 1 M-atom capsid lattice spent 6.7 s here: review R32b s47 #1).
"""

from __future__ import annotations

import numpy as np

from featurecache.types import Interface

INTERFACE_CUTOFF = 5.0  # Å
#: Box comparisons made at a time by :func:`candidate_pairs` (rows of chains × all chains): 5,000
#: chains would otherwise compare 25 M box pairs, ~75 MB per boolean temporary, at once
CANDIDATE_BLOCK_CELLS = 2**18


def chain_interfaces(atoms: np.ndarray, tokens: np.ndarray, cutoff: float = INTERFACE_CUTOFF) -> np.ndarray:
    """Interface[n] for every chain pair (chain_i < chain_j) in contact, sorted by pair.

    ``n_contacts``: present atom pairs of the two chains within ``cutoff`` (distance <= cutoff);
    ``min_distance``: the closest such pair, in Å."""
    from scipy.spatial import cKDTree  # here: a build's driver imports this module, only its workers call it

    chains, groups = present_atoms_by_chain(tokens["asym_id"][atoms["token_index"]], atoms["is_present"])
    coords = atoms["coords"].astype(np.float64)
    xyz = [coords[g] for g in groups]
    lo = np.array([x.min(0) for x in xyz]).reshape(-1, 3)
    hi = np.array([x.max(0) for x in xyz]).reshape(-1, 3)
    trees: dict[int, cKDTree] = {}

    def tree(k: int) -> cKDTree:
        if k not in trees:
            trees[k] = cKDTree(xyz[k])
        return trees[k]

    rows = []
    ii, jj = candidate_pairs(lo, hi, cutoff)
    for a, b in zip(ii.tolist(), jj.tolist(), strict=True):
        n = int(tree(a).count_neighbors(tree(b), cutoff))
        if n == 0:
            continue
        dist, _ = tree(b).query(xyz[a], k=1, distance_upper_bound=cutoff)
        rows.append((int(chains[a]), int(chains[b]), n, float(np.min(dist))))
    return np.array(rows, dtype=Interface) if rows else np.zeros(0, dtype=Interface)


def present_atoms_by_chain(
    chain_of_atom: np.ndarray, present: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]]:
    """``(chains, groups)``: the chains (ascending) with a present atom, and for each the indices
    (int64, ascending) of its present atoms, from ``chain_of_atom`` int ``[n_atoms]`` and ``present``
    bool ``[n_atoms]``; one stable sort, whatever the number of chains."""
    idx = np.flatnonzero(present)
    chain = chain_of_atom[idx]
    order = np.argsort(chain, kind="stable")  # stable: each chain's atoms stay in file order
    idx, chain = idx[order], chain[order]
    chains, starts = np.unique(chain, return_index=True)
    return chains, np.split(idx, starts[1:]) if chains.size else []


def candidate_pairs(
    lo: np.ndarray, hi: np.ndarray, cutoff: float, block_cells: int = CANDIDATE_BLOCK_CELLS
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs ``(i, j)``, ``i < j``, of boxes (``lo``, ``hi`` float ``[n, 3]``: each chain's
    corners) no further apart than ``cutoff`` on every axis, as two int64 arrays in row-major order
    (by ``i``, then ``j``). Compared ``block_cells // n`` rows at a time (at least one)."""
    n = lo.shape[0]
    rows = max(1, block_cells // max(n, 1))
    out_i, out_j = [], []
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        lo_b, hi_b = lo[start:stop, None, :], hi[start:stop, None, :]
        far = ((lo_b - cutoff > hi[None]) | (lo[None] - cutoff > hi_b)).any(-1)  # [rows, n]
        far |= np.arange(n)[None, :] <= np.arange(start, stop)[:, None]  # only j > i
        i, j = np.nonzero(~far)
        out_i.append(i + start)
        out_j.append(j)
    if not out_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out_i).astype(np.int64), np.concatenate(out_j).astype(np.int64)
