"""Unpaired MSA rows are drawn as AF3 draws them: one set of row indices for all chains.

AF3 (``merging_features.merge_msa_features``) pads every chain's unpaired MSA to the deepest one
and concatenates them along the residues, then picks whole merged rows: merged row ``j`` is each
chain's ``j``-th unpaired row (a gap past a shorter chain's depth). So copies of one sequence
carry the same MSA row in every row of a sample, and one draw of merged indices serves all chains.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from featurecache.client import FeatureDataset
from featurecache.client.assemble import msa_row_plan
from featurecache.client.sampler import SamplerFilter
from featurecache.const import MolType
from tests.client.conftest import _real_store

HOMOMER = "3u8v"  # two protein chains of one sequence (SOURCES.tsv: "MSAs in 3u8v_A (B identical)")


@pytest.fixture(scope="module")
def homomer_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real store (real build, CCD) of 3u8v with its real OpenFold MSA directory."""
    return _real_store(tmp_path_factory, "homomer", (f"{HOMOMER}.cif",), ("openfold/3u8v_A",))


def test_homomer_copies_carry_the_same_row_in_every_sample_row(homomer_store: Path) -> None:
    import featurecache

    reader = featurecache.open_store(homomer_store)
    try:
        chains = [row for row in reader.chains.to_pylist() if row["entry_id"] == HOMOMER]
        depth = {row["key"]: row["depth"] for row in reader.msas.to_pylist()}
    finally:
        reader.close()
    copies = [int(ch["asym_id"]) for ch in chains if ch["msa_key"] and int(ch["mol_type"]) == MolType.PROTEIN]
    assert len(copies) >= 2 and len({ch["msa_key"] for ch in chains if ch["msa_key"]}) == 1
    assert depth[next(ch["msa_key"] for ch in chains if ch["msa_key"])] > 1000  # deep: rows to draw from
    a, b = copies[:2]
    ds = FeatureDataset(homomer_store, crop_size=384, filters=SamplerFilter(ids=[HOMOMER]), seed=0, workers=1)
    compared = informative = 0
    for p in range(8):
        s = ds.sample(p)
        msa, mask, dels = s["msa"], s["msa_mask"], s["msa_deletions"]
        pos_a, pos_b = np.flatnonzero(s["asym_id"] == a), np.flatnonzero(s["asym_id"] == b)
        # the residue columns both copies hold in this crop (one token per residue: a plain protein)
        shared, ia, ib = np.intersect1d(
            s["residue_index"][pos_a], s["residue_index"][pos_b], return_indices=True
        )
        if not shared.size:
            continue
        ca, cb = pos_a[ia], pos_b[ib]
        for r in range(1, msa.shape[0]):
            np.testing.assert_array_equal(msa[r, ca], msa[r, cb], err_msg=f"sample {p} row {r}")
            np.testing.assert_array_equal(mask[r, ca], mask[r, cb], err_msg=f"sample {p} row {r}")
            np.testing.assert_array_equal(dels[r, ca], dels[r, cb], err_msg=f"sample {p} row {r}")
            compared += 1
            informative += int(mask[r, ca].all() and (msa[r, ca] != msa[0, ca]).any())
    assert compared > 500  # many rows compared, and real ones (not the query again)
    assert informative > 0.5 * compared


def test_one_draw_of_merged_indices_serves_every_chain() -> None:
    depths = {0: 10, 1: 4}  # unpaired pools: chain 0 rows 1..9 (U = 9), chain 1 rows 1..3
    saw_gap = saw_real = 0
    for seed in range(60):
        plan = msa_row_plan(depths, np.random.default_rng(seed), 1024)
        assert plan[0][0] == 0 and plan[1][0] == 0
        j = plan[0][1:] - 1  # chain 0's pool is rows 1..9 in order: merged index j is row j + 1
        assert set(j.tolist()) <= set(range(9)) and np.unique(j).size == j.size
        want_1 = np.where(j < 3, j + 1, -1)
        np.testing.assert_array_equal(plan[1], np.r_[0, want_1], err_msg=f"seed {seed}")
        saw_gap += int((want_1 == -1).any())
        saw_real += int((want_1 > 0).any())
    assert saw_gap and saw_real


def test_paired_rows_stay_and_the_unpaired_block_is_shared() -> None:
    # MSA "A": species 5 at row 1, 6 at row 2, 7 at row 3, 8 at row 6; MSA "B": 5 at row 1, 9 at 2,
    # 6 at row 3. Species 5 and 6 pair (A1-B1, A2-B3); the unpaired pools are then, by hand,
    # A: rows 3, 4, 5, 6 (U = 4), B: row 2; chain 3 (not paired, depth 3): rows 1, 2.
    species = {"A": np.asarray([0, 5, 6, 7, 0, 0, 8]), "B": np.asarray([0, 5, 9, 6])}
    depths = {0: 7, 1: 4, 2: 7, 3: 3}
    pool = {0: np.asarray([3, 4, 5, 6]), 1: np.asarray([2]), 3: np.asarray([1, 2])}
    paired = {(1, 1), (2, 3)}
    for seed in range(40):
        plan = msa_row_plan(depths, np.random.default_rng(seed), 1024, {0: "A", 1: "B", 2: "A"}, species)
        n = plan[0].size
        # the paired rows drawn (A's rows 1, 2) lead; how many is a uniform draw over the stacked
        # MSA (tests/client/test_e4_msa_rows.py)
        p = int(np.isin(plan[0][1:], [1, 2]).sum())
        assert np.isin(plan[0][1 : 1 + p], [1, 2]).all()
        for c in depths:
            assert plan[c].size == n and plan[c][0] == 0
        assert {
            (int(x), int(y)) for x, y in zip(plan[0][1 : 1 + p], plan[1][1 : 1 + p], strict=True)
        } <= paired
        assert np.all(plan[3][1 : 1 + p] == -1)
        np.testing.assert_array_equal(plan[0], plan[2])  # the copy: every row the same
        rows_0 = plan[0][1 + p :]
        assert np.isin(rows_0, pool[0]).all()
        j = np.searchsorted(pool[0], rows_0)  # merged index of each drawn unpaired row
        assert np.all(np.diff(j) > 0)
        for c in (1, 3):
            want = np.where(j < pool[c].size, pool[c][np.minimum(j, pool[c].size - 1)], -1)
            np.testing.assert_array_equal(plan[c][1 + p :], want, err_msg=f"seed {seed} chain {c}")


def test_every_merged_index_is_equally_likely() -> None:
    # depths 30 and 5, at most 12 rows: D = 30, n uniform in 1..12, so k = n - 1 unpaired rows,
    # E[k] = 5.5, drawn from U = 29 merged rows: each index is chosen with p = 5.5 / 29.
    depths, max_rows, draws = {0: 30, 1: 5}, 12, 3000
    p = 5.5 / 29
    hits = np.zeros(29)
    hits_1 = np.zeros(4)  # chain 1's rows 1..4 are merged indices 0..3: the same p each
    rng = np.random.default_rng(12345)
    for _ in range(draws):
        plan = msa_row_plan(depths, rng, max_rows)
        hits[plan[0][1:] - 1] += 1
        real = plan[1][1:][plan[1][1:] > 0]
        hits_1[real - 1] += 1
    sd = math.sqrt(p * (1 - p) / draws)  # ~0.0072: a bias of 0.033 or more in any index fails
    assert np.abs(hits / draws - p).max() < 4.5 * sd, hits / draws
    assert np.abs(hits_1 / draws - p).max() < 4.5 * sd, hits_1 / draws
