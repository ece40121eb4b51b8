"""The distogram objective against independent oracles (review R25c s43): its targets are the
float64 binning of the representative atoms' distances wherever the frame's origin is (#3); a
sample without a supervised pair does not count in the batch's mean (#2; the numpy oracle of the
per-sample mean is tests/model/test_trunk.py's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from featurecache.client import FeatureDataset
from featurecache.client.assemble import collate
from featurecache.client.schema import MODEL_INPUT_KEYS
from featurecache.model.batches import synthetic_batch
from featurecache.model.config import ModelConfig
from featurecache.model.trunk import Trunk, distogram_edges, distogram_target, supervised_pairs

#: the sample store's entries reach 126 Å from the origin; moved by this, several hundred Å (the frame
#: of a large assembly or a cryo-EM map)
FAR = torch.tensor([400.0, -350.0, 300.0])


@pytest.fixture(scope="module")
def real_batch(sample_store: Path) -> dict[str, Any]:
    """One sample of each of the sample store's 6 entries (crop 384: most whole), as one batch, with
    the representative atoms snapped to a 2⁻¹⁰ Å grid (the PDB's 0.001 Å): then adding :data:`FAR`
    is exact in fp32, so a target that changes with it changed through its own arithmetic."""
    ds = FeatureDataset(sample_store, crop_size=384, seed=0, workers=1, weighting="uniform")
    try:
        batch = collate([ds.sample(p) for p in range(6)])
    finally:
        ds.close()
    assert len(set(batch["entry_id"])) == 6
    batch["rep_coords"] = torch.round(batch["rep_coords"] * 1024) / 1024
    moved = batch["rep_coords"] + FAR
    assert torch.equal(moved - FAR, batch["rep_coords"])  # exact
    return batch


def _moved(batch: dict[str, Any]) -> dict[str, Any]:
    return {**batch, "rep_coords": batch["rep_coords"] + FAR}


def test_distogram_target_is_the_float64_binning_wherever_the_origin_is(real_batch: dict[str, Any]) -> None:
    """Against numpy: float64 differences, AF3's breaks, ``edges[k-1] < d ≤ edges[k]``. fp32
    ``torch.cdist`` (``|x|²+|y|²−2x·y``) put 0.1-0.5 % of these pairs in another bin once moved."""
    edges = distogram_edges(ModelConfig())
    x = real_batch["rep_coords"].numpy().astype(np.float64)
    d = np.sqrt(((x[:, :, None] - x[:, None]) ** 2).sum(-1))
    want = torch.from_numpy(np.searchsorted(edges.double().numpy(), d, side="left"))
    here = distogram_target(real_batch["rep_coords"], edges)
    there = distogram_target(_moved(real_batch)["rep_coords"], edges)
    ok = real_batch["rep_mask"] & real_batch["token_mask"]
    pairs = ok[:, :, None] & ok[:, None, :]
    assert int(pairs.sum()) > 100_000
    assert int((here != want)[pairs].sum()) == 0
    assert int((there != want)[pairs].sum()) == 0


def test_distogram_loss_does_not_move_with_the_frame(real_batch: dict[str, Any]) -> None:
    """The same logits against the same structure moved 400 Å away: the same loss, bit for bit."""
    cfg = ModelConfig(c_token=32, c_pair=16, n_blocks=1, n_heads=1, head_dim=16, n_heads_single=2)
    model = Trunk(cfg, fused=False)
    batch = {k: real_batch[k] for k in MODEL_INPUT_KEYS}
    n = batch["token_mask"].shape[1]
    logits = torch.randn(6, n, n, cfg.distogram_bins, generator=torch.Generator().manual_seed(0))
    here = model.distogram.loss(logits, batch)
    there = model.distogram.loss(logits, _moved(batch))
    assert float(here) == float(there)


def test_a_sample_without_pairs_does_not_count_in_the_batch_mean() -> None:
    """A batch of a sample and one whose representative atoms are all unresolved: its loss is the
    first sample's alone (the mean is over the samples that have pairs, not over the batch)."""
    cfg = ModelConfig(c_token=32, c_pair=16, n_blocks=1, n_heads=1, head_dim=16, n_heads_single=2)
    torch.manual_seed(0)
    model = Trunk(cfg, fused=False)
    batch = synthetic_batch(np.random.default_rng(2), 2, 12, msa_rows=3, full=False)
    batch = {k: batch[k] for k in MODEL_INPUT_KEYS}
    batch["rep_mask"][1] = False
    assert supervised_pairs(batch)[1] == 0 and supervised_pairs(batch)[0] > 0
    with torch.no_grad():
        logits = model(batch)
        both = float(model.distogram.loss(logits, batch))
        first = float(model.distogram.loss(logits[:1], {k: v[:1] for k, v in batch.items()}))
    assert both == pytest.approx(first, rel=1e-6)
