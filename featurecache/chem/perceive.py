"""Bonds of a residue no definition covers, from one occurrence's heavy-atom coordinates.

Structures rarely carry hydrogens, and RDKit's bond-order perception (xyz2mol,
:func:`rdkit.Chem.rdDetermineBonds.DetermineBonds`) assumes every hydrogen is there: on heavy
atoms alone it saturates each atom's valence with multiple bonds and formal charges it invents
(methanol's C-O became C≡O with C −1 / O +1; a cyclohexane would become a benzene). So only the
*connectivity* is taken from RDKit (:func:`~rdkit.Chem.rdDetermineBonds.DetermineConnectivity`,
distances and covalent radii), and bond orders come from the geometry, where it is unambiguous:

* a 5- or 6-membered ring of C/N/O/S whose atoms lie in one plane (RMS below
  :data:`RING_PLANE_RMS_A`), each ring atom with three heavy neighbours flat
  (:data:`FLAT_HEIGHT_A`), is aromatic — RDKit then finds its Kekulé structure (a five-membered
  ring's nitrogen may take a hydrogen for it); a ring system it cannot kekulize stays single;
* a flat carbon with three heavy neighbours takes a double bond to its terminal oxygen when that
  bond is short (:data:`CARBONYL_MAX_A`): carbonyl, amide, a ring's C=O; with two terminal
  oxygens (carboxyl), to the one whose name sorts first, whatever the distances (so coordinate
  noise cannot change the graph); so does a carbon with two heavy neighbours and a short terminal
  oxygen (a modified residue's backbone C, bonded to the next residue outside the residue).

Everything else stays single (RDKit adds hydrogens to fill the valences). Formal charges are the
file's (0 when it gives none), never perceived. What this misses: conjugated chains and
non-aromatic double bonds (C=C, C=N), larger or non-planar aromatic rings, charged groups the
file does not mark — the conformer then has sp3 geometry where the molecule is flat.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from rdkit import Chem
from rdkit.Chem import rdDetermineBonds

from featurecache.errors import ChemError

logger = logging.getLogger(__name__)

__all__ = ["CARBONYL_MAX_A", "FLAT_HEIGHT_A", "RING_PLANE_RMS_A", "perceive_mol", "sanitize_relaxed"]

#: ring atoms at most this RMS (Å) from their best plane count as a flat ring (a cyclohexane
#: chair is about 0.25 Å, a cyclopentane envelope 0.15 Å; aromatic rings in structures < 0.03 Å)
RING_PLANE_RMS_A = 0.1
#: an atom with three heavy neighbours at most this far (Å) from their plane is flat (sp2);
#: a tetrahedral carbon sits about 0.5 Å out of it
FLAT_HEIGHT_A = 0.25
#: a terminal oxygen at most this far (Å) from a flat carbon is a carbonyl (C=O 1.21-1.27,
#: C-O single 1.36-1.43)
CARBONYL_MAX_A = 1.30
_RING_ELEMENTS = frozenset((6, 7, 8, 16))
_ORGANIC = frozenset((1, 5, 6, 7, 8, 9, 15, 16, 17, 34, 35, 53))


def sanitize_relaxed(mol: Chem.RWMol) -> str:
    """Sanitize in place; fall back to skipping valence checks (metal complexes). Returns a note."""
    try:
        Chem.SanitizeMol(mol)
        return ""
    except Exception as exc:  # RDKit raises several unrelated classes (AtomValenceException, ...)
        note = f"partial sanitization ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    mol.UpdatePropertyCache(strict=False)
    flags = Chem.SanitizeFlags.SANITIZE_ALL ^ Chem.SanitizeFlags.SANITIZE_PROPERTIES
    failed = Chem.SanitizeMol(mol, flags, catchErrors=True)
    if failed != Chem.SanitizeFlags.SANITIZE_NONE:
        Chem.SanitizeMol(
            mol,
            Chem.SanitizeFlags.SANITIZE_SYMMRINGS | Chem.SanitizeFlags.SANITIZE_SETCONJUGATION,
            catchErrors=True,
        )
        note += f"; flags failed: {failed}"
    return note


def _plane_rms(p: np.ndarray) -> float:
    p = p - p.mean(axis=0)
    return float(np.linalg.svd(p)[1][-1] / np.sqrt(len(p)))


def _height(centre: np.ndarray, around: np.ndarray) -> float:
    """Distance (Å) of ``centre`` from the plane through the three points ``around``."""
    n = np.cross(around[1] - around[0], around[2] - around[0])
    norm = float(np.linalg.norm(n))
    return abs(float(np.dot(centre - around[0], n))) / norm if norm > 1e-6 else 0.0


def _atoms(
    names: Sequence[str], atomic_numbers: Sequence[int], charges: Sequence[int], xyz: np.ndarray
) -> Chem.RWMol:
    rw = Chem.RWMol()
    for name, z, q in zip(names, atomic_numbers, charges, strict=True):
        atom = Chem.Atom(int(z))
        atom.SetFormalCharge(int(q))
        atom.SetProp("atom_name", name)
        rw.AddAtom(atom)
    conf = Chem.Conformer(len(names))
    for k, p in enumerate(xyz):
        conf.SetAtomPosition(k, p.tolist())
    rw.AddConformer(conf, assignId=True)
    return rw


def _flat_rings(mol: Chem.Mol, xyz: np.ndarray, heavy_nbrs: list[list[int]]) -> list[tuple[int, ...]]:
    """The 5- and 6-membered rings (atom indices) that are flat with flat ring atoms."""
    out = []
    # the smallest rings (FastFindRings may give a purine's 9-ring instead of its 5-ring)
    for ring in (tuple(r) for r in Chem.GetSymmSSSR(mol)):
        if len(ring) not in (5, 6) or any(
            mol.GetAtomWithIdx(i).GetAtomicNum() not in _RING_ELEMENTS for i in ring
        ):
            continue
        if _plane_rms(xyz[list(ring)]) > RING_PLANE_RMS_A:
            continue
        if all(
            len(heavy_nbrs[i]) <= 2
            or (len(heavy_nbrs[i]) == 3 and _height(xyz[i], xyz[heavy_nbrs[i]]) < FLAT_HEIGHT_A)
            for i in ring
        ):
            out.append(tuple(ring))
    return out


def _ring_systems(rings: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
    """``rings`` grouped into fused systems (rings sharing an atom), in order of first ring."""
    systems: list[list[tuple[int, ...]]] = []
    for ring in rings:
        joined = [s for s in systems if any(set(ring) & set(r) for r in s)]
        merged = [r for s in joined for r in s] + [ring]
        systems = [s for s in systems if s not in joined] + [merged]
    return systems


def _kekulized(rw: Chem.RWMol, rings: list[tuple[int, ...]]) -> Chem.RWMol | None:
    """``rw`` with the bonds of the fused ring system ``rings`` aromatic and kekulized, or None
    when RDKit cannot (each two-connected ring nitrogen is given a hydrogen, one at a time, first)."""
    ring_atoms = sorted({i for r in rings for i in r})
    ring_n = [
        i
        for i in ring_atoms
        if rw.GetAtomWithIdx(i).GetAtomicNum() == 7 and rw.GetAtomWithIdx(i).GetDegree() == 2
    ]
    for with_h in [None, *ring_n]:
        work = Chem.RWMol(rw)
        for r in rings:
            for k, i in enumerate(r):
                bond = work.GetBondBetweenAtoms(i, r[(k + 1) % len(r)])
                bond.SetBondType(Chem.BondType.AROMATIC)
                bond.SetIsAromatic(True)
        for i in ring_atoms:
            work.GetAtomWithIdx(i).SetIsAromatic(True)
        if with_h is not None:
            work.GetAtomWithIdx(with_h).SetNumExplicitHs(1)
        try:
            work.UpdatePropertyCache(strict=False)
            Chem.Kekulize(work, clearAromaticFlags=True)
            work.UpdatePropertyCache(strict=True)
        except Exception:  # RDKit's KekulizeException / valence errors: try the next, then give up
            continue
        return work
    return None


def perceive_mol(
    names: Sequence[str],
    atomic_numbers: Sequence[int],
    coords: np.ndarray,
    charges: Sequence[int] | None = None,
) -> tuple[Chem.RWMol, str]:
    """Molecule of a residue with no definition: bonds perceived from ``coords`` (float [n, 3]),
    bond orders from geometry (module doc), formal charges ``charges`` (the file's; 0 when None).

    Returns ``(mol, note)`` with the coordinates dropped (only the graph is kept) and hydrogens
    implicit; ``note`` says what was perceived. Raises :class:`ChemError` if not even
    connectivity can be determined.
    """
    xyz = np.asarray(coords, dtype=np.float64)
    if xyz.shape != (len(names), 3) or not np.isfinite(xyz).all():
        raise ChemError(f"perception needs finite coordinates for all {len(names)} atoms")
    q = [int(c) for c in charges] if charges is not None else [0] * len(names)
    rw = _atoms(names, atomic_numbers, q, xyz)
    try:
        rdDetermineBonds.DetermineConnectivity(rw, charge=sum(q))
    except Exception as exc:  # RDKit raises ValueError/RuntimeError subclasses
        raise ChemError(f"bond perception failed: {exc}") from exc
    # the same bonds in index order: RDKit's order follows the coordinates, the embedding the order
    pairs = sorted(
        (min(b.GetBeginAtomIdx(), b.GetEndAtomIdx()), max(b.GetBeginAtomIdx(), b.GetEndAtomIdx()))
        for b in rw.GetBonds()
    )
    rw = _atoms(names, atomic_numbers, q, xyz)
    for i, j in pairs:
        rw.AddBond(i, j, Chem.BondType.SINGLE)
    for atom, charge in zip(rw.GetAtoms(), q, strict=True):  # never a perceived charge
        atom.SetFormalCharge(charge)
        atom.SetNumRadicalElectrons(0)
        atom.SetNoImplicit(False)
    organic = [a.GetAtomicNum() in _ORGANIC for a in rw.GetAtoms()]
    heavy_nbrs = [
        [n.GetIdx() for n in a.GetNeighbors() if n.GetAtomicNum() != 1 and organic[n.GetIdx()]]
        for a in rw.GetAtoms()
    ]
    # metal bonds out while orders are assigned (a porphyrin's N-Fe would block its Kekulé structure)
    metal_bonds = sorted(
        (min(b.GetBeginAtomIdx(), b.GetEndAtomIdx()), max(b.GetBeginAtomIdx(), b.GetEndAtomIdx()))
        for b in rw.GetBonds()
        if not (organic[b.GetBeginAtomIdx()] and organic[b.GetEndAtomIdx()])
    )
    for i, j in metal_bonds:
        rw.RemoveBond(i, j)
    rw.UpdatePropertyCache(strict=False)
    notes = []
    rings = _flat_rings(rw, xyz, heavy_nbrs)
    n_carbonyl = 0
    for a in rw.GetAtoms():
        i = a.GetIdx()
        if a.GetAtomicNum() != 6 or len(heavy_nbrs[i]) not in (2, 3):
            continue
        # two heavy neighbours: a residue's backbone C, whose third (the next residue's N) lies
        # outside it; no plane to judge, the short C=O alone decides (review R22 s41 #6)
        if len(heavy_nbrs[i]) == 3 and _height(xyz[i], xyz[heavy_nbrs[i]]) >= FLAT_HEIGHT_A:
            continue
        oxygens = [
            (float(np.linalg.norm(xyz[i] - xyz[j])), j)
            for j in heavy_nbrs[i]
            if rw.GetAtomWithIdx(j).GetAtomicNum() == 8 and len(heavy_nbrs[j]) == 1 and q[j] == 0
        ]
        if len(oxygens) >= 2 and len(heavy_nbrs[i]) == 3:  # carboxyl: which O is double is a name's choice
            double = min(oxygens, key=lambda o: (rw.GetAtomWithIdx(o[1]).GetProp("atom_name"), o[1]))[1]
        elif oxygens and oxygens[0][0] <= CARBONYL_MAX_A:
            double = oxygens[0][1]
        else:
            continue
        rw.GetBondBetweenAtoms(i, double).SetBondType(Chem.BondType.DOUBLE)
        n_carbonyl += 1
    if n_carbonyl:
        notes.append(f"{n_carbonyl} carbonyl(s)")
    n_aromatic = n_left = 0
    for system in _ring_systems(rings):
        kek = _kekulized(rw, system)
        if kek is not None:
            rw, n_aromatic = kek, n_aromatic + len(system)
        else:
            n_left += len(system)
    if n_aromatic:
        notes.append(f"{n_aromatic} flat ring(s) aromatic")
    if n_left:
        notes.append(f"{n_left} flat ring(s) not kekulized: single bonds")
    for i, j in metal_bonds:
        rw.AddBond(i, j, Chem.BondType.SINGLE)
    extra = sanitize_relaxed(rw)
    rw.RemoveAllConformers()
    note = "bond orders from geometry (" + (", ".join(notes) or "all single") + ")"
    return rw, note + (f"; {extra}" if extra else "")
