"""The trunk's initialisation is AF3's (review R25c s43 #4): the distogram head starts at zero, so
the first loss is the uniform distribution's, ln(bins), on any batch; every residual branch's output
starts at zero ("final" init, AF2 supplement 1.11.4), so each block starts as the identity; and the
relative-position tables are AF3's one LinearNoBias over the 139-wide one-hot, LeCun-initialised
(std 1/√139), not nn.Embedding's N(0, 1)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from featurecache.client import FeatureDataset
from featurecache.client.assemble import collate
from featurecache.client.schema import MODEL_INPUT_KEYS
from featurecache.model.batches import synthetic_batch
from featurecache.model.config import ModelConfig
from featurecache.model.trunk import Trunk

#: small channels, AF3's 64 distogram bins and relative-position clips
CFG = ModelConfig(c_token=32, c_pair=32, n_blocks=2, n_heads=2, head_dim=16, n_heads_single=2, transition_n=2)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_first_loss_is_ln_64_on_any_batch(seed: int, sample_store: Path) -> None:
    """Uniform logits: each pair's cross-entropy is ln 64, whatever its target; the mean of equal
    terms is that term (synthetic batches of two sizes, and two real samples in one batch)."""
    torch.manual_seed(seed)
    model = Trunk(CFG, fused=False)
    batches = [synthetic_batch(np.random.default_rng(seed), 2, 24, msa_rows=5, full=False)]
    ds = FeatureDataset(sample_store, crop_size=32, seed=seed, workers=1, weighting="uniform")
    try:
        batches.append(collate([ds.sample(0), ds.sample(1)]))
    finally:
        ds.close()
    with torch.no_grad():
        for batch in batches:
            loss = model.loss({k: batch[k] for k in MODEL_INPUT_KEYS})
            assert float(loss) == pytest.approx(math.log(64), rel=1e-6)


def test_each_block_starts_as_the_identity() -> None:
    torch.manual_seed(0)
    model = Trunk(CFG, fused=False)
    batch = synthetic_batch(np.random.default_rng(0), 2, 16, msa_rows=4, full=True)
    with torch.no_grad():
        s, z = model.embed(batch)
        for block in model.blocks:
            s2, z2 = block(s, z, batch["token_mask"])
            assert torch.equal(s2, s) and torch.equal(z2, z)


def test_relative_position_tables_start_at_af3s_scale() -> None:
    """The tables and the same-entity vector are the rows of AF3's one LinearNoBias over the one-hot
    of Alg. 3 (2·(2·32+2) + 1 + (2·2+2) = 139 inputs): together, std 1/√139 (0.085), mean 0."""
    torch.manual_seed(0)
    emb = Trunk(ModelConfig(), fused=False).embed  # c_pair 128: 139 × 128 weights
    w = torch.cat(
        [emb.rel_res.weight, emb.rel_token.weight, emb.same_entity[None], emb.rel_chain.weight]
    ).detach()
    assert tuple(w.shape) == (139, 128)
    assert float(w.std()) == pytest.approx(1 / math.sqrt(139), rel=0.03)
    assert abs(float(w.mean())) < 3 / math.sqrt(139 * 128) / math.sqrt(139)
