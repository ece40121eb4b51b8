"""Chain–chain interfaces: pairs of chains with resolved heavy atoms within 5 Å (AF3 §2.5)."""

from __future__ import annotations

import numpy as np

from featurecache.types import Interface

INTERFACE_CUTOFF = 5.0  # Å


def chain_interfaces(atoms: np.ndarray, tokens: np.ndarray, cutoff: float = INTERFACE_CUTOFF) -> np.ndarray:
    """Interface[n] for every chain pair (chain_i < chain_j) in contact, sorted by pair."""
    from scipy.spatial import cKDTree  # here: a build's driver imports this module, only its workers call it

    chain_of_atom = tokens["asym_id"][atoms["token_index"]]
    present = atoms["is_present"]
    coords = atoms["coords"].astype(np.float64)
    chains = np.unique(chain_of_atom[present])
    trees, boxes = {}, {}
    for c in chains:
        xyz = coords[present & (chain_of_atom == c)]
        trees[int(c)] = (cKDTree(xyz), xyz)
        boxes[int(c)] = (xyz.min(0), xyz.max(0))
    rows = []
    order = sorted(trees)
    for a_i, ci in enumerate(order):
        lo_i, hi_i = boxes[ci]
        for cj in order[a_i + 1 :]:
            lo_j, hi_j = boxes[cj]
            if np.any(lo_i - cutoff > hi_j) or np.any(lo_j - cutoff > hi_i):
                continue  # bounding boxes further apart than the cutoff
            tree_i, xyz_i = trees[ci]
            tree_j, _ = trees[cj]
            n = int(tree_i.count_neighbors(tree_j, cutoff))
            if n == 0:
                continue
            dist, _ = tree_j.query(xyz_i, k=1, distance_upper_bound=cutoff)
            rows.append((ci, cj, n, float(np.min(dist))))
    out = np.zeros(len(rows), dtype=Interface)
    for k, row in enumerate(rows):
        out[k] = row
    return out
