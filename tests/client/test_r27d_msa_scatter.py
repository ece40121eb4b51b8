"""``msa_features`` copies each chain's MSA block with slices and ``take`` where it can (review
R27d s45 #2): the same arrays, byte for byte, as the ``np.ix_`` gathers and scatters it used
before, which this test writes out as the reference (``_block_cells`` → ``a[np.ix_(r, c)]``,
``_cells`` → ``np.ix_(at, pos)``). Over real samples of the corpus store (homomers sharing one
MSA, a heteromer paired by species, deep MSAs, crops that cut chains) and synthetic edge cases
(copies given different rows and columns, a chain whose kept tokens are not one run, MSAs
shallower than the sample's rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.client import FeatureDataset, assemble
from featurecache.client.sampler import SampleKey
from featurecache.const import MolType
from featurecache.types import MSABlock

ENTRIES = ("5kc1", "2q2k", "721p-assembly1", "7pzb", "3u8v", "7a4d-assembly1", "102m", "1k1a")
#: (crop_size, max_msa_rows): train's settings, and a small crop of few rows (copies cut apart)
SETTINGS = ((384, 1024), (48, 24))


def _reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assemble, "_block_cells", lambda a, r_in, c_in: a[np.ix_(r_in, c_in)])
    monkeypatch.setattr(assemble, "_cells", lambda at, n_rows, pos: np.ix_(at, pos))


def _assert_same(new: dict[str, Any], ref: dict[str, Any], what: str) -> None:
    arrays = [k for k in ref if isinstance(ref[k], np.ndarray)]
    assert arrays and sorted(arrays) == sorted(k for k in new if isinstance(new[k], np.ndarray))
    for k in arrays:
        a, b = new[k], ref[k]
        assert (a.dtype, a.shape) == (b.dtype, b.shape), (what, k)
        assert a.tobytes() == b.tobytes(), (what, k)


@pytest.mark.parametrize(("crop", "rows"), SETTINGS)
def test_real_samples_equal_the_ix_reference(
    corpus_store: Path, monkeypatch: pytest.MonkeyPatch, crop: int, rows: int
) -> None:
    ds = FeatureDataset(corpus_store, crop_size=crop, weighting="uniform", max_msa_rows=rows, seed=0)
    keys = [SampleKey(i, 0, i, e, ()) for e in ENTRIES for i in range(3)]
    new = [ds.job(k) for k in keys]
    with monkeypatch.context() as m:
        _reference(m)
        ref = [ds.job(k) for k in keys]
    assert sum(s["msa"].shape[0] > 1 for s in new) >= len(keys) // 2  # MSA rows were read
    for k, a, b in zip(keys, new, ref, strict=True):
        _assert_same(a, b, k.entry_id)


class _FakeMSAs:
    """Random stored MSAs: ``msa(key, rows, cols)`` as a reader answers it."""

    def __init__(self, shapes: dict[str, tuple[int, int]], seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.shapes = shapes
        self.res = {k: rng.integers(0, 32, (d, n), dtype=np.uint8) for k, (d, n) in shapes.items()}
        self.dels = {k: rng.integers(0, 40, (d, n), dtype=np.int16) * (rng.random((d, n)) < 0.2)
                     for k, (d, n) in shapes.items()}  # fmt: skip
        self.prof = {k: rng.random((n, 32), dtype=np.float32) for k, (_, n) in shapes.items()}

    def msa(self, key: str, rows: np.ndarray, cols: np.ndarray) -> MSABlock:
        r, c = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
        d, n = self.shapes[key]
        return MSABlock(key=key, residues=self.res[key][np.ix_(r, c)],
                        deletions=self.dels[key][np.ix_(r, c)].astype(np.int16),
                        species=np.zeros(r.size, np.int32), source=np.zeros(r.size, np.uint8),
                        profile=self.prof[key][c], deletion_mean=self.prof[key][c, 0], depth=d, length=n)  # fmt: skip


def _tokens(asym: np.ndarray, mol: np.ndarray) -> dict[str, np.ndarray]:
    new_chain = np.r_[True, asym[1:] != asym[:-1]]
    start = np.maximum.accumulate(np.where(new_chain, np.arange(asym.size), 0))
    return {"asym_id": asym, "residue_index": np.arange(asym.size) - start + 1, "mol_type": mol,
            "restype": np.arange(asym.size) % 20}  # fmt: skip


#: (name, asym id of each token, keep, {asym: key}, {key: (depth, length)}, max_msa_rows)
CASES = [
    # a homomer: two copies of one key, each given its own rows; a crop that keeps part of each
    ("homomer", np.repeat([0, 1], 30), np.r_[5:30, 30:52], {0: "a", 1: "a"}, {"a": (500, 30)}, 64),
    # a homomer whose copies each take every row of a shallow MSA, in their own orders
    ("homomer_all_rows", np.repeat([0, 1], 16), np.arange(32), {0: "a", 1: "a"}, {"a": (15, 16)}, 64),
    # one chain shallower than the sample's rows (its copy fills only some of them), one deeper
    ("shallow", np.repeat([0, 1, 2], 20), np.arange(60), {0: "a", 1: "b", 2: "b"}, {"a": (7, 20), "b": (90, 20)}, 32),
    # the whole MSA fits: every row, every column, no gather
    ("whole", np.repeat([0], 25), np.arange(25), {0: "a"}, {"a": (10, 25)}, 64),
    # a chain whose kept tokens are not one run of the crop (tokens of two chains interleaved)
    ("interleaved", np.array([0, 1] * 15), np.r_[0:20, 22:30], {0: "a", 1: "b"}, {"a": (40, 15), "b": (40, 15)}, 16),
    # copies of one key and a ligand between them
    ("ligand", np.r_[np.zeros(12, int), [5, 5], np.ones(12, int)], np.arange(26), {0: "a", 1: "a"}, {"a": (300, 12)}, 8),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_edge_cases_equal_the_ix_reference(
    monkeypatch: pytest.MonkeyPatch, case: tuple[Any, ...], seed: int
) -> None:
    _, asym, keep, keys, shapes, max_rows = case
    mol = np.where(np.isin(asym, list(keys)), MolType.PROTEIN, MolType.LIGAND)
    tokens = _tokens(np.asarray(asym, np.int64), mol)
    chains = [{"asym_id": c, "mol_type": MolType.PROTEIN, "msa_key": k} for c, k in keys.items()]
    fake = _FakeMSAs(shapes, seed)

    def run() -> dict[str, np.ndarray]:
        return assemble.msa_features(tokens, np.asarray(keep), chains, fake.msa, np.random.default_rng(seed),
                                     max_rows, msa_shape=shapes.get, pair_msa=False)  # fmt: skip

    new = run()
    with monkeypatch.context() as m:
        _reference(m)
        ref = run()
    assert new["msa"].shape[0] > 1
    _assert_same(new, ref, case[0])  # type: ignore[arg-type]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_copies_given_their_own_rows_equal_the_ix_reference(
    monkeypatch: pytest.MonkeyPatch, case: tuple[Any, ...]
) -> None:
    """Copies of one MSA get the same rows from today's :func:`~assemble.msa_row_plan`; a plan
    that gives each chain its own rows, in any order, with gaps (-1), is scattered the same way
    (the block's rows then are a permutation, or a subset, for each copy)."""

    def plan(
        depths: dict[int, int], rng: np.random.Generator, max_rows: int, *_: Any
    ) -> dict[int, np.ndarray]:
        out = {}
        for c, d in depths.items():
            rows = rng.permutation(d)[: min(d, max_rows)]
            if c % 3 == 2:  # gaps in some chains' rows; the others take every row of a shallow MSA
                rows[rng.random(rows.size) < 0.2] = -1
            out[c] = rows
        return out

    monkeypatch.setattr(assemble, "msa_row_plan", plan)
    test_edge_cases_equal_the_ix_reference(monkeypatch, case, 3)


@pytest.mark.parametrize("seed", range(20))
def test_block_cells_and_cells_are_ix(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 255, (int(rng.integers(1, 9)), int(rng.integers(0, 9))), dtype=np.uint8)
    empty = a[:0]  # a block of no rows (an empty selection)
    cases = [(empty, np.zeros(0, np.int64), np.arange(a.shape[1]))]
    for r_in in (np.arange(a.shape[0]), rng.permutation(a.shape[0]), rng.integers(0, a.shape[0], 3)):
        for c_in in (np.arange(a.shape[1]), np.sort(rng.choice(a.shape[1], a.shape[1] // 2, replace=False))):
            cases.append((a, r_in, c_in))
    for blk, r_in, c_in in cases:
        got, want = assemble._block_cells(blk, r_in, c_in), blk[np.ix_(r_in, c_in)]
        assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes())
    n_rows, n = 6, 10
    for at in (np.arange(n_rows), np.array([0, 2, 3]), np.arange(n_rows - 1), np.zeros(0, np.int64)):
        for pos in (np.arange(3, 7), np.array([1, 4, 5]), np.arange(n), np.array([9])):
            out, want = np.zeros((n_rows, n), np.int16), np.zeros((n_rows, n), np.int16)
            vals = rng.integers(1, 100, (at.size, pos.size)).astype(np.int16)
            out[assemble._cells(at, n_rows, pos)] = vals
            want[np.ix_(at, pos)] = vals
            assert out.tobytes() == want.tobytes(), (at, pos)
