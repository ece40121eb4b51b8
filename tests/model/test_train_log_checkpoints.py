"""The log and the checkpoints of a run agree however it ends, and a resumed run's last line counts
the steps the whole run did. A run killed without a chance to write (SIGKILL, the OOM killer, a
preemption) used to leave a checkpoint up to ``log_every_s`` of steps ahead of its log; the run
resumed from it with the same ``--log`` carried the log over with those steps missing, silently,
and its last line counted the log's records as the steps done (found by a review)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from featurecache.model.train import describe_run, load_checkpoint, run_training
from tests.model.test_trunk import TINY

SYNTH: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}


def _logged_steps(log: Path) -> list[int]:
    return [r["step"] for r in json.loads(log.read_text())["steps"]]


def test_the_log_on_disk_holds_every_step_of_each_checkpoint_kept(tmp_path: Path) -> None:
    """Periodic writes off (``log_every_s`` huge): after each step, every checkpoint on disk holds
    no step the log on disk lacks. Before, the log held none of them until the run ended."""
    log = tmp_path / "log.json"
    ck = tmp_path / "ck_{step}.pt"
    seen: list[tuple[list[int], list[int]]] = []

    def look(_rec: dict[str, Any]) -> None:
        kept = sorted(int(p.stem.split("_")[1]) for p in tmp_path.glob("ck_*.pt"))
        seen.append((kept, _logged_steps(log)))

    run_training(None, None, steps=7, log_path=log, checkpoint=ck, checkpoint_every=2, log_every_s=1e9,
                 on_step=look, **SYNTH)  # fmt: skip
    assert any(kept for kept, _ in seen)
    for kept, logged in seen:
        if kept:
            assert logged == list(range(len(logged))) and len(logged) >= kept[-1], (kept, logged)


def test_a_resumed_run_names_the_steps_its_earlier_log_lacks_and_counts_the_whole_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "log.json"
    ck = tmp_path / "ck_{step}.pt"
    run_training(None, None, steps=6, log_path=log, checkpoint=ck, checkpoint_every=2, **SYNTH)
    # as a run killed between two log writes leaves it: its checkpoint after 4 steps, its log at 2
    doc = json.loads(log.read_text())
    doc["steps"], doc["status"] = doc["steps"][:2], "running"
    doc["checkpoints"] = [c for c in doc["checkpoints"] if c["step"] <= 2]
    log.write_text(json.dumps(doc))
    resume = tmp_path / "ck_4.pt"
    assert load_checkpoint(resume)["step"] == 4
    with caplog.at_level(logging.WARNING, logger="featurecache.model.train"):
        final = run_training(None, None, steps=6, log_path=log, resume=resume, **SYNTH)
    assert any("holds no record of steps 2-3" in r.getMessage() for r in caplog.records), caplog.text
    assert [r["step"] for r in final["steps"]] == [0, 1, 4, 5]
    line = describe_run(final, log)
    # it said "trained 4 steps" (the records) and named ck_2.pt as if it held the run's steps; the
    # newest checkpoint is the one it resumed from, which the earlier log had not recorded
    assert line.startswith("trained 6 steps (2 in this run, resumed at step 4);"), line
    assert f"checkpoint {resume} (of 4 steps: the 2 after them are in none)" in line, line


def test_describe_run_of_a_run_that_checkpointed_its_last_step() -> None:
    doc = {"status": "completed", "steps": [{"step": i} for i in range(3)], "start_step": 0,
           "checkpoints": [{"step": 3, "path": "ck.pt"}], "steps_requested": 3}  # fmt: skip
    line = describe_run(doc)
    assert line.startswith("trained 3 steps;") and line.endswith("checkpoint ck.pt"), line
