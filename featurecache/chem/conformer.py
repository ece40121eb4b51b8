"""Reference conformers (AF3 ``ref_pos``) for CCD components, with fallbacks and a time bound.

One component → one :class:`ReferenceConformer` over its heavy atoms (CCD order, leaving atoms
included: an entry's residue that lost them simply does not look them up). Strategies, in order:

``etkdg``
    RDKit ETKDGv3 on the CCD graph with explicit hydrogens, seed :func:`component_seed` (code).
``random_coords``
    the same with ``useRandomCoords`` (helps large rings and cages where ETKDG's
    eigenvector start fails).
``ccd_ideal`` / ``ccd_model``
    the CCD's own ideal / model coordinates (when complete for the heavy atoms).
``perceived``
    no CCD definition: bonds perceived from one occurrence's heavy-atom coordinates
    (:mod:`featurecache.chem.perceive`: connectivity, bond orders of flat rings and carbonyls
    guessed from the geometry, the file's charges), then embedded with ETKDGv3 / random
    coordinates. Those coordinates only decide *which bonds exist*; the positions always come
    from embedding.
(renamed residues)
    a residue whose atom names are not its definition's: its heavy atoms are matched onto the
    definition's by element and connectivity (:mod:`featurecache.chem.match`) and take the
    definition's conformer under their own names (:func:`conformer_for_renamed`, key
    ``code#hash``, strategy the definition's); ``perceived`` when no unambiguous match exists.
``failed``
    nothing worked: every atom has ``mask = False``, positions 0, and ``reason`` says why.

Degenerate positions are no conformer. RDKit embeds each bonded group of atoms on its own, centred
on one point, so a definition whose heavy atoms form several groups with no bond between them (a
salt, a dinuclear ion, a definition that lost its bonds) would come back as groups stacked on top
of each other: such a molecule is not embedded at all (its reason says so) and takes the CCD's
ideal or model coordinates, which place the groups as the dictionary does, or fails (a perceived
residue has no coordinates to take). Any positions in which two heavy atoms lie closer than
:data:`COINCIDENT_A` are refused the same way, the CCD's own included (review R25a s43 #1).

Each embedding attempt is bounded by ``timeout_s`` through RDKit's ``EmbedParameters.timeout``
(checked inside the embedding loop), so a component costs at most about ``2 × timeout_s``. RDKit
counts whole seconds, at least one (:func:`rdkit_timeout_s`): a ``timeout_s`` of 0.001 gives an
attempt 1 s, as 1 does. An attempt that ran out of it is noted in ``reason`` and the conformer
records the ``timeout_s`` it ran under (``timed_out_s``): the one kind of failure a larger
timeout can change (``build.chem_stage`` computes such a component again).
Positions are centred on the heavy-atom centroid and stored float32. The result depends only on
the definition (or the perceived graph, or which of the definition's atoms a renamed residue's
graph matched), the code (:data:`CONFORMER_VERSION`) and the RDKit version — never on an entry's
coordinates as positions.

A SIGINT is not a failure of the molecule. RDKit installs a SIGINT handler of its own while it
embeds (its ``ControlCHandler``) and, when one arrives, cancels the embedding and returns -1
(the wrapper's own check comes after the flag is reset, so no KeyboardInterrupt), or cuts a
substructure search inside it short; it says so only in a warning of its log ("Interrupted,
cancelling conformer generation", "Substructure search was interrupted, ..."). In a process that
computes conformers (a build's workers), RDKit's log is therefore routed to Python's ``rdkit``
logger at the first one and kept so, where such a warning of the embedding thread is noted
(nothing is printed: failures are recorded in ``reason``), and the embedding raises
:class:`~featurecache.errors.EmbeddingInterrupted` instead of falling back to the next strategy
(:mod:`featurecache.chem.rdkit_log`; importing this module changes nothing of RDKit's logging).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import rdDistGeom

from featurecache.chem.keys import component_seed, perceived_key
from featurecache.chem.match import match_to_definition
from featurecache.chem.perceive import perceive_mol, sanitize_relaxed
from featurecache.chem.rdkit_log import RDKIT_INTERRUPTED, interrupted, watched
from featurecache.errors import ChemError, EmbeddingInterrupted
from featurecache.parse.ccd import AROMATIC_BOND_ORDER, ComponentDef

logger = logging.getLogger(__name__)

__all__ = [
    "CONFORMER_VERSION",
    "RDKIT_INTERRUPTED",
    "DEFAULT_TIMEOUT_S",
    "STRATEGIES",
    "ReferenceConformer",
    "component_seed",
    "conformer_for_component",
    "conformer_for_perceived",
    "conformer_for_renamed",
    "mol_from_component",
    "perceived_key",
    "rdkit_timeout_s",
    "timed_out_bound_s",
]

#: Version of the conformer code, recorded with each stored component: a build recomputes every
#: component stored under a smaller one (a row without it counts as 1), so a fix reaches existing
#: stores. Bump it whenever the same definition (or occurrence) would get another conformer.
#:   1  (rows without the column) every component before versions were recorded.
#:   2  a residue whose atom names differ from its definition's takes the definition's conformer
#:      through a graph match of its heavy atoms (chem.match); a perceived residue has the file's
#:      charges (never xyz2mol's) and bond orders from geometry (chem.perceive: flat rings
#:      aromatic, C=O), no longer DetermineBonds'; chirality read from the heavy atoms'
#:      coordinates when a hydrogen's are missing; CCD ``AROM`` bonds aromatic (were quadruple).
#:   3  perceived rings from the smallest set of smallest rings (a purine's imidazole was missed,
#:      left single and puckered) and a carbon with two heavy neighbours and a short terminal
#:      oxygen a carbonyl (a modified residue's backbone C=O): both went in under 2, so stores built
#:      between kept the older bonds (review R23 s42 #1). ``tests/chem/test_conformer_tripwire.py``
#:      now fails when the chemistry of its fixed inputs changes under one version.
#:   4  degenerate positions refused (module doc): a molecule whose heavy atoms form several
#:      groups with no bond between them is not embedded (RDKit stacked the groups on one point:
#:      HEM without its bonds had its 43 atoms at one point, strategy etkdg) and takes the CCD's
#:      coordinates or fails; so do positions with two heavy atoms closer than COINCIDENT_A
#:      (review R25a s43 #1).
CONFORMER_VERSION = 4
#: RDKit's version, recorded with each stored component: conformers depend on it
RDKIT_VERSION: str = rdBase.rdkitVersion

STRATEGIES: tuple[str, ...] = ("etkdg", "random_coords", "ccd_ideal", "ccd_model", "perceived", "failed")
DEFAULT_TIMEOUT_S = 20.0
#: the note of an embedding attempt that ran out of its timeout, as ``reason`` records it (the
#: format of every featurecache so far: :func:`timed_out_bound_s` reads it back from old rows)
TIMED_OUT_NOTE = "timed out after {:.1f}s"
_TIMED_OUT_RE = re.compile(r"timed out after (\d+(?:\.\d+)?)s")
#: an attempt is taken as timed out when it ran this share of RDKit's timeout or longer
TIMED_OUT_SHARE = 0.95
#: two heavy atoms of a conformer closer than this (Å) coincide: the shortest bond between heavy
#: atoms is about 1.1 Å (N≡N, C≡O), and no two unbonded ones come near it
COINCIDENT_A = 0.5
BOND_TYPES = {
    1: Chem.BondType.SINGLE,
    2: Chem.BondType.DOUBLE,
    3: Chem.BondType.TRIPLE,
    4: Chem.BondType.QUADRUPLE,
    AROMATIC_BOND_ORDER: Chem.BondType.AROMATIC,  # CCD ``AROM``: sanitization kekulizes it
}


@dataclass(frozen=True)
class ReferenceConformer:
    """Reference conformer of one component, heavy atoms only.

    ``positions`` float32 ``[n, 3]`` (Å, centred; 0 where ``mask`` is False), ``mask`` bool ``[n]``,
    ``elements`` uint8 ``[n]`` (atomic number), ``charges`` int8 ``[n]``, ``bonds`` int32
    ``[m, 3]`` = (i, j, order) among these atoms, order 1/2/3 or 4 = aromatic (types.Bond).
    ``timed_out_s``: the ``timeout_s`` under which an embedding attempt timed out, None when none did.
    ``conformer_version`` / ``rdkit_version``: the code (:data:`CONFORMER_VERSION`) and RDKit that
    computed it, stored with the component.
    """

    key: str
    code: str
    atom_names: tuple[str, ...]
    elements: np.ndarray = field(repr=False)
    charges: np.ndarray = field(repr=False)
    positions: np.ndarray = field(repr=False)
    mask: np.ndarray = field(repr=False)
    bonds: np.ndarray = field(repr=False)
    strategy: str
    reason: str
    source_sha: str
    seconds: float
    timed_out_s: float | None = None
    conformer_version: int = CONFORMER_VERSION
    rdkit_version: str = RDKIT_VERSION

    @property
    def n_atoms(self) -> int:
        return len(self.atom_names)


# --- molecule construction -----------------------------------------------------------------------


def _complete(xyz: np.ndarray, rows: np.ndarray) -> bool:
    return bool(np.isfinite(xyz[rows]).all()) and len(rows) > 0


def mol_from_component(comp: ComponentDef) -> tuple[Chem.Mol, str]:
    """RDKit molecule of a CCD definition, all atoms (hydrogens included), CCD order.

    Charges and Kekulé bond orders come from the CCD; aromaticity is perceived by sanitization;
    stereo (tetrahedral and double bond) is read from the CCD ideal coordinates (model ones if the
    ideal lack a heavy atom) — those are the dictionary's coordinates, never an entry's; a
    hydrogen they lack is placed from its neighbour's geometry first (so one ``?`` hydrogen does
    not drop every chiral tag and leave the enantiomer to the embedding seed). Each atom
    carries the property ``atom_name``. Returns ``(mol, note)``; ``note`` is non-empty when
    sanitization had to be relaxed.
    """
    rw = Chem.RWMol()
    for name, z, q in zip(comp.atom_names, comp.atomic_numbers, comp.charges, strict=True):
        atom = Chem.Atom(int(z))
        atom.SetFormalCharge(int(q))
        atom.SetNoImplicit(True)  # the CCD lists every hydrogen
        atom.SetProp("atom_name", name)
        rw.AddAtom(atom)
    for i, j, order, _arom, _stereo in comp.bonds:
        if rw.GetBondBetweenAtoms(i, j) is None and i != j:
            rw.AddBond(i, j, BOND_TYPES.get(order, Chem.BondType.SINGLE))
            if order == AROMATIC_BOND_ORDER:
                rw.GetBondBetweenAtoms(i, j).SetIsAromatic(True)
                rw.GetAtomWithIdx(i).SetIsAromatic(True)
                rw.GetAtomWithIdx(j).SetIsAromatic(True)
    note = sanitize_relaxed(rw)
    heavy_rows = np.flatnonzero(comp.heavy)
    for xyz in (comp.ideal, comp.model):
        if not _complete(xyz, heavy_rows):
            continue
        # a hydrogen without coordinates (heavy atoms all there) is placed from its neighbour's
        # geometry: a stereocentre has at most one hydrogen, so it lands where the CCD's would
        missing = [int(k) for k in np.flatnonzero(~np.isfinite(xyz).all(axis=1))]
        if any(rw.GetAtomWithIdx(k).GetDegree() != 1 for k in missing):
            continue
        conf = Chem.Conformer(comp.n_atoms)
        for k, p in enumerate(xyz):
            conf.SetAtomPosition(k, p.tolist() if k not in missing else [0.0, 0.0, 0.0])
        cid = rw.AddConformer(conf, assignId=True)
        for k in missing:
            Chem.SetTerminalAtomCoords(rw, k, rw.GetAtomWithIdx(k).GetNeighbors()[0].GetIdx())
        Chem.AssignStereochemistryFrom3D(rw, confId=cid)
        rw.RemoveAllConformers()
        break
    return rw.GetMol(), note


def _heavy_bonds(mol: Chem.Mol, heavy: np.ndarray) -> np.ndarray:
    """int32 ``[m, 3]`` (i, j, order) between heavy atoms, indices renumbered to heavy-only order."""
    new_index = np.cumsum(heavy) - 1
    rows = []
    for b in mol.GetBonds():
        i, j = b.GetBeginAtomIdx(), b.GetEndAtomIdx()
        if heavy[i] and heavy[j]:
            order = 4 if b.GetIsAromatic() else {1.0: 1, 2.0: 2, 3.0: 3}.get(b.GetBondTypeAsDouble(), 1)
            a, c = sorted((int(new_index[i]), int(new_index[j])))
            rows.append((a, c, order))
    rows.sort()
    return np.array(rows, dtype=np.int32).reshape(-1, 3)


def rdkit_timeout_s(timeout_s: float) -> int:
    """The seconds RDKit gives an embedding attempt for ``timeout_s`` (``EmbedParameters.timeout``
    is whole seconds, 0 meaning none): ``timeout_s`` rounded up, at least 1."""
    return max(1, math.ceil(timeout_s))


def timed_out_bound_s(reason: str) -> float | None:
    """For a component row that records no ``timed_out_s`` (written before the column), an upper
    bound of the ``timeout_s`` it ran under, read from the attempts ``reason`` notes as timed out
    (:data:`TIMED_OUT_NOTE`); None when none did. An attempt was noted so when it ran
    :data:`TIMED_OUT_SHARE` of the timeout or longer (of ``timeout_s`` itself before RDKit's
    rounding was taken into account), its time rounded to 0.1 s: the timeout was below
    (time + 0.05) / share."""
    times = [float(t) for t in _TIMED_OUT_RE.findall(reason)]
    return (min(times) + 0.05) / TIMED_OUT_SHARE if times else None


def _embed(
    mol: Chem.Mol, seed: int, timeout_s: float, random_coords: bool, key: str = ""
) -> tuple[np.ndarray | None, str, bool]:
    """Embed a copy of ``mol``; returns (positions float64 [n_all, 3] or None, failure note,
    whether the attempt ran out of its timeout). Raises :class:`EmbeddingInterrupted` when a
    SIGINT cut RDKit's work short (module doc)."""
    work = Chem.Mol(mol)
    params: Any = rdDistGeom.ETKDGv3()
    params.randomSeed = seed
    params.numThreads = 1
    params.useRandomCoords = random_coords
    params.timeout = rdkit_timeout_s(timeout_s)
    t0 = time.perf_counter()
    thread = threading.get_ident()
    interrupted(thread)  # a note left from before this attempt is not its own
    method = "random coordinates" if random_coords else "ETKDG"
    try:
        cid = rdDistGeom.EmbedMolecule(work, params)
    except KeyboardInterrupt as exc:
        # with several embedding threads, RDKit's wrapper sometimes raises its own
        # KeyboardInterrupt("Embedding cancelled") instead of returning -1: a SIGINT cut it short
        if "embedding cancelled" not in str(exc).lower():
            raise
        interrupted(thread)
        raise EmbeddingInterrupted(
            f"component {key or '?'}: a SIGINT interrupted RDKit's embedding ({method}, after "
            f"{time.perf_counter() - t0:.2f}s; RDKit: {exc}); not stored"
        ) from exc
    except Exception as exc:  # RDKit raises ValueError/RuntimeError subclasses for odd graphs
        cid, failure = -1, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    else:
        failure = ""
    elapsed = time.perf_counter() - t0
    if interrupted(thread):
        raise EmbeddingInterrupted(
            f"component {key or '?'}: a SIGINT interrupted RDKit's embedding ({method}, after {elapsed:.2f}s); "
            "not stored"
        )
    if failure:
        return None, failure, False
    if cid < 0:
        # against the seconds RDKit had: a fast failure under timeout_s 0.001 is no timeout
        if elapsed >= params.timeout * TIMED_OUT_SHARE:
            return None, TIMED_OUT_NOTE.format(elapsed), True
        return None, f"embedding failed after {elapsed:.2f}s", False
    return work.GetConformer(cid).GetPositions(), "", False


def _unbonded_groups(mol: Chem.Mol, heavy: np.ndarray) -> int:
    """How many groups of bonded atoms hold the heavy atoms of ``mol`` (``heavy``: bool ``[n_all]``)."""
    return sum(1 for group in Chem.GetMolFrags(mol) if heavy[list(group)].any())


def _coincident(xyz: np.ndarray, names: Sequence[str]) -> str:
    """Why the heavy-atom positions ``xyz`` (float ``[n, 3]``, names ``names``) are degenerate:
    the first pair closer than :data:`COINCIDENT_A` and how many such pairs; "" when none is."""
    # imported here: a build's driver imports this module (not scipy), only conformer jobs call this
    from scipy.spatial import cKDTree

    pairs = cKDTree(xyz).query_pairs(COINCIDENT_A, output_type="ndarray")
    if not len(pairs):
        return ""
    i, j = sorted(pairs.tolist())[0]
    d = float(np.linalg.norm(xyz[i] - xyz[j]))
    return (
        f"atoms {names[i]} and {names[j]} {d:.2f} Å apart ({len(pairs)} pair(s) closer than {COINCIDENT_A} Å)"
    )


def _centre(xyz: np.ndarray) -> np.ndarray:
    out = np.asarray(xyz, dtype=np.float64)
    return (out - out.mean(axis=0)).astype(np.float32)


def _conformer_from_mol(
    mol: Chem.Mol,
    *,
    key: str,
    code: str,
    names: Sequence[str],
    source_sha: str,
    timeout_s: float,
    notes: list[str],
    ideal: np.ndarray | None,
    model: np.ndarray | None,
    success_strategy: str | None,
    t0: float,
) -> ReferenceConformer:
    z_all = np.array([a.GetAtomicNum() for a in mol.GetAtoms()], dtype=np.int64)
    heavy = z_all != 1
    heavy_idx = np.flatnonzero(heavy)
    n = len(heavy_idx)
    seed = component_seed(code)
    positions: np.ndarray | None = None
    strategy = "failed"
    timed_out = False
    heavy_names = [names[int(i)] for i in heavy_idx]
    attempts: list[tuple[str, bool]] = [("etkdg", False), ("random_coords", True)]
    if (groups := _unbonded_groups(mol, heavy)) > 1:
        notes.append(f"not embedded: its {n} heavy atoms form {groups} groups with no bond between them "
                     "(an embedding would put every group on one point)")  # fmt: skip
        attempts = []
    for name, random_coords in attempts:
        xyz, why, out_of_time = _embed(mol, seed, timeout_s, random_coords, key=key)
        timed_out |= out_of_time
        if xyz is not None and (why := _coincident(xyz[heavy_idx], heavy_names)):
            why, xyz = f"embedding degenerate: {why}", None
        if xyz is not None:
            positions, strategy = xyz[heavy_idx], success_strategy or name
            if name != "etkdg":
                notes.append(f"{name} used")
            break
        notes.append(f"{name}: {why}")
    if positions is None:
        positions, strategy = _ccd_coordinates(heavy_idx, heavy_names, notes, ideal, model)
    mask = np.ones(n, dtype=bool)
    if positions is None:
        positions, mask = np.zeros((n, 3)), np.zeros(n, dtype=bool)
        strategy = "failed"
    pos = _centre(positions) if mask.any() else np.zeros((n, 3), np.float32)
    charges = np.array([mol.GetAtomWithIdx(int(i)).GetFormalCharge() for i in heavy_idx], dtype=np.int8)
    return ReferenceConformer(
        key=key,
        code=code,
        atom_names=tuple(names[int(i)] for i in heavy_idx),
        elements=z_all[heavy_idx].astype(np.uint8),
        charges=charges,
        positions=pos,
        mask=mask,
        bonds=_heavy_bonds(mol, heavy),
        strategy=strategy,
        reason="; ".join(x for x in notes if x),
        source_sha=source_sha,
        seconds=time.perf_counter() - t0,
        timed_out_s=float(timeout_s) if timed_out else None,
    )


def _ccd_coordinates(
    heavy_idx: np.ndarray,
    heavy_names: Sequence[str],
    notes: list[str],
    ideal: np.ndarray | None,
    model: np.ndarray | None,
) -> tuple[np.ndarray | None, str]:
    """The heavy atoms' positions (float ``[n, 3]``) from the CCD's ideal, else model coordinates
    (all atoms, float ``[n_all, 3]``; None: none given), and the strategy; ``(None, "failed")``
    when neither is complete and sound. Why each was passed over goes to ``notes``."""
    for name, xyz_all in (("ccd_ideal", ideal), ("ccd_model", model)):
        if xyz_all is None:
            continue
        if not _complete(xyz_all, heavy_idx):
            notes.append(f"{name}: coordinates incomplete")
        elif why := _coincident(xyz_all[heavy_idx], heavy_names):
            notes.append(f"{name}: coordinates degenerate: {why}")
        else:
            return xyz_all[heavy_idx], name
    return None, "failed"


@watched
def conformer_for_component(comp: ComponentDef, timeout_s: float = DEFAULT_TIMEOUT_S) -> ReferenceConformer:
    """Reference conformer of a CCD definition (key = the CCD code). Never raises for chemistry:
    a component nothing works for comes back with strategy ``failed`` and the reason. Raises
    :class:`EmbeddingInterrupted` when a SIGINT cut an embedding short (module doc)."""
    t0 = time.perf_counter()
    notes: list[str] = []
    try:
        mol, note = mol_from_component(comp)
        notes.append(note)
    except Exception as exc:  # RDKit construction errors: fall back to the CCD's coordinates
        logger.warning("CCD %s: RDKit molecule failed: %s", comp.code, exc)
        notes.append(f"molecule: {type(exc).__name__}: {exc}")
        # Without a molecule, only the dictionary coordinates can serve.
        return _conformer_from_coords_only(comp, notes, t0)
    return _conformer_from_mol(
        mol,
        key=comp.code,
        code=comp.code,
        names=comp.atom_names,
        source_sha=comp.sha256,
        timeout_s=timeout_s,
        notes=notes,
        ideal=comp.ideal,
        model=comp.model,
        success_strategy=None,
        t0=t0,
    )


def _conformer_from_coords_only(comp: ComponentDef, notes: list[str], t0: float) -> ReferenceConformer:
    heavy_idx = np.flatnonzero(comp.heavy)
    n = len(heavy_idx)
    heavy_names = [comp.atom_names[i] for i in heavy_idx]
    positions, strategy = _ccd_coordinates(heavy_idx, heavy_names, notes, comp.ideal, comp.model)
    mask = np.full(n, positions is not None)
    return ReferenceConformer(
        key=comp.code,
        code=comp.code,
        atom_names=tuple(comp.atom_names[i] for i in heavy_idx),
        elements=np.array([comp.atomic_numbers[i] for i in heavy_idx], dtype=np.uint8),
        charges=np.array([comp.charges[i] for i in heavy_idx], dtype=np.int8),
        positions=_centre(positions) if positions is not None else np.zeros((n, 3), np.float32),
        mask=mask,
        bonds=np.zeros((0, 3), np.int32),
        strategy=strategy,
        reason="; ".join(x for x in notes if x),
        source_sha=comp.sha256,
        seconds=time.perf_counter() - t0,
    )


@watched
def conformer_for_perceived(
    code: str,
    names: Sequence[str],
    atomic_numbers: Sequence[int],
    coords: np.ndarray,
    charges: Sequence[int] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    why: str = "no CCD definition",
) -> ReferenceConformer:
    """Reference conformer of a residue no CCD defines (strategy ``perceived`` or ``failed``).

    ``coords`` are one occurrence's heavy-atom coordinates, used only to perceive bonds; the
    positions come from embedding the perceived graph (seeded by the key). ``why`` starts the
    recorded reason (e.g. the residue's atom names differ from its definition's). Raises
    :class:`EmbeddingInterrupted` when a SIGINT cut an embedding short (module doc).
    """
    t0 = time.perf_counter()
    key = perceived_key(code, list(zip(names, atomic_numbers, strict=True)))
    try:
        mol, note = perceive_mol(names, atomic_numbers, coords, charges)
    except ChemError as exc:
        n = len(names)
        return ReferenceConformer(
            key=key,
            code=code,
            atom_names=tuple(names),
            elements=np.asarray(atomic_numbers, dtype=np.uint8),
            charges=np.asarray(charges if charges is not None else np.zeros(n), dtype=np.int8),
            positions=np.zeros((n, 3), np.float32),
            mask=np.zeros(n, dtype=bool),
            bonds=np.zeros((0, 3), np.int32),
            strategy="failed",
            reason=f"{why}; {exc}",
            source_sha="",
            seconds=time.perf_counter() - t0,
        )
    withh = Chem.AddHs(mol)
    conf = _conformer_from_mol(
        withh,
        key=key,
        code=key,
        names=list(names) + [""] * (withh.GetNumAtoms() - len(names)),
        source_sha="",
        timeout_s=timeout_s,
        notes=[why, note],
        ideal=None,
        model=None,
        success_strategy="perceived",
        t0=t0,
    )
    return ReferenceConformer(**{**conf.__dict__, "code": code})


@watched
def conformer_for_renamed(
    comp: ComponentDef,
    names: Sequence[str],
    atomic_numbers: Sequence[int],
    coords: np.ndarray,
    charges: Sequence[int] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    why: str = "",
) -> ReferenceConformer:
    """Reference conformer of a residue of ``comp``'s code whose atom names are not the definition's.

    Its heavy atoms are matched onto the definition's by element and connectivity (the occurrence's
    ``coords``, float ``[n, 3]``, only decide which bonds exist: :mod:`featurecache.chem.match`).
    With a match, the definition's own conformer (:func:`conformer_for_component`: positions,
    charges, bond orders) is taken for the matched atoms under the residue's names — the same
    positions as the definition's component, centred on its heavy atoms. Without one, the residue
    is perceived (:func:`conformer_for_perceived`). The key is the perceived one either way, and
    ``source_sha`` the definition's (a build whose definition of the code differs, or that has none,
    computes the component again: ``build.chem_stage``; review R22 s41 #2).
    """
    why = why or f"atom names differ from the definition of {comp.code}"
    heavy = [k for k, z in enumerate(atomic_numbers) if int(z) != 1]
    xyz = np.asarray(coords, dtype=np.float64)
    match, note = match_to_definition(
        comp, [atomic_numbers[k] for k in heavy], xyz[heavy], [names[k] for k in heavy]
    )
    if match is None:  # recorded with the definition it was judged against (chem_stage recomputes
        # the component when the build's definition differs: another CCD, or none)
        perceived = conformer_for_perceived(
            comp.code, names, atomic_numbers, coords, charges, timeout_s=timeout_s, why=f"{why}; {note}"
        )
        return dataclasses.replace(perceived, source_sha=comp.sha256)
    t0 = time.perf_counter()
    base = conformer_for_component(comp, timeout_s=timeout_s)
    row_of = {name: r for r, name in enumerate(base.atom_names)}
    rows = np.array([row_of[comp.atom_names[i]] for i in match], dtype=np.int64)
    new_index = {int(r): k for k, r in enumerate(rows)}
    bonds = [
        (*sorted((new_index[int(i)], new_index[int(j)])), int(order))
        for i, j, order in base.bonds
        if int(i) in new_index and int(j) in new_index
    ]
    return dataclasses.replace(
        base,
        key=perceived_key(comp.code, list(zip(names, atomic_numbers, strict=True))),
        atom_names=tuple(names[k] for k in heavy),
        elements=base.elements[rows],
        charges=base.charges[rows],
        positions=base.positions[rows],
        mask=base.mask[rows],
        bonds=np.array(sorted(bonds), dtype=np.int32).reshape(-1, 3),
        reason="; ".join(x for x in (why, note, base.reason) if x),
        seconds=base.seconds + time.perf_counter() - t0,
    )
