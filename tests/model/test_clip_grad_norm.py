"""The gradient-norm clip (review R25c s43 #5: at 1.0 it clipped every step of a run, so each batch
pushed as hard as any other): AF3's 10 by default, recorded in the log header and the checkpoints,
applied as ``clip_grad_norm_`` defines it, said per step (``clipped``) and as a share in the
summary; a resume applies its own, and says so when it differs from the checkpoint's run (an older
checkpoint records none: it clipped at 1.0)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from featurecache.errors import UsageError
from featurecache.model.batches import synthetic_batch
from featurecache.model.train import (
    _train_step,
    describe_run,
    load_checkpoint,
    make_optimizer,
    resume_arguments,
    run_training,
)
from featurecache.model.trunk import Trunk
from tests.model.test_trunk import TINY

SYNTH: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}


def test_the_default_clip_is_af3s_and_recorded(tmp_path: Path) -> None:
    log, ck = tmp_path / "log.json", tmp_path / "ck.pt"
    doc = run_training(None, None, steps=2, log_path=log, checkpoint=ck, **SYNTH)
    assert doc["clip_grad_norm"] == 10.0  # AF3's clip
    assert json.loads(log.read_text())["clip_grad_norm"] == 10.0
    assert load_checkpoint(ck)["clip_grad_norm"] == 10.0
    assert all(r["clipped"] == (r["grad_norm"] > 10.0) for r in doc["steps"])


def test_a_step_leaves_the_gradients_at_the_clip() -> None:
    """After the step the gradients' total norm is the clip (they were above it), the norm the step
    returns the one before: ``clip_grad_norm_``'s definition, computed here in float64."""
    torch.manual_seed(0)
    model = Trunk(TINY, fused=False)
    opt = make_optimizer(model, 1e-3)
    batch = synthetic_batch(np.random.default_rng(0), 1, 16, msa_rows=3, full=False)
    _, before = _train_step(model, opt, model.loss, batch, clip_norm=0.25)
    after = math.sqrt(
        sum(float(p.grad.double().square().sum()) for p in model.parameters() if p.grad is not None)
    )
    assert float(before) > 0.5 and after == pytest.approx(0.25, rel=1e-4)


@pytest.mark.parametrize(("clip", "share"), [(1e9, 0.0), (1e-6, 1.0)], ids=["never", "always"])
def test_each_step_says_whether_it_was_clipped(clip: float, share: float) -> None:
    doc = run_training(None, None, steps=3, log_path=None, clip_grad_norm=clip, **SYNTH)
    assert [r["clipped"] for r in doc["steps"]] == [r["grad_norm"] > clip for r in doc["steps"]]
    assert doc["summary"]["clipped_fraction"] == share
    assert f"gradients clipped on {100 * share:.0f} % of the steps trained" in describe_run(doc)


def test_a_resume_applies_its_own_clip_and_warns_when_it_differs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ck, older = tmp_path / "ck.pt", tmp_path / "older.pt"
    run_training(None, None, steps=1, log_path=None, checkpoint=ck, clip_grad_norm=3.0, **SYNTH)
    saved = load_checkpoint(ck)
    assert saved["clip_grad_norm"] == 3.0
    del saved["clip_grad_norm"]  # as a checkpoint of an older featurecache
    torch.save(saved, older)
    with caplog.at_level(logging.WARNING, logger="featurecache"):
        same = run_training(None, None, steps=2, log_path=None, resume=ck, clip_grad_norm=3.0, **SYNTH)
    assert same["clip_grad_norm"] == 3.0 and "clip-grad-norm" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="featurecache"):
        doc = run_training(None, None, steps=2, log_path=None, resume=older, **SYNTH)
    assert doc["clip_grad_norm"] == 10.0
    said = " ".join(caplog.text.split())
    assert "records none: clipped at 1.0 then" in said and "give --clip-grad-norm 1.0" in said, said
    # the line that continues a run names its clip where it is not the default
    assert "--clip-grad-norm 3.0" in resume_arguments(same, ck, 5)
    assert "--clip-grad-norm" not in resume_arguments(doc, older, 5)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_a_clip_it_cannot_train_with_is_refused(bad: float) -> None:
    with pytest.raises(UsageError, match=r"^clip_grad_norm \(--clip-grad-norm\) must be a finite number > 0"):
        run_training(None, None, steps=1, log_path=None, clip_grad_norm=bad, **SYNTH)
