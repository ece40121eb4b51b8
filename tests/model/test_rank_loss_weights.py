"""Two ranks (gloo, on the CPU, in a process group this test starts: no torchrun) train one step on
batches of two samples and of one: the logged loss and gradient norm are those of the mean over the
three samples, as one process computes them sample by sample (review R25c s43 #2; dividing the
ranks' sum by the number of ranks gave the lone sample the weight of the other two). Then a step
neither rank has a supervised pair for, and one only rank 0 has (#1)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from featurecache.client.schema import MODEL_INPUT_KEYS
from featurecache.model.batches import synthetic_batch
from featurecache.model.trunk import Trunk
from tests.model.test_trunk import TINY

SEED = 0


def _batches() -> list[dict[str, torch.Tensor]]:
    """Rank 0's batch (two samples, of 6 and 11 tokens) and rank 1's (one of 9)."""
    rng = np.random.default_rng(11)
    two = synthetic_batch(rng, 2, 12, msa_rows=3, full=False)
    one = synthetic_batch(rng, 1, 10, msa_rows=3, full=False)
    return [two, one]


def _emptied(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``batch`` with every representative atom unresolved: no supervised pair."""
    return {**batch, "rep_mask": torch.zeros_like(batch["rep_mask"])}


def _rank(rank: int, init: str, out: str) -> None:
    from featurecache.model.train import run_training

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    mine = _batches()[rank]
    # step 1: no rank has a pair (skipped by both); step 2: rank 1 has none (it steps with rank 0)
    stream = [mine, _emptied(mine), mine if rank == 0 else _emptied(mine)]
    try:
        doc = run_training(None, None, steps=3, crop_size=16, device="cpu", log_path=None, config=TINY,
                           seed=SEED, batches=iter(stream))  # fmt: skip
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(doc["steps"]))


def _oracle() -> tuple[float, float]:
    """(the mean of the three samples' losses, the norm of its gradient) at train's initial parameters."""
    torch.manual_seed(SEED)
    model = Trunk(TINY, fused=False)
    samples = []
    for batch in _batches():
        for b in range(batch["token_mask"].shape[0]):
            samples.append({k: batch[k][b : b + 1] for k in MODEL_INPUT_KEYS})
    loss = sum(model.loss(s) for s in samples) / len(samples)
    assert isinstance(loss, torch.Tensor)
    loss.backward()
    norm = math.sqrt(
        sum(float(p.grad.double().square().sum()) for p in model.parameters() if p.grad is not None)
    )
    return float(loss.detach()), norm


def test_two_ranks_average_over_their_samples_not_over_the_ranks(tmp_path: Path) -> None:
    sizes = [b["token_mask"].sum(1).tolist() for b in _batches()]
    assert sizes == [[6, 11], [9]], sizes
    mp.spawn(_rank, args=(f"file://{tmp_path / 'store'}", str(tmp_path)), nprocs=2, join=True)
    steps: list[list[dict[str, Any]]] = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    recs = [s[0] for s in steps]
    loss, norm = _oracle()
    for rec in recs:
        assert rec["loss"] == pytest.approx(loss, rel=1e-6)
        assert rec["grad_norm"] == pytest.approx(norm, rel=1e-5)
    assert recs[0]["tokens"] == 17 and recs[1]["tokens"] == 9

    # review R25c s43 #1: a step no rank has a supervised pair for is skipped by all of them; one
    # that only some ranks have pairs for is taken by all, the others' weight 0
    from featurecache.model.train import NO_PAIRS_ON_ANY_RANK

    for s in steps:
        assert s[1]["pairs"] == 0 and s[1]["skip_reason"] == NO_PAIRS_ON_ANY_RANK and s[1]["loss"] is None
        assert s[2]["skip_reason"] is None and s[2]["loss"] == steps[0][2]["loss"] is not None
    assert steps[0][2]["pairs"] > 0 and steps[1][2]["pairs"] == 0
