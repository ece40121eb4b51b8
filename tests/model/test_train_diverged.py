"""A diverged run (R2 finding 4): the loss of step k is computed on the parameters left by step
k - 1, so a non-finite loss at step k means a checkpoint of those parameters is useless (resumed,
it fails again at once, whatever the --lr). Such a checkpoint is never kept: the one due after
step k - 1 waits beside its path until step k's loss is finite. The error names the checkpoint
that is left, which resumes. A checkpoint never holds non-finite parameters either."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from featurecache.errors import TrainingError
from featurecache.model.train import load_checkpoint, run_training
from tests.model.test_trunk import TINY

SYNTH: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}


@pytest.mark.parametrize("template", ["ck.pt", "ck_{step}.pt"])
def test_a_diverged_run_keeps_no_checkpoint_of_the_parameters_that_diverged(
    tmp_path: Path, template: str
) -> None:
    """Two good steps, then lr 1e30: step 2's update blows the parameters up (~1e30, still finite),
    step 3's loss is NaN. The checkpoint due after step 2 is not kept; the one after step 1 (the
    resumed one) is what the error names, and resuming from it with a small lr trains."""
    ck = tmp_path / template
    run_training(None, None, steps=2, log_path=None, checkpoint=ck, **SYNTH)
    first = tmp_path / template.replace("{step}", "2")
    with pytest.raises(TrainingError, match=r"loss is nan at step 3\b") as caught:
        run_training(None, None, steps=10, log_path=None, checkpoint=ck, checkpoint_every=1, lr=1e30, resume=first,
                     **SYNTH)  # fmt: skip
    message = str(caught.value)
    assert "\n" not in message and f"resumed from {first} (step 2)" in message, message
    assert load_checkpoint(first)["step"] == 2
    assert not (tmp_path / "ck_3.pt").exists() and not list(tmp_path.glob(".*.pending"))
    doc = run_training(
        None, None, steps=4, log_path=None, lr=1e-4, resume=first, **SYNTH
    )  # what the error says
    assert all(r["loss"] is not None for r in doc["steps"])


@pytest.fixture
def parameters(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """The parameters of the model the next run trains, as its optimizer receives them: the test's
    handle on them (the training itself is unchanged)."""
    seen: list[torch.Tensor] = []
    original = torch.optim.AdamW.__init__

    def keep(self: Any, params: Any, *args: Any, **kwargs: Any) -> None:
        params = list(params)
        seen.extend(params)
        original(self, params, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "__init__", keep)
    return seen


def test_the_error_names_the_last_checkpoint_this_run_kept(
    tmp_path: Path, parameters: list[torch.Tensor]
) -> None:
    """The parameters are blown up after step 2 (as a huge update would): step 3's loss is not finite.
    With a checkpoint every step, the ones after steps 0, 1 (vouched for by the finite losses of
    steps 1, 2) are kept, the one after step 2 is not: the error names ck_2.pt."""

    def on_step(rec: dict[str, Any]) -> None:
        if rec["step"] == 2:
            with torch.no_grad():
                for p in parameters:
                    p.mul_(1e30)

    ck = tmp_path / "ck_{step}.pt"
    with pytest.raises(TrainingError, match=r"at step 3\b") as caught:
        run_training(None, None, steps=10, log_path=None, checkpoint=ck, checkpoint_every=1, on_step=on_step,
                     **SYNTH)  # fmt: skip
    message = str(caught.value)
    assert f"--resume {tmp_path / 'ck_2.pt'}" in message and "after step 1" in message, message
    assert sorted(p.name for p in tmp_path.glob("ck_*.pt")) == ["ck_1.pt", "ck_2.pt"]
    assert not list(tmp_path.glob(".*.pending"))


def test_a_checkpoint_never_holds_non_finite_parameters(
    tmp_path: Path, parameters: list[torch.Tensor]
) -> None:
    """The last step's checkpoint has no next loss to vouch for it: its parameters are checked."""

    def on_step(rec: dict[str, Any]) -> None:
        if rec["step"] == 1:
            with torch.no_grad():
                parameters[0].fill_(float("inf"))

    ck = tmp_path / "ck.pt"
    with pytest.raises(TrainingError, match=r"parameters after step 1 are not finite") as caught:
        run_training(None, None, steps=2, log_path=None, checkpoint=ck, on_step=on_step, **SYNTH)
    assert "\n" not in str(caught.value) and not ck.exists()
