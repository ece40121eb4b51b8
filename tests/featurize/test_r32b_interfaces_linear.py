"""Chain interfaces in time linear in atoms (review R32b s47 #1): a mask over every atom per chain
and a Python loop over every chain pair made a 960-chain, 1 M-atom capsid lattice spend 6.7 s in
``chain_interfaces``. The rewrite must give the same table (same pairs, order, counts, distances,
dtype), so it is checked against a reference written here from the definition (AF3 SI §2.5: two
chains are an interface when present heavy atoms of theirs lie within 5 Å; ``n_contacts`` counts
the atom pairs at most 5 Å apart, ``min_distance`` is the closest, float32) over one k-d tree of
the whole entry, with no per-chain trees and no bounding boxes. Real entries: a 6- and a 14-chain
complex, and a capsid (5cvz's 60 BIOMT copies, made with gemmi) laid out 1×, 2× and 4× side by
side with new chain ids, up to 240 chains. The scaling is checked by counts, not time."""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import gemmi
import numpy as np
import pytest

from featurecache.featurize.entry import featurize_bytes
from featurecache.featurize.interfaces import candidate_pairs, chain_interfaces, present_atoms_by_chain
from featurecache.types import Interface
from tests.conftest import STRUCTURES

AF3_INTERFACE_CUTOFF = 5.0  # Å, AF3 SI §2.5


def _reference(atoms: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Interface rows from every present atom pair within the cutoff, found with one k-d tree over
    the whole entry, sorted by (chain_i, chain_j)."""
    from scipy.spatial import cKDTree

    chain = tokens["asym_id"][atoms["token_index"]].astype(np.int64)
    idx = np.flatnonzero(atoms["is_present"])
    xyz = atoms["coords"][idx].astype(np.float64)
    pairs = cKDTree(xyz).query_pairs(AF3_INTERFACE_CUTOFF, output_type="ndarray")  # distance <= cutoff
    ca, cb = chain[idx[pairs[:, 0]]], chain[idx[pairs[:, 1]]]
    cross = ca != cb
    p, ca, cb = pairs[cross], ca[cross], cb[cross]
    lo, hi = np.minimum(ca, cb), np.maximum(ca, cb)
    dist = np.sqrt(((xyz[p[:, 0]] - xyz[p[:, 1]]) ** 2).sum(-1))
    keys, inverse, counts = np.unique(np.stack([lo, hi], 1), axis=0, return_inverse=True, return_counts=True)
    dmin = np.full(len(keys), np.inf)
    np.minimum.at(dmin, inverse.ravel(), dist)
    out = np.zeros(len(keys), dtype=Interface)
    out["chain_i"], out["chain_j"] = keys[:, 0], keys[:, 1]
    out["n_contacts"], out["min_distance"] = counts, dmin
    return out


def _capsid() -> tuple[np.ndarray, np.ndarray]:
    """5cvz's icosahedral capsid (its 60 BIOMT operators, gemmi.make_assembly): atoms, tokens."""
    st = gemmi.read_structure(str(STRUCTURES / "5cvz_final.pdb"))
    st.remove_waters()
    st.setup_entities()
    model = gemmi.make_assembly(st.assemblies[0], st[0], gemmi.HowToNameCopiedChain.Short)
    out = gemmi.Structure()
    out.cell, out.spacegroup_hm = st.cell, st.spacegroup_hm
    out.add_model(model)
    out.setup_entities()
    doc = out.make_mmcif_document()
    doc[0].name = "5CVZ"
    s = featurize_bytes(doc.as_string().encode(), "5cvz-capsid.cif", "5cvz-capsid")
    return s.atoms, s.tokens


@pytest.fixture(scope="module")
def capsid() -> tuple[np.ndarray, np.ndarray]:
    return _capsid()


def _copies(atoms: np.ndarray, tokens: np.ndarray, k: int, gap: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """``k`` copies of an entry side by side along x (``gap`` Å apart, more than the cutoff: no
    contact between copies), each with new chain ids (asym_id shifted past the previous copy's)."""
    present = atoms["coords"][atoms["is_present"]]
    step = float(present[:, 0].max() - present[:, 0].min()) + AF3_INTERFACE_CUTOFF + gap
    n_chains = int(tokens["asym_id"].max()) + 1
    all_atoms, all_tokens = [], []
    for c in range(k):
        a, t = atoms.copy(), tokens.copy()
        a["coords"][:, 0] += np.float32(c * step)
        a["token_index"] += c * len(tokens)
        t["asym_id"] += c * n_chains
        all_atoms.append(a)
        all_tokens.append(t)
    return np.concatenate(all_atoms), np.concatenate(all_tokens)


def _assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == Interface
    # same pairs, same order
    assert got[["chain_i", "chain_j"]].tolist() == want[["chain_i", "chain_j"]].tolist()
    assert got["n_contacts"].tolist() == want["n_contacts"].tolist()
    np.testing.assert_array_equal(got["min_distance"], want["min_distance"])  # float32, as stored


@pytest.mark.parametrize("name", ["7a4d-assembly1.cif", "6wg6.bcif.gz"])
def test_interfaces_equal_the_reference_on_real_complexes(name: str) -> None:
    s = featurize_bytes((STRUCTURES / name).read_bytes(), name, name)
    assert len(s.interfaces) >= 10
    _assert_same(chain_interfaces(s.atoms, s.tokens), _reference(s.atoms, s.tokens))


def test_interfaces_equal_the_reference_on_a_240_chain_capsid_lattice(
    capsid: tuple[np.ndarray, np.ndarray],
) -> None:
    atoms, tokens = _copies(*capsid, 4)
    got = chain_interfaces(atoms, tokens)
    want = _reference(atoms, tokens)
    assert len(np.unique(tokens["asym_id"])) == 240
    assert len(want) == 4 * len(_reference(*capsid)) > 4 * 60  # each copy's contacts, none between copies
    _assert_same(got, want)


def _calls(fn: Callable[[], Any]) -> int:
    """Python and C function calls made while ``fn`` runs (a count, the same on every machine)."""
    n = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    old = sys.getprofile()
    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(old)
    return n


def test_calls_grow_with_chains_not_with_chain_pairs(capsid: tuple[np.ndarray, np.ndarray]) -> None:
    """4× the chains (60 → 240): the pairs of chains grow 16× (1,770 → 28,680), the calls made must
    grow about 4× (per chain and per pair of touching boxes); the loop over every chain pair made
    ~16×."""
    one = _calls(lambda: chain_interfaces(*capsid))
    four_atoms, four_tokens = _copies(*capsid, 4)
    four = _calls(lambda: chain_interfaces(four_atoms, four_tokens))
    assert four <= 5 * one, (one, four)


def test_candidate_pairs_are_the_box_near_pairs_in_row_major_order(
    capsid: tuple[np.ndarray, np.ndarray],
) -> None:
    """On the 240 chains of the lattice, in blocks of 1, 7 rows and all at once: exactly the pairs
    whose boxes come within the cutoff (the old pair loop's test, written out), by (i, j); only
    those get a k-d tree query, and they are ~ the pairs in contact, far fewer than all pairs."""
    atoms, tokens = _copies(*capsid, 4)
    chains, groups = present_atoms_by_chain(tokens["asym_id"][atoms["token_index"]], atoms["is_present"])
    xyz = atoms["coords"].astype(np.float64)
    lo = np.array([xyz[g].min(0) for g in groups])
    hi = np.array([xyz[g].max(0) for g in groups])
    c = AF3_INTERFACE_CUTOFF
    want = [(i, j) for i in range(len(chains)) for j in range(i + 1, len(chains))
            if not (np.any(lo[i] - c > hi[j]) or np.any(lo[j] - c > hi[i]))]  # fmt: skip
    n = len(chains)
    for block in (n, 7 * n, n * n):
        ii, jj = candidate_pairs(lo, hi, c, block_cells=block)
        assert list(zip(ii.tolist(), jj.tolist(), strict=True)) == want, block
    n_contacts = len(chain_interfaces(atoms, tokens))
    assert n_contacts <= len(want) <= 3 * n_contacts < n * (n - 1) // 20


def test_groups_are_each_chains_present_atoms_in_file_order(capsid: tuple[np.ndarray, np.ndarray]) -> None:
    atoms, tokens = capsid
    chain = tokens["asym_id"][atoms["token_index"]]
    present = atoms["is_present"].copy()
    present[::7] = False  # some absent atoms in every chain
    chains, groups = present_atoms_by_chain(chain, present)
    assert chains.tolist() == sorted({int(c) for c in chain[present]})
    for c, g in zip(chains.tolist(), groups, strict=True):
        assert g.tolist() == np.flatnonzero(present & (chain == c)).tolist()


def test_candidate_pairs_of_5000_chains_compare_in_row_blocks(capsid: tuple[np.ndarray, np.ndarray]) -> None:
    """5,000 chain boxes (the capsid's 60, on a lattice of 84 copies): the comparison runs in row
    blocks, its peak far below the ~75 MB of one boolean over all 25 M box pairs."""
    atoms, tokens = capsid
    _, groups = present_atoms_by_chain(tokens["asym_id"][atoms["token_index"]], atoms["is_present"])
    xyz = atoms["coords"].astype(np.float64)
    lo0 = np.array([xyz[g].min(0) for g in groups])
    hi0 = np.array([xyz[g].max(0) for g in groups])
    step = float((hi0.max(0) - lo0.min(0)).max()) + 10.0  # the whole capsid's extent and more
    cells = [(x, y, z) for x in range(5) for y in range(5) for z in range(4)][:84]
    grid = np.array(cells, dtype=np.float64) * step
    lo = (lo0[None] + grid[:, None]).reshape(-1, 3)[:5000]
    hi = (hi0[None] + grid[:, None]).reshape(-1, 3)[:5000]
    tracemalloc.start()
    try:
        ii, jj = candidate_pairs(lo, hi, AF3_INTERFACE_CUTOFF)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak
    # no box touches another copy's
    assert ii.size > 0 and bool(np.all(ii < jj)) and bool(np.all(jj // 60 == ii // 60))
