"""The analytic memory ledger against the architecture it models (parameter count, batch bytes)
and against the bytes a real CPU step keeps alive (reference kernels, fp32 and bf16 autocast)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from featurecache.client.schema import MODEL_INPUT_KEYS
from featurecache.model.batches import synthetic_batch
from featurecache.model.config import ModelConfig
from featurecache.model.trunk import Trunk
from featurecache.plan.memory import (
    CUDA_WORKSPACE_BYTES,
    Precision,
    batch_bytes,
    estimate_step,
    max_tokens_within,
    parameter_count,
)
from tests.plan.memtrace import LiveBytes

SMALL = ModelConfig(c_token=64, c_pair=32, n_blocks=2, n_heads=2, head_dim=16, n_heads_single=2,
                    transition_n=2, distogram_bins=16)  # fmt: skip


@pytest.mark.parametrize("cfg", [ModelConfig(), SMALL], ids=["default", "small"])
def test_parameter_count_is_the_models(cfg: ModelConfig) -> None:
    model = Trunk(cfg, fused=False)
    assert parameter_count(cfg) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("n", "m"), [(7, 1), (33, 17)])
def test_batch_bytes_is_the_batchs(n: int, m: int) -> None:
    batch = synthetic_batch(np.random.default_rng(0), 2, n, msa_rows=m)
    assert batch_bytes(2, n, m) == sum(batch[k].numel() * batch[k].element_size() for k in MODEL_INPUT_KEYS)


def _traced_step(cfg: ModelConfig, n: int, m: int, autocast: bool) -> tuple[int, int]:
    """(live bytes after the forward, peak live bytes) of one real CPU step, reference kernels;
    parameters, gradients (preallocated, as in any step after the first) and the batch excluded."""
    torch.manual_seed(0)
    model = Trunk(cfg, fused=False)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    batch = synthetic_batch(np.random.default_rng(1), 1, n, msa_rows=m)
    exclude = [
        *model.parameters(),
        *(p.grad for p in model.parameters() if p.grad is not None),
        *batch.values(),
    ]
    with LiveBytes(exclude=exclude) as tracer:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model.loss(batch)
        after_forward = tracer.live
        loss.backward()
    return after_forward, tracer.peak


@pytest.mark.parametrize("n", [24, 40])
@pytest.mark.parametrize("cfg", [ModelConfig(), SMALL], ids=["default", "small"])
def test_ledger_matches_a_traced_fp32_step(cfg: ModelConfig, n: int) -> None:
    forward, peak = _traced_step(cfg, n, 8, autocast=False)
    est = estimate_step(cfg, n, 8, 1, fused=False, precision=Precision.fp32(), overhead_bytes=0)
    assert est.saved_bytes == pytest.approx(forward, rel=0.02)
    assert est.activation_peak_bytes == pytest.approx(peak, rel=0.02)


def test_ledger_matches_a_traced_bf16_autocast_step() -> None:
    """CPU autocast keeps exp in bf16 (CUDA's runs it in fp32): Precision(2, exp_fp32=False).
    The traced step also holds the bf16 weight copies the GEMMs saved."""
    cfg, n = ModelConfig(), 40
    forward, peak = _traced_step(cfg, n, 8, autocast=True)
    est = estimate_step(cfg, n, 8, 1, fused=False, precision=Precision(2, False), overhead_bytes=0)
    assert est.activation_peak_bytes + est.weight_copy_bytes == pytest.approx(peak, rel=0.03)
    assert est.saved_bytes + est.weight_copy_bytes == pytest.approx(forward, rel=0.03)


def test_fused_kernels_never_hold_the_scores() -> None:
    """Reference attention saves exp(scores) (fp32) and the bf16 probabilities of every triangle
    attention: at N the difference to the fused kernels grows like N³."""
    cfg = ModelConfig()
    gaps = []
    for n in (128, 256):
        ref = estimate_step(cfg, n, 1, fused=False).saved_bytes
        fused = estimate_step(cfg, n, 1, fused=True).saved_bytes
        gaps.append(ref - fused)
        scores = 2 * cfg.n_blocks * cfg.n_heads * n**3 * (4 + 2)  # two triangle attentions per block
        assert ref - fused >= scores
    assert gaps[1] / gaps[0] > 6  # ~N³ (8 for pure N³, minus the N² terms)


def test_peak_grows_with_tokens_and_rows() -> None:
    cfg = ModelConfig()
    peaks = [estimate_step(cfg, n, 64).peak_bytes for n in (64, 128, 256, 384)]
    assert peaks == sorted(peaks) and len(set(peaks)) == 4
    assert estimate_step(cfg, 256, 1024).peak_bytes > estimate_step(cfg, 256, 1).peak_bytes
    assert estimate_step(cfg, 8, 1).peak_bytes > CUDA_WORKSPACE_BYTES


@pytest.mark.parametrize("fused", [True, False])
def test_max_tokens_is_the_boundary(fused: bool) -> None:
    cfg, budget = ModelConfig(), 20 * 2**30
    n = max_tokens_within(budget, cfg, 256, fused=fused)
    assert 0 < n < 8192
    assert estimate_step(cfg, n, 256, fused=fused).peak_bytes <= budget
    assert estimate_step(cfg, n + 1, 256, fused=fused).peak_bytes > budget
