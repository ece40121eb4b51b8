"""A spatial crop of a per-token input without an atom budget is the first ``max_tokens`` tokens
of the spatial ranking, sorted (review R27d s45 #7): ``_nearest`` takes that path when the input
says every token is its own group (:meth:`CropInput.per_token` sets ``singleton_groups``). The
crops must be the tokens the group bookkeeping picks (the path every other input still takes,
here the reference: the same input with ``singleton_groups=False``), over real entries of the
corpus store and inputs made of ties (tokens on one centre, unresolved tokens).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import featurecache
from featurecache.client import crop as crop_mod
from featurecache.client.crop import CropInput, Cropper

#: large entries (thousands of tokens), ligands, DNA, a peptide
ENTRIES = ("1ffk", "6wg6", "5kc1", "7CFN", "2XHE", "7DDO", "102m", "7pzb", "721p-assembly1")


@pytest.fixture(scope="module")
def inputs(corpus_store: Path) -> dict[str, CropInput]:
    with featurecache.open_store(corpus_store) as reader:
        out = {}
        for eid in ENTRIES:
            e = reader.entry(eid)
            out[eid] = CropInput.from_arrays(e.tokens, e.atoms, e.bonds, e.interfaces)
    return out


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert (a.dtype, a.shape, a.tobytes()) == (b.dtype, b.shape, b.tobytes())


@pytest.mark.parametrize("max_tokens", [1, 48, 384, 768, 10**6])
def test_nearest_equals_the_group_path_on_real_entries(inputs: dict[str, CropInput], max_tokens: int) -> None:
    rng = np.random.default_rng(max_tokens)
    for inp in inputs.values():
        fast = inp.per_token()
        slow = replace(fast, singleton_groups=False)
        assert fast.singleton_groups and not inp.singleton_groups
        for ref in rng.choice(inp.n_tokens, size=min(8, inp.n_tokens), replace=False).tolist():
            _same(
                crop_mod._nearest(fast, ref, max_tokens, None), crop_mod._nearest(slow, ref, max_tokens, None)
            )


def test_ties_pick_the_same_tokens() -> None:
    """Tokens on one centre (the tie-break by index decides), unresolved tokens (ranked last in
    entry order) and the reference among tokens on its own centre."""
    rng = np.random.default_rng(7)
    n = 300
    centre = np.repeat(rng.normal(size=(30, 3)).astype(np.float32), 10, axis=0)[rng.permutation(n)]
    inp = CropInput(asym_id=np.repeat(np.arange(3), 100), is_resolved=rng.random(n) < 0.7, centre=centre,
                    atom_count=np.ones(n, np.int64), group=np.arange(n) // 5,
                    interfaces=np.zeros((0, 2), np.int64)).per_token()  # fmt: skip
    slow = replace(inp, singleton_groups=False)
    for ref in range(n):
        for k in (1, 9, 10, 11, 150, 209, 210, 211, n, n + 5):
            _same(crop_mod._nearest(inp, ref, k, None), crop_mod._nearest(slow, ref, k, None))


def test_an_atom_budget_keeps_the_group_path(
    inputs: dict[str, CropInput], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    monkeypatch.setattr(crop_mod, "crop_groups", lambda *a: calls.append(a) or a[0].group)
    crop_mod._nearest(inputs["5kc1"].per_token(), 0, 384, 4000)
    assert calls  # the budgeted crop went through the groups
    calls.clear()
    crop_mod._nearest(inputs["5kc1"].per_token(), 0, 384, None)
    assert not calls


@pytest.mark.parametrize("method", [(0, 1, 0), (0, 0, 1), (0.2, 0.4, 0.4)])
def test_croppers_equal_the_group_path(
    inputs: dict[str, CropInput], monkeypatch: pytest.MonkeyPatch, method: tuple[float, float, float]
) -> None:
    """Whole crops through :class:`Cropper` (its default: per token), reference chains or not."""
    cropper = Cropper(max_tokens=384, weights=method)
    keys = [(eid, seed, chains) for eid in inputs for seed in range(6) for chains in (None, (0,), (0, 1))]
    fast = [cropper(inputs[eid], np.random.default_rng(seed), chains) for eid, seed, chains in keys]
    with monkeypatch.context() as m:
        per_token = CropInput.per_token
        m.setattr(CropInput, "per_token", lambda self: replace(per_token(self), singleton_groups=False))
        slow = [cropper(inputs[eid], np.random.default_rng(seed), chains) for eid, seed, chains in keys]
    for key, a, b in zip(keys, fast, slow, strict=True):
        assert (a.method, a.centre_token) == (b.method, b.centre_token), key
        _same(a.indices, b.indices)
