"""``--resume`` without the run's ``--lr`` trains at the default from the resumed step on: it now
warns as a changed ``--clip-grad-norm`` does, and each step record says its rate (``lr``, documented in
the log's "fields" block), so the change is in the log too. Review R28b s46 #4: the resumed steps ran
at 10× the rate with no word, under a log header saying one rate for every step."""

from __future__ import annotations

import json
from pathlib import Path

from featurecache.model.train import run_training
from tests.conftest import cli_in_process
from tests.model.test_trunk import TINY

#: a log line on one line of stderr (rich wraps at the console's width)
WIDE: dict[str, str | None] = {"COLUMNS": "1000"}


def test_a_resume_at_another_lr_warns_and_the_log_records_each_steps_rate(
    sample_store: Path, tmp_path: Path
) -> None:
    ck, log = tmp_path / "ck.pt", tmp_path / "log.json"
    run_training(sample_store, None, steps=2, crop_size=32, device="cpu", seed=3, workers=1, config=TINY, lr=1e-4,
                 log_path=log, checkpoint=ck)  # fmt: skip
    done = cli_in_process("train", "--store", str(sample_store), "--device", "cpu", "--crop", "32", "--seed", "3",
                          "--workers", "1", "--steps", "4", "--resume", str(ck), "--log", str(log), env=WIDE)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    warned = [line for line in done.stderr.splitlines() if "--lr" in line]
    assert len(warned) == 1, done.stderr[-3000:]
    assert (
        f"{ck} was trained with --lr 0.0001; this run trains at 0.001 from step 2 on (give --lr 0.0001 to go on "
        "as it did)"
    ) in warned[0]
    doc = json.loads(log.read_text())
    assert [r["lr"] for r in doc["steps"]] == [1e-4, 1e-4, 1e-3, 1e-3]
    assert "lr" in doc["fields"] and "rate" in doc["fields"]["lr"]
    # the run's rate given: no warning
    again = cli_in_process("train", "--store", str(sample_store), "--device", "cpu", "--crop", "32", "--seed", "3",
                           "--workers", "1", "--steps", "3", "--resume", str(ck), "--log", str(log), "--lr", "0.0001", env=WIDE)  # fmt: skip
    assert again.returncode == 0 and "was trained with --lr" not in again.stderr, again.stderr[-3000:]
    assert [r["lr"] for r in json.loads(log.read_text())["steps"]] == [1e-4, 1e-4, 1e-4]
