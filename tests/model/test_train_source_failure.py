"""A batch source that fails mid-run (R2 finding 1): the model is intact, so the steps done are
checkpointed before the run ends (with ``checkpoint=``) and the error names that checkpoint; the
checkpoint resumes. Here the store's part files vanish after step 1 (a real store, its reads then
fail; after the client's limit of skipped samples in a row it raises ``LoaderError``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from featurecache.errors import LoaderError, TrainingError
from featurecache.model.train import load_checkpoint, run_training
from tests.model.test_trunk import TINY

SMALL: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY, "workers": 1}


def _vanishing_store(sample_store: Path, tmp_path: Path) -> tuple[Path, Any]:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)

    def on_step(rec: dict[str, Any]) -> None:
        if rec["step"] == 1:
            shutil.rmtree(store / "parts")  # every read of an entry fails from now on

    return store, on_step


def test_a_source_failure_mid_run_checkpoints_the_steps_done(sample_store: Path, tmp_path: Path) -> None:
    store, on_step = _vanishing_store(sample_store, tmp_path)
    log, ck = tmp_path / "log.json", tmp_path / "ck.pt"
    with pytest.raises(TrainingError) as caught:
        run_training(store, None, steps=50, log_path=log, checkpoint=ck, checkpoint_every=1000, on_step=on_step,
                     **SMALL)  # fmt: skip
    message = str(caught.value)
    doc = json.loads(log.read_text())
    done = len(doc["steps"])
    assert doc["status"] == "failed" and done >= 2
    assert "\n" not in message and "skipped" in message, message  # the source's own reason comes first
    assert f"{ck}" in message and f"--resume {ck} --steps 50" in message, message
    assert doc["error"] == message and doc["checkpoints"][-1] == {"step": done, "path": str(ck)}
    saved = load_checkpoint(ck)
    assert saved["step"] == done
    assert all(bool(torch.isfinite(t).all()) for t in saved["model"].values())
    assert not list(tmp_path.glob(".*.pending"))

    # the checkpoint continues the run on the intact store: the steps after the ones done
    again = run_training(sample_store, None, steps=done + 1, log_path=None, resume=ck, **SMALL)
    assert [r["step"] for r in again["steps"]] == [done]


def test_without_a_checkpoint_the_source_error_is_unchanged(sample_store: Path, tmp_path: Path) -> None:
    store, on_step = _vanishing_store(sample_store, tmp_path)
    with pytest.raises(LoaderError, match="samples in a row were skipped") as caught:
        run_training(store, None, steps=50, log_path=None, on_step=on_step, **SMALL)
    assert "checkpointed" not in str(caught.value)
