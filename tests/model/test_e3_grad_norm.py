"""The gradient norm of each step (s25 E3 #1): every step record and progress line carries the total
gradient norm before clipping, and a non-finite one stops the run like a non-finite loss.

The logged norm is checked against an independent recomputation: the checkpoint the run starts from,
loaded into a fresh trunk, the first batch of the client's stream over the same real store (the
logged entry ids and positions say it is the run's batch), one backward, sqrt(sum g²) over the
model's gradients in float64."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from featurecache.client.schema import MODEL_INPUT_KEYS
from featurecache.errors import TrainingError
from featurecache.model.train import TRAIN_WEIGHTING, load_checkpoint, make_batches, run_training
from featurecache.model.trunk import Trunk
from tests.model.test_trunk import TINY

#: a clip this run's gradient is above (train's default, 10, is not reached by every step)
CLIP = 0.5
SMALL: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY, "workers": 1, "seed": 0}


def test_the_logged_gradient_norm_is_the_models_before_clipping(
    sample_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    start = tmp_path / "start.pt"
    run_training(sample_store, None, steps=1, log_path=None, checkpoint=start, **SMALL)
    with caplog.at_level(logging.INFO, logger="featurecache"):
        doc = run_training(sample_store, None, steps=1, log_path=tmp_path / "log.json", init_from=start,
                           clip_grad_norm=CLIP, **SMALL)  # fmt: skip
    rec = doc["steps"][0]

    # the same parameters and the same batch, outside the loop
    model = Trunk(TINY, fused=False)
    model.load_state_dict(load_checkpoint(start)["model"])
    # train samples with its own weighting (TRAIN_WEIGHTING, af3 since 1892e34), not the client's default
    src = make_batches(sample_store, None, crop_size=16, batch_size=1, seed=0, workers=1,
                       data_options={"weighting": TRAIN_WEIGHTING})  # fmt: skip
    try:
        raw = next(src.batches)
    finally:
        src.close()
    assert list(raw["entry_id"]) == rec["entry_ids"] and raw["position"].tolist() == rec["positions"]
    batch = {k: raw[k] for k in MODEL_INPUT_KEYS}
    loss = model.loss(batch)
    assert float(loss.detach()) == rec["loss"]  # the same step (CPU, fp32: bitwise)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) == len(list(model.parameters()))
    expected = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))

    assert rec["grad_norm"] == pytest.approx(expected, rel=1e-5)
    # before clipping: this gradient is above the clip, so a clipped norm would read CLIP
    assert expected > 1.5 * CLIP, expected
    assert doc["clip_grad_norm"] == CLIP and "grad_norm" in doc["fields"] and rec["clipped"] is True
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step 0 ")]
    assert len(lines) == 1 and f"grad norm {rec['grad_norm']:.4g} (clipped)" in lines[0], lines


def test_a_non_finite_gradient_norm_with_a_finite_loss_stops_the_run(
    sample_store: Path, tmp_path: Path
) -> None:
    """A start whose distogram head is scaled by 1e23 (after its first step from zero, the head's
    weights are about the learning rate): the loss (~2e19) is finite, the gradients reaching the
    trunk are ~1e20 and the sum of their squares overflows fp32, so the norm is inf and
    clipping scales every gradient by 1/inf = 0. Before, the run went on with zeroed updates and a
    loss that never moved, saying nothing; now it stops at step 0, naming the norm, and keeps no
    checkpoint of what followed."""
    start = tmp_path / "start.pt"
    run_training(sample_store, None, steps=1, log_path=None, checkpoint=start, **SMALL)
    doc = load_checkpoint(start)
    doc["model"]["distogram.linear.weight"] = doc["model"]["distogram.linear.weight"] * 1e23
    blown = tmp_path / "blown.pt"
    torch.save(doc, blown)

    ck, log = tmp_path / "ck_{step}.pt", tmp_path / "log.json"
    with pytest.raises(
        TrainingError, match=r"^the gradient norm is inf at step 0 \(its loss, .*, is finite\)"
    ) as e:
        run_training(sample_store, None, steps=3, log_path=log, init_from=blown, checkpoint=ck, checkpoint_every=1,
                     **SMALL)  # fmt: skip
    assert "\n" not in str(e.value) and "lower --lr" in str(e.value)
    import json

    written = json.loads(log.read_text())
    assert written["status"] == "failed" and len(written["steps"]) == 1
    rec = written["steps"][0]
    assert rec["grad_norm"] is None and isinstance(rec["loss"], float) and math.isfinite(rec["loss"])
    assert not list(tmp_path.glob("ck_*.pt")) and not list(tmp_path.glob(".ck_*"))
