"""``--resume`` with another ``--batch-size`` than the checkpoint's run is refused in one line naming
the checkpoint and both sizes, with or without the log of that run: the checkpoint's step count and
data position count batches of its size (a synthetic stream's position *is* a number of batches)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from featurecache.errors import UsageError
from featurecache.model.train import run_training
from tests.conftest import cli_in_process
from tests.model.test_trunk import TINY

SMALL: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}


def _never(*_: Any) -> None:
    raise AssertionError("a refused resume trained a step")


def test_resume_with_another_batch_size_is_refused_naming_the_checkpoint(
    sample_store: Path, tmp_path: Path
) -> None:
    ck, log = tmp_path / "ck.pt", tmp_path / "log.json"
    run_training(sample_store, None, steps=1, batch_size=1, log_path=log, checkpoint=ck, **SMALL)
    assert torch.load(ck, weights_only=True)["batch_size"] == 1  # what the refusal compares with
    for log_path in (None, log):  # without the log (it was accepted), with the earlier run's log
        with pytest.raises(UsageError) as err:
            run_training(sample_store, None, steps=2, batch_size=2, log_path=log_path, resume=ck, on_step=_never,
                         **SMALL)  # fmt: skip
        msg = str(err.value)
        assert "\n" not in msg
        assert str(ck) in msg and "--batch-size 1" in msg and "--batch-size 2" in msg, msg
    # the same batch size still resumes
    doc = run_training(sample_store, None, steps=2, batch_size=1, log_path=log, resume=ck, **SMALL)
    assert [r["step"] for r in doc["steps"]] == [0, 1]


def test_synthetic_resume_with_another_batch_size_is_refused(tmp_path: Path) -> None:
    ck = tmp_path / "ck.pt"
    run_training(None, None, steps=1, batch_size=2, log_path=None, checkpoint=ck, **SMALL)
    with pytest.raises(UsageError, match=r"ck\.pt.*--batch-size 2.*--batch-size 3"):
        run_training(None, None, steps=2, batch_size=3, log_path=None, resume=ck, on_step=_never, **SMALL)


def test_train_cli_refuses_another_batch_size_with_exit_2(sample_store: Path, tmp_path: Path) -> None:
    ck = tmp_path / "ck.pt"
    run_training(sample_store, None, steps=1, batch_size=1, log_path=None, checkpoint=ck, **SMALL)
    done = cli_in_process("train", "--store", str(sample_store), "--steps", "2", "--crop", "16", "--device", "cpu",
                          "--batch-size", "2", "--resume", str(ck), "--log", str(tmp_path / "train_log.json"))  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert str(ck) in last and "--batch-size 1" in last and "--batch-size 2" in last, done.stderr[-2000:]
    assert not (tmp_path / "train_log.json").exists()
