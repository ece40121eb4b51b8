"""``train --keep-checkpoints N`` (review R34a s48 #3): with a ``{step}`` checkpoint template, the
oldest checkpoints this run wrote beyond N are deleted after each one is kept; never one it did not
write (an earlier run's, the ``--resume`` / ``--init-from`` source). Refused without ``{step}`` or with
N < 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from featurecache.errors import UsageError
from featurecache.model.config import ModelConfig
from featurecache.model.train import resume_arguments, run_training
from tests.conftest import cli_in_process

TINY = ModelConfig(c_token=32, c_pair=16, n_blocks=1, n_heads=2, head_dim=16, n_heads_single=2, transition_n=2)  # fmt: skip
SYNTH: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}


def _names(d: Path) -> list[str]:
    return sorted((p.name for p in d.glob("ck_*.pt")), key=lambda n: int(n[3:-3]))


def test_keeps_the_last_n_this_run_wrote(tmp_path: Path) -> None:
    ck = tmp_path / "ck_{step}.pt"
    log = tmp_path / "log.json"
    run_training(None, None, steps=3, log_path=None, checkpoint=ck, checkpoint_every=1, **SYNTH)
    assert _names(tmp_path) == ["ck_1.pt", "ck_2.pt", "ck_3.pt"]  # an earlier run's: never deleted
    # resumed from ck_2: ck_3 is the earlier run's, rewritten by this one (then this run's)
    run_training(None, None, steps=7, log_path=log, checkpoint=ck, checkpoint_every=1, resume=tmp_path / "ck_2.pt",
                 keep_checkpoints=2, **SYNTH)  # fmt: skip
    assert _names(tmp_path) == ["ck_1.pt", "ck_2.pt", "ck_6.pt", "ck_7.pt"]
    doc = json.loads(log.read_text())
    assert [(c["step"], c.get("deleted", False)) for c in doc["checkpoints"]] == [
        (2, False), (3, True), (4, True), (5, True), (6, False), (7, False)
    ]  # fmt: skip
    assert doc["keep_checkpoints"] == 2
    again = resume_arguments(doc, tmp_path / "ck_7.pt", 9)
    assert "--checkpoint-every 1 --keep-checkpoints 2" in again  # the line that continues it keeps it

    # --init-from a file the template names (at a step this run does not reach: one it could write
    # is refused): not this run's, never deleted
    init = tmp_path / "init"
    init.mkdir()
    run_training(None, None, steps=5, log_path=None, checkpoint=init / "ck_{step}.pt", **SYNTH)
    run_training(None, None, steps=4, log_path=None, checkpoint=init / "ck_{step}.pt", checkpoint_every=1,
                 init_from=init / "ck_5.pt", keep_checkpoints=1, **SYNTH)  # fmt: skip
    assert _names(init) == ["ck_4.pt", "ck_5.pt"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--checkpoint", "ck_{step}.pt", "--keep-checkpoints", "0"], "--keep-checkpoints must be ≥ 1"),
        (["--checkpoint", "ck.pt", "--keep-checkpoints", "2"], "{step}"),
        (["--keep-checkpoints", "2"], "{step}"),
    ],
)
def test_refused_without_step_or_below_one(
    tmp_path: Path, sample_store: Path, extra: list[str], said: str
) -> None:
    done = cli_in_process("train", "--store", str(sample_store), "--crop", "16", "--device", "cpu", "--steps", "2",
                          "--log", str(tmp_path / "log.json"), *extra, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "--keep-checkpoints" in done.stderr, done.stderr
    assert not list(tmp_path.glob("ck*")) and not (tmp_path / "log.json").exists()
    with pytest.raises(UsageError, match="keep-checkpoints"):
        run_training(None, None, steps=1, log_path=None, keep_checkpoints=0 if "0" in extra else 2,
                     checkpoint=tmp_path / extra[1] if extra[0] == "--checkpoint" else None, **SYNTH)  # fmt: skip


def test_help_explains_it() -> None:
    done = cli_in_process("train", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "--keep-checkpoints" in text and "{step}" in text
