"""Match a residue's heavy atoms onto its CCD definition by element and connectivity.

A residue whose atom names differ from its definition's (an older naming, a depositor's own) is
still the definition's chemistry. Its bonds are perceived from the occurrence's coordinates
(:func:`rdkit.Chem.rdDetermineBonds.DetermineConnectivity`, bond orders ignored) and the
residue's heavy-atom graph is matched into the definition's heavy-atom graph (both compared as
bond-order-free graphs, atoms by atomic number; the residue may lack some of the definition's
atoms, e.g. leaving atoms, and the definition may have bonds the perception missed).

A match is taken only when it is unambiguous enough: every match found puts each residue atom on
the same symmetry class of the definition's graph (so the matches differ only by swapping atoms
the graph cannot tell apart, like the two oxygens of a carboxylate). Among those, the one using
the fewest leaving atoms, then keeping the most atom names, then with the smallest definition
indices, is chosen — a deterministic pick.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdDetermineBonds

from featurecache.parse.ccd import ComponentDef

logger = logging.getLogger(__name__)

__all__ = ["MAX_MATCHES", "match_to_definition", "perceived_connectivity"]

#: matches enumerated at most (a symmetric definition has many equivalent ones)
MAX_MATCHES = 2000


def _graph_mol(atomic_numbers: Sequence[int], bonds: Sequence[tuple[int, int]]) -> Chem.Mol:
    """A bare molecule: atoms by atomic number, every bond single, no charges or hydrogens."""
    rw = Chem.RWMol()
    for z in atomic_numbers:
        atom = Chem.Atom(int(z))
        atom.SetNoImplicit(True)
        rw.AddAtom(atom)
    for i, j in bonds:
        if i != j and rw.GetBondBetweenAtoms(int(i), int(j)) is None:
            rw.AddBond(int(i), int(j), Chem.BondType.SINGLE)
    mol = rw.GetMol()
    mol.UpdatePropertyCache(strict=False)
    Chem.FastFindRings(mol)
    return mol


def perceived_connectivity(atomic_numbers: Sequence[int], coords: np.ndarray) -> list[tuple[int, int]]:
    """Bonds ``(i, j)``, ``i < j``, of atoms at ``coords`` (float ``[n, 3]``) from distances and
    covalent radii. Raises whatever RDKit raises when it cannot."""
    rw = Chem.RWMol()
    for z in atomic_numbers:
        rw.AddAtom(Chem.Atom(int(z)))
    conf = Chem.Conformer(len(atomic_numbers))
    for k, p in enumerate(np.asarray(coords, dtype=np.float64)):
        conf.SetAtomPosition(k, p.tolist())
    rw.AddConformer(conf, assignId=True)
    rdDetermineBonds.DetermineConnectivity(rw)
    return sorted(
        (min(b.GetBeginAtomIdx(), b.GetEndAtomIdx()), max(b.GetBeginAtomIdx(), b.GetEndAtomIdx()))
        for b in rw.GetBonds()
    )


def match_to_definition(
    comp: ComponentDef,
    atomic_numbers: Sequence[int],
    coords: np.ndarray,
    names: Sequence[str] | None = None,
) -> tuple[list[int] | None, str]:
    """The definition atom (index into ``comp``'s atoms) of each of a residue's heavy atoms.

    ``atomic_numbers`` / ``coords`` (float ``[n, 3]``, finite) / ``names`` (optional: a tie-break
    among equivalent matches) are the residue's heavy atoms.
    Returns ``(match, note)``: ``match[k]`` is the definition atom of residue atom ``k``, or None
    when no unambiguous match exists (module doc); ``note`` says what was found.
    """
    coords = np.asarray(coords, dtype=np.float64)
    if len(atomic_numbers) == 0 or coords.shape != (len(atomic_numbers), 3) or not np.isfinite(coords).all():
        return None, "no graph match (coordinates incomplete)"
    heavy = [i for i, z in enumerate(comp.atomic_numbers) if z != 1]
    if len(atomic_numbers) > len(heavy):
        return (
            None,
            f"no graph match (the residue has {len(atomic_numbers)} heavy atoms, the definition {len(heavy)})",
        )
    where = {i: k for k, i in enumerate(heavy)}
    def_bonds = [(where[i], where[j]) for i, j, *_ in comp.bonds if i in where and j in where]
    target = _graph_mol([comp.atomic_numbers[i] for i in heavy], def_bonds)
    try:
        res_bonds = perceived_connectivity(atomic_numbers, coords)
    except Exception as exc:  # RDKit raises ValueError/RuntimeError for odd inputs
        return None, f"no graph match (connectivity not determined: {type(exc).__name__})"
    query_z = list(atomic_numbers)
    query = _graph_mol(query_z, res_bonds)
    matches = target.GetSubstructMatches(query, uniquify=False, useChirality=False, maxMatches=MAX_MATCHES)
    if not matches:
        return None, "no graph match of the residue's heavy atoms onto the definition's"
    ranks = list(Chem.CanonicalRankAtoms(target, breakTies=False))
    classes = {tuple(ranks[t] for t in m) for m in matches}
    if len(classes) > 1:
        return None, f"graph match ambiguous ({len(classes)} distinct assignments)"
    leaving = [comp.leaving[i] for i in heavy]
    same = [
        [names is not None and comp.atom_names[i] == names[k] for i in heavy] for k in range(len(query_z))
    ]
    best = min(
        matches,
        key=lambda m: (sum(leaving[t] for t in m), -sum(same[k][t] for k, t in enumerate(m)), tuple(m)),
    )
    n_def = len(heavy)
    return [
        heavy[t] for t in best
    ], f"matched by graph onto {len(best)} of the definition's {n_def} heavy atoms"
