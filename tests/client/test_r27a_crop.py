"""Cropper rules checked against their definitions (review R27a s45, C6 and C7).

C6: interface tokens are "resolved tokens within 15 Å of a resolved token of another chain"
(``interface_tokens``' docstring; AF3 SI §2.7.3), also with one reference chain (the AF3 sampler's
chain units). C7: the default crop mix is AF3's weighted-PDB mix, contiguous 0.2, spatial 0.4,
spatial-interface 0.4 (SI Table 4), and it is what ``Cropper``, ``FeatureDataset`` and ``train``
use when none is given."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.client.crop import CropInput, Cropper, interface_tokens

AF3_INTERFACE_CROP_CUTOFF = 15.0  # Å, SI §2.7.3
AF3_CROP_MIX = (0.2, 0.4, 0.4)  # contiguous, spatial, spatial interface: SI Table 4


def _input(asym: list[int], resolved: list[bool], centre: list[tuple[float, float, float]]) -> CropInput:
    n = len(asym)
    return CropInput(
        asym_id=np.asarray(asym, dtype=np.int32),
        is_resolved=np.asarray(resolved, dtype=bool),
        centre=np.asarray(centre, dtype=np.float32),
        atom_count=np.ones(n, dtype=np.int64),
        group=np.arange(n, dtype=np.int64),
        interfaces=np.zeros((0, 2), dtype=np.int64),
    )


def test_an_unresolved_token_of_another_chain_is_no_interface_partner() -> None:
    # chain 0: one resolved token at (1, 0, 0); chain 1: an unresolved token at the origin (where
    # unresolved centres sit), 1 Å away, and a resolved one 99 Å away. No resolved pair within 15 Å.
    inp = _input([0, 1, 1], [True, False, True], [(1, 0, 0), (0, 0, 0), (100, 0, 0)])
    for chains in ([0], [1], [0, 1], []):
        assert interface_tokens(inp, chains, AF3_INTERFACE_CROP_CUTOFF).size == 0, chains
    # the same entry with chain 1's near token resolved has chain 0's token at its interface
    near = _input([0, 1, 1], [True, True, True], [(1, 0, 0), (0, 0, 0), (100, 0, 0)])
    assert interface_tokens(near, [0], AF3_INTERFACE_CROP_CUTOFF).tolist() == [0]
    assert interface_tokens(near, [1], AF3_INTERFACE_CROP_CUTOFF).tolist() == [1]


def _brute_force(inp: CropInput, chain: int) -> set[int]:
    res = inp.is_resolved
    xyz = inp.centre.astype(np.float64)
    mine = np.flatnonzero(res & (inp.asym_id == chain))
    other = np.flatnonzero(res & (inp.asym_id != chain))
    if not mine.size or not other.size:
        return set()
    d2 = ((xyz[mine, None, :] - xyz[None, other, :]) ** 2).sum(-1)
    return set(mine[(d2 < AF3_INTERFACE_CROP_CUTOFF**2).any(1)].tolist())


def test_one_chain_interface_tokens_on_real_entries(client_reader: Any) -> None:
    """Every chain of every multi-chain client entry (7pzb, 3u8v, 2q2k … whose unresolved tokens
    sit at the origin): its interface tokens are the brute-force set over resolved tokens."""
    checked = unresolved_entries = 0
    for eid in client_reader.ids:
        e = client_reader.entry(eid)
        inp = CropInput.from_arrays(e.tokens, e.atoms, e.bonds, e.interfaces)
        chains = np.unique(inp.asym_id).tolist()
        if len(chains) < 2:
            continue
        unresolved_entries += int((~inp.is_resolved).any())
        for c in chains:
            got = interface_tokens(inp, [c], AF3_INTERFACE_CROP_CUTOFF)
            assert set(got.tolist()) == _brute_force(inp, c), (eid, c)
            checked += bool(got.size)
    assert checked >= 10 and unresolved_entries >= 2


def test_default_crop_mix_is_af3s() -> None:
    assert Cropper().weights == pytest.approx(AF3_CROP_MIX)


def test_feature_dataset_and_train_default_to_af3s_crop_mix(client_store: Path) -> None:
    from featurecache.client import FeatureDataset
    from featurecache.model.train import run_training

    ds = FeatureDataset(client_store, crop_size=32)
    try:
        assert ds.cropper.weights == pytest.approx(AF3_CROP_MIX)
    finally:
        ds.close()
    default = inspect.signature(run_training).parameters["crop_weights"].default
    assert [float(w) / sum(default) for w in default] == pytest.approx(AF3_CROP_MIX)
