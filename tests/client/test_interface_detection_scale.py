"""Interface detection for spatial-interface crops: bounded memory on large entries, same tokens as
the plain definition (review R14 s40).

A spatial-interface crop centred on one chain (40 % of chain-unit samples under AF3's weights) asks
which of its tokens lie within 15 Å of a token of any other chain. That compared up to 2048 of the
chain's tokens with every other token at once, as float64 ``[2048, n_other, 3]`` arrays: on 1ffk
(23S rRNA, 2,922 tokens against 3,906) 0.7–1.4 s and ~230 MiB for one crop, in every loader thread
at once. The tokens found must stay exactly those of the definition: a resolved token whose centre
is at a distance < 15 Å of a resolved centre of another chain."""

from __future__ import annotations

import tracemalloc

import numpy as np

from featurecache.client.crop import (
    INTERFACE_CROP_CUTOFF,
    CropInput,
    crop_spatial_interface,
    interface_tokens,
)


def _input(n_a: int, n_b: int, box: float, seed: int, other_chains: int = 40) -> CropInput:
    """Chain 0 of ``n_a`` tokens and ``other_chains`` chains of ``n_b`` tokens in all, uniformly
    in a cube of side ``box`` Å; one token in 17 unresolved."""
    rng = np.random.default_rng(seed)
    n = n_a + n_b
    asym = np.concatenate([np.zeros(n_a, np.int64), 1 + np.arange(n_b) % other_chains])
    resolved = np.arange(n) % 17 != 5
    return CropInput(
        asym_id=asym, is_resolved=resolved, centre=(rng.random((n, 3)) * box).astype(np.float32),
        atom_count=np.full(n, 8), group=np.arange(n, dtype=np.int64), interfaces=np.zeros((0, 2), np.int64),
    )  # fmt: skip


def _brute_force(inp: CropInput, chains: list[int]) -> np.ndarray:
    """The definition, written out: every pair compared, float64, strict < 15 Å."""
    xyz = inp.centre.astype(np.float64)
    res, asym = inp.is_resolved, inp.asym_id
    d2 = ((xyz[:, None, :] - xyz[None, :, :]) ** 2).sum(-1)
    near = d2 < INTERFACE_CROP_CUTOFF**2
    if len(chains) == 2:
        a, b = res & (asym == chains[0]), res & (asym == chains[1])
        hit = (a & (near & b[None, :]).any(1)) | (b & (near & a[None, :]).any(1))
    elif len(chains) == 1:
        a = res & (asym == chains[0])
        hit = a & (near & (res & (asym != chains[0]))[None, :]).any(1)
    else:
        other = asym[:, None] != asym[None, :]
        hit = res & (near & other & res[None, :]).any(1)
    return np.flatnonzero(hit)


def test_interface_tokens_are_those_of_the_definition() -> None:
    inp = _input(300, 900, box=70.0, seed=3, other_chains=5)
    # two pairs of chains 0 and 1 placed alone, far from the rest, on the boundary: exactly 15 Å
    # apart (float32-exact) is not within, 14.99 Å is
    assert inp.asym_id[[0, 1, 300, 305]].tolist() == [0, 0, 1, 1]
    inp.centre[0] = (300.0, 0.0, 0.0)
    inp.centre[300] = (315.0, 0.0, 0.0)
    inp.centre[1] = (500.0, 500.0, 500.0)
    inp.centre[305] = (514.99, 500.0, 500.0)
    checked = 0
    for chains in ([0], [0, 1], [2, 3], []):
        got = interface_tokens(inp, chains)
        want = _brute_force(inp, chains)
        np.testing.assert_array_equal(got, want, err_msg=str(chains))
        checked += want.size
    assert checked > 500  # the instance has interfaces to find
    both = interface_tokens(inp, [0, 1])
    assert 0 not in both and 300 not in both and 1 in both and 305 in both


def test_a_large_chain_in_a_large_entry_stays_small() -> None:
    """Chain 0 of 3,000 tokens among 12,000 of 40 other chains in a 150 Å box (the dense form took
    ~750 MiB of numpy temporaries): the numpy memory of a crop stays under 64 MiB."""
    inp = _input(3000, 12000, box=150.0, seed=0)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        crop = crop_spatial_interface(inp, np.random.default_rng(0), 384, None, [0])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert crop.method == "spatial_interface" and crop.indices.size == 384
    assert inp.asym_id[crop.centre_token] == 0
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB"
