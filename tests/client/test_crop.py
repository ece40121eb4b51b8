"""Croppers on real entries of a real store, checked against references computed here from raw atoms."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from featurecache.client.crop import (
    INTERFACE_CUTOFF,
    CropInput,
    Cropper,
    crop_contiguous,
    crop_spatial,
    crop_spatial_interface,
    snap_groups,
)
from featurecache.const import MolType, decode_atom_name

SEEDS = range(10)
BUDGETS = ((384, None), (96, None), (64, 400))


def _centres_from_atoms(entry: Any) -> np.ndarray:
    """Token centres found by atom *name* (CA / C1′ / the lone atom), not via ``centre_atom``."""
    tok, atoms = entry.tokens, entry.atoms
    out = np.zeros((len(tok["restype"]), 3), dtype=np.float64)
    for t in range(len(tok["restype"])):
        s, c = int(tok["atom_start"][t]), int(tok["atom_count"][t])
        if c == 1:
            out[t] = atoms["coords"][s]
            continue
        want = "CA" if int(tok["mol_type"][t]) == MolType.PROTEIN else "C1'"
        names = [decode_atom_name(n) for n in atoms["name"][s : s + c]]
        out[t] = atoms["coords"][s + names.index(want)]
    return out


@pytest.fixture(scope="module")
def real(client_reader: Any) -> dict[str, tuple[Any, CropInput, np.ndarray]]:
    out = {}
    for eid in client_reader.ids:
        e = client_reader.entry(eid)
        out[eid] = (
            e,
            CropInput.from_arrays(e.tokens, e.atoms, e.bonds, e.interfaces),
            _centres_from_atoms(e),
        )
    return out


def _per_atom_residues(entry: Any) -> list[np.ndarray]:
    """Token sets of every per-atom-tokenized residue (ligand or modified residue)."""
    tok = entry.tokens
    idx = np.flatnonzero(~tok["is_standard"])
    keys: dict[tuple[int, int], list[int]] = {}
    for t in idx.tolist():
        keys.setdefault((int(tok["asym_id"][t]), int(tok["residue_index"][t])), []).append(t)
    return [np.asarray(v) for v in keys.values()]


def _all_crops(inp: CropInput, max_tokens: int, max_atoms: int | None):  # type: ignore[no-untyped-def]
    for seed in SEEDS:
        yield "contiguous", crop_contiguous(inp, np.random.default_rng(seed), max_tokens, max_atoms)
        yield "spatial", crop_spatial(inp, np.random.default_rng(seed), max_tokens, max_atoms)
        yield (
            "spatial_interface",
            crop_spatial_interface(inp, np.random.default_rng(seed), max_tokens, max_atoms),
        )


def test_store_has_entries_bigger_than_the_crop(real: dict) -> None:
    sizes = {eid: len(e.tokens["restype"]) for eid, (e, _, _) in real.items()}
    assert max(sizes.values()) > 384, sizes  # 7pzb: a 384-token crop really crops something
    assert sum(len(_per_atom_residues(e)) for e, _, _ in real.values()) > 5  # ligands to snap


@pytest.mark.parametrize(("max_tokens", "max_atoms"), BUDGETS)
def test_crop_within_budgets_and_valid(real: dict, max_tokens: int, max_atoms: int | None) -> None:
    for eid, (e, inp, _) in real.items():
        atom_count = e.tokens["atom_count"].astype(np.int64)
        for method, res in _all_crops(inp, max_tokens, max_atoms):
            idx = res.indices
            assert idx.size <= max_tokens, (eid, method)
            if max_atoms is not None:
                assert atom_count[idx].sum() <= max_atoms, (eid, method)
            assert np.all(np.diff(idx) > 0), (eid, method)  # sorted, unique
            assert idx.size == 0 or (idx[0] >= 0 and idx[-1] < inp.n_tokens)
            assert idx.size > 0, (eid, method)


@pytest.mark.parametrize(("max_tokens", "max_atoms"), BUDGETS)
def test_ligands_and_modified_residues_never_cut(real: dict, max_tokens: int, max_atoms: int | None) -> None:
    for eid, (e, inp, _) in real.items():
        residues = _per_atom_residues(e)
        for method, res in _all_crops(inp, max_tokens, max_atoms):
            kept = np.isin(np.arange(inp.n_tokens), res.indices)
            for members in residues:
                assert kept[members].all() or not kept[members].any(), (eid, method, members)


def test_contiguous_crops_are_contiguous_per_chain(real: dict) -> None:
    for eid, (e, inp, _) in real.items():
        for seed in SEEDS:
            for max_tokens in (384, 96, 32):
                res = crop_contiguous(inp, np.random.default_rng(seed), max_tokens)
                asym = e.tokens["asym_id"][res.indices]
                for c in np.unique(asym):
                    run = res.indices[asym == c]
                    assert np.all(np.diff(run) == 1), (eid, seed, int(c), run)


def test_contiguous_crop_fills_the_budget_when_no_ligand_is_in_the_way(real: dict) -> None:
    # AF-M's n_min makes the crop use the whole budget unless a ligand chain drawn early was
    # dropped whole by snapping; over 20 seeds at least one crop is full.
    _e, inp, _ = real["7pzb"]
    sizes = [crop_contiguous(inp, np.random.default_rng(s), 384).indices.size for s in range(20)]
    assert max(sizes) == 384


def _reference_distances(centres: np.ndarray, resolved: np.ndarray, ref: int) -> np.ndarray:
    d = np.sqrt(((centres - centres[ref]) ** 2).sum(1)) + 1e-3 * np.arange(len(centres))
    d[~resolved] = np.inf
    return d


@pytest.mark.parametrize(("max_tokens", "max_atoms"), ((384, None), (96, None), (40, None)))
def test_spatial_crop_keeps_the_tokens_nearest_the_centre(
    real: dict, max_tokens: int, max_atoms: None
) -> None:
    checked = 0
    for eid, (e, inp, centres) in real.items():
        resolved = e.tokens["is_resolved"].astype(bool)
        single = np.bincount(inp.group)[inp.group] == 1  # one-token groups (standard residues, ions)
        for seed in SEEDS:
            res = crop_spatial(inp, np.random.default_rng(seed), max_tokens, max_atoms)
            if res.method != "spatial":
                continue
            assert resolved[res.centre_token]
            d = _reference_distances(centres, resolved, res.centre_token)
            kept = np.isin(np.arange(inp.n_tokens), res.indices)
            dropped_single = ~kept & single
            if not inp.group.size or np.all(single):
                # no multi-token molecule: exactly the k nearest
                k = min(max_tokens, inp.n_tokens)
                assert set(res.indices.tolist()) == set(np.argsort(d, kind="stable")[:k].tolist())
            if dropped_single.any():
                # a one-token group that was left out is farther than every kept one-token group
                assert d[kept & single].max() <= d[dropped_single].min(), (eid, seed)
                assert res.indices.size > max_tokens - np.bincount(inp.group).max(), (eid, seed)
            # unresolved tokens come last: one is kept only when every resolved one-token group is
            if (kept & ~resolved).any():
                assert kept[resolved & single].all(), (eid, seed)
            checked += 1
    assert checked > 20


def test_interface_crop_centres_on_an_interface_token(real: dict) -> None:
    checked = 0
    for eid, (e, inp, centres) in real.items():
        resolved = e.tokens["is_resolved"].astype(bool)
        asym = e.tokens["asym_id"]
        for seed in SEEDS:
            res = crop_spatial_interface(inp, np.random.default_rng(seed), 64)
            if res.method != "spatial_interface":
                continue
            c = res.centre_token
            other = resolved & (asym != asym[c])
            dmin = np.sqrt(((centres[other] - centres[c]) ** 2).sum(1)).min()
            assert resolved[c] and dmin < INTERFACE_CUTOFF, (eid, seed, dmin)
            assert c in res.indices
            checked += 1
    assert checked > 20


def test_interface_crop_on_a_given_interface(real: dict) -> None:
    e, inp, centres = real["7pzb"]
    asym = e.tokens["asym_id"]
    resolved = e.tokens["is_resolved"].astype(bool)
    for a, b in inp.interfaces[:6].tolist():
        for seed in range(4):
            res = crop_spatial_interface(inp, np.random.default_rng(seed), 128, reference_chains=(a, b))
            c = res.centre_token
            assert res.method == "spatial_interface"
            assert asym[c] in (a, b)
            partner = b if asym[c] == a else a
            near = resolved & (asym == partner)
            assert np.sqrt(((centres[near] - centres[c]) ** 2).sum(1)).min() < INTERFACE_CUTOFF


def test_same_seed_same_crop_other_seed_other_crop(real: dict) -> None:
    cropper = Cropper(96, 2000)
    _e, inp, _ = real["7pzb"]
    a = [cropper(inp, np.random.default_rng([7, 0, i])) for i in range(8)]
    b = [cropper(inp, np.random.default_rng([7, 0, i])) for i in range(8)]
    for x, y in zip(a, b, strict=True):
        assert x.method == y.method and x.centre_token == y.centre_token
        np.testing.assert_array_equal(x.indices, y.indices)
    c = [cropper(inp, np.random.default_rng([8, 0, i])) for i in range(8)]
    assert any(not np.array_equal(x.indices, z.indices) for x, z in zip(a, c, strict=True))


def test_cropper_draws_methods_with_the_given_weights(real: dict) -> None:
    _, inp, _ = real["7pzb"]
    cropper = Cropper(64, None, (0.2, 0.4, 0.4))
    methods = [cropper(inp, np.random.default_rng(s)).method for s in range(600)]
    frac = {m: methods.count(m) / len(methods) for m in set(methods)}
    # spatial_interface never falls back here (7pzb has interfaces); binomial sd ≈ 0.02
    assert abs(frac["contiguous"] - 0.2) < 0.07 and abs(frac["spatial_interface"] - 0.4) < 0.08, frac
    only = Cropper(64, None, (1, 0, 0))
    assert {only(inp, np.random.default_rng(s)).method for s in range(20)} == {"contiguous"}


def test_entry_that_fits_is_kept_whole(real: dict) -> None:
    e, inp, _ = real["1A8O"]
    res = Cropper(384, None)(inp, np.random.default_rng(0))
    assert res.method == "none" and res.indices.size == len(e.tokens["restype"])


# ------------------------------------------------------------------------ small synthetic cases
def _line(n_chains: int, per_chain: int, ligand: int = 0) -> CropInput:
    """Tokens 1 Å apart on the x axis; an optional ligand chain of ``ligand`` per-atom tokens."""
    n = n_chains * per_chain + ligand
    asym = np.concatenate([np.repeat(np.arange(n_chains), per_chain), np.full(ligand, n_chains)])
    tokens = {
        "asym_id": asym,
        "residue_index": np.concatenate(
            [np.tile(np.arange(1, per_chain + 1), n_chains), np.ones(ligand, int)]
        ),
        "is_standard": np.arange(n) < n_chains * per_chain,
        "mol_type": np.where(np.arange(n) < n_chains * per_chain, MolType.PROTEIN, MolType.LIGAND),
    }
    centre = np.zeros((n, 3), np.float32)
    centre[:, 0] = np.arange(n)
    return CropInput(
        asym, np.ones(n, bool), centre, np.ones(n, np.int64), snap_groups(tokens), np.zeros((0, 2))
    )


def test_spatial_on_a_line_keeps_a_window_around_the_centre() -> None:
    inp = _line(1, 50)
    res = crop_spatial(inp, np.random.default_rng(3), 9)
    c = res.centre_token
    lo = max(0, min(c - 4, 50 - 9))
    assert res.indices.tolist() == list(range(lo, lo + 9))


def test_contiguous_single_chain_is_one_run_of_the_budget() -> None:
    inp = _line(1, 40)
    for s in range(10):
        idx = crop_contiguous(inp, np.random.default_rng(s), 12).indices
        assert idx.size == 12 and np.all(np.diff(idx) == 1)


def test_a_ligand_bigger_than_the_rest_of_the_budget_is_skipped_whole() -> None:
    inp = _line(1, 20, ligand=10)  # ligand tokens 20..29 (one molecule)
    for s in range(20):
        for fn in (crop_spatial, crop_contiguous):
            idx = fn(inp, np.random.default_rng(s), 15).indices
            lig = np.isin(np.arange(20, 30), idx)
            assert lig.all() or not lig.any()
            assert idx.size <= 15


def test_snap_groups_merges_bonded_ligand_residues_only() -> None:
    tokens = {
        "asym_id": np.array([0, 0, 1, 1, 1, 2]),
        "residue_index": np.array([1, 2, 1, 1, 2, 1]),
        "is_standard": np.array([True, True, False, False, False, False]),
        "mol_type": np.array([0, 0, 3, 3, 3, 3]),
    }
    bonds = {"token_i": np.array([3, 1]), "token_j": np.array([4, 5])}  # ligand–ligand, polymer–ligand
    g = snap_groups(tokens, bonds)
    assert g[2] == g[3] == g[4]  # residue 1 (two atoms) bonded to residue 2 of the same ligand chain
    assert len({g[0], g[1], g[2], g[5]}) == 4  # the polymer–ligand bond does not merge
