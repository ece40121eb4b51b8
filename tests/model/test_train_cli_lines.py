"""What ``featurecache train`` tells its user (R2 findings 7, 8): a SIGTERM stop ends with the same
"continue with --resume" line as Ctrl-C (a SLURM job's output is where one looks), --help states
the optimizer's settings, what --seed seeds and that exactly one of --store / --url is needed, and
the JSON log says what each step field means and its unit."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from featurecache.cli import app
from featurecache.model.train import load_checkpoint, run_training
from tests.model.test_train_guards import _cli, _stop_after, _strict_json
from tests.model.test_trunk import TINY


def test_train_cli_on_sigterm_says_how_to_continue(sample_store: Path, tmp_path: Path) -> None:
    log, ck, err = tmp_path / "log.json", tmp_path / "ck.pt", tmp_path / "stderr.txt"
    cfg = tmp_path / "tiny.json"
    TINY.to_json(cfg)
    args = ["--store", str(sample_store), "--device", "cpu", "--crop", "16", "--workers", "1", "--steps", "100000",
            "--checkpoint", str(ck), "--log", str(log), "--model-config", str(cfg)]  # fmt: skip
    with err.open("w") as stderr:
        proc = _cli(*args, stdout=subprocess.PIPE, stderr=stderr)
        _stop_after(proc, log, 1, signal.SIGTERM, err)
    text = err.read_text()
    assert proc.returncode == -signal.SIGTERM, text[-3000:]
    done = len(_strict_json(log)["steps"])
    assert load_checkpoint(ck)["step"] == done
    last = text.strip().splitlines()[-1]
    assert f"stopped by SIGTERM after {done} of 100000 steps" in last, text[-3000:]
    assert f"continue with --resume {ck} --steps 100000" in last and f"log {log}" in last, last


def test_train_help_states_the_optimizer_the_seed_and_the_source_rule() -> None:
    result = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    for words in ("exactly one of --store or --url", "AdamW", "weight decay 0.01", "betas 0.9, 0.999",
                  "no warm-up", "clipped", "model's initialisation", "--init-from", '"fields" block'):  # fmt: skip
        assert words in text, words


def test_the_log_describes_every_step_field_with_its_unit(tmp_path: Path) -> None:
    doc = run_training(
        None, None, steps=1, crop_size=16, device="cpu", config=TINY, log_path=tmp_path / "log.json"
    )
    fields = _strict_json(tmp_path / "log.json")["fields"]
    assert fields == doc["fields"] and set(fields) == set(doc["steps"][0])
    for name, text in fields.items():
        if name.endswith("_s"):
            assert text.startswith("s "), (name, text)
        if name.endswith("_bytes"):
            assert text.startswith("bytes"), (name, text)
