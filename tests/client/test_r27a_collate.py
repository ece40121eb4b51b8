"""Collate's derived features and the sample's bonds / reference augmentation checked against their
definitions (review R27a s45, A1 A2 A4 A5), with expected values from AF3's supplement or worked
out by hand, never taken from the code's output."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.client.assemble import augment_reference, collate, token_bond_pairs

#: AF3 SI Table 5: restype / msa have 32 classes, 20 amino acids + unknown, 4 RNA + unknown, 4 DNA +
#: unknown, and the gap last (index 31)
AF3_GAP = 31


def _sample(
    n: int, a: int, m: int, *, restype: int = 0, deletions: np.ndarray | None = None
) -> dict[str, Any]:
    """A minimal sample of ``n`` tokens, ``a`` atoms, ``m`` MSA rows (every key collate reads)."""
    zeros_n = np.zeros(n, dtype=np.int64)
    return {
        "restype": np.full(n, restype, dtype=np.int64),
        "residue_index": np.arange(1, n + 1),
        "asym_id": zeros_n,
        "entity_id": zeros_n,
        "sym_id": zeros_n,
        "mol_type": zeros_n,
        "token_index": np.arange(n),
        "centre_coords": np.zeros((n, 3), np.float32),
        "centre_mask": np.ones(n, bool),
        "rep_coords": np.zeros((n, 3), np.float32),
        "rep_mask": np.ones(n, bool),
        "msa": np.full((m, n), restype, dtype=np.int64),
        "msa_mask": np.ones((m, n), bool),
        "profile": np.zeros((n, 32), np.float32),
        "deletion_mean": np.zeros(n, np.float32),
        "msa_deletions": np.zeros((m, n), np.int64) if deletions is None else deletions,
        "token_bond_pairs": np.zeros((0, 2), np.int32),
        "atom_to_token": np.arange(a) % max(n, 1),
        "atom_present": np.ones(a, bool),
        "atom_coords": np.zeros((a, 3), np.float32),
        "ref_pos": np.zeros((a, 3), np.float32),
        "ref_mask": np.ones(a, bool),
        "ref_element": np.full(a, 6),
        "ref_charge": np.zeros(a),
        "ref_atom_name_chars": np.zeros((a, 4), np.int64),
        "ref_space_uid": np.arange(a) % max(n, 1),
    }


def test_deletion_value_is_two_over_pi_arctan_d_over_3() -> None:
    # AF3 SI Table 5: deletion_value = 2/pi * arctan(d / 3); by hand: arctan(1/3) = 0.32175 rad,
    # arctan(1) = pi/4 (so 0.5 exactly), arctan(10/3) = 1.27934 rad
    batch = collate([_sample(4, 4, 1, deletions=np.array([[0, 1, 3, 10]]))])
    assert batch["deletion_value"][0, 0].tolist() == pytest.approx([0.0, 0.20483, 0.5, 0.81445], abs=1e-4)
    assert batch["has_deletion"][0, 0].tolist() == [0.0, 1.0, 1.0, 1.0]
    assert 2 / math.pi * 0.32175 == pytest.approx(0.20483, abs=1e-4)  # the hand value's arithmetic


def test_padded_restype_and_msa_are_gap() -> None:
    # collate's docstring (and BATCH_SCHEMA): padded msa / restype are gap; samples of 3 and 5
    # tokens (restype 0, ALA, so that a pad of 0 would not be gap), 2 and 4 MSA rows
    batch = collate([_sample(3, 6, 2), _sample(5, 10, 4)])
    assert batch["restype"][0, :3].tolist() == [0, 0, 0]
    assert batch["restype"][0, 3:].tolist() == [AF3_GAP, AF3_GAP]
    assert (batch["msa"][0, :2, 3:] == AF3_GAP).all()  # padded tokens of real rows
    assert (batch["msa"][0, 2:, :] == AF3_GAP).all()  # padded rows
    assert (batch["msa"][1] == 0).all()
    assert batch["token_mask"][0].tolist() == [True, True, True, False, False]


def test_a_bond_to_a_cropped_out_token_is_dropped_by_hand() -> None:
    # bonds 0-5 and 1-2; tokens 0, 1, 2 kept (crop-local 0, 1, 2): token 5 is gone, so only 1-2 stays
    bonds = {"token_i": np.array([0, 1]), "token_j": np.array([5, 2])}
    assert token_bond_pairs(bonds, np.array([0, 1, 2]), 6).tolist() == [[1, 2]]
    # kept out of order of the entry: crop-local numbers follow ``keep``
    assert token_bond_pairs(bonds, np.array([2, 5, 0]), 6).tolist() == [[1, 2]]
    assert token_bond_pairs(bonds, np.array([3, 4]), 6).tolist() == []


def test_real_crops_keep_exactly_the_bonds_with_both_tokens_kept(client_store: Path) -> None:
    """Small crops of the client store's entries with bonds (721p: GNP-MG, 102m: HEM ...): the
    batch's token_bonds are the entry's bonds whose two tokens were kept, mapped through the
    sample's token_index; at least one crop cuts a bond (one end kept, the other not)."""
    import featurecache
    from featurecache.client import FeatureDataset

    reader = featurecache.open_store(client_store)
    ds = FeatureDataset(client_store, crop_size=24, seed=5, samples_per_epoch=48)
    cut = checked = 0
    try:
        for pos in range(48):
            s = ds.sample(pos)
            e = reader.entry(s["entry_id"])
            bi, bj = np.asarray(e.bonds["token_i"]), np.asarray(e.bonds["token_j"])
            if not bi.size:
                continue
            kept = {int(t): k for k, t in enumerate(np.asarray(s["token_index"]).tolist())}
            want = set()
            for i, j in zip(bi.tolist(), bj.tolist(), strict=True):
                if i in kept and j in kept and i != j:
                    want.add((min(kept[i], kept[j]), max(kept[i], kept[j])))
                elif (i in kept) != (j in kept):
                    cut += 1
            got = np.argwhere(np.triu(collate([s])["token_bonds"][0].numpy(), 1))
            assert {tuple(p) for p in got.tolist()} == want, (pos, s["entry_id"])
            checked += 1
    finally:
        ds.close()
        reader.close()
    assert checked >= 5 and cut >= 1, (checked, cut)


def test_augmentation_centres_each_conformer_before_rotating() -> None:
    """AF3 SI §2.8: each reference conformer is centred, randomly rotated and translated by
    N(0, 1 Å²). So a conformer moved 100 Å away comes out centred near the origin, and where the
    input sits does not matter: the same draws give the same output for both placements."""
    rng = np.random.default_rng(0)
    pos = rng.normal(scale=3.0, size=(12, 3)).astype(np.float32)
    mask = np.ones(12, bool)
    mask[[4, 9]] = False  # masked atoms: not in the centroid, output 0
    uid = np.repeat([0, 1, 2], 4)
    moved = pos + np.float32([100.0, -60.0, 35.0])
    for seed in range(5):
        a = augment_reference(moved, mask, uid, np.random.default_rng(seed))
        b = augment_reference(pos, mask, uid, np.random.default_rng(seed))
        np.testing.assert_allclose(a, b, atol=1e-3)
        for u in range(3):
            sel = mask & (uid == u)
            # centroid = the N(0, 1) translation: P(|t| > 6 Å) ~ 1e-7
            assert np.linalg.norm(a[sel].mean(0)) < 6.0
            # rigid: pairwise distances within the conformer kept
            d_in = np.linalg.norm(pos[sel][:, None] - pos[sel][None], axis=-1)
            d_out = np.linalg.norm(a[sel][:, None] - a[sel][None], axis=-1)
            np.testing.assert_allclose(d_out, d_in, atol=1e-3)
        assert (a[~mask] == 0).all()
