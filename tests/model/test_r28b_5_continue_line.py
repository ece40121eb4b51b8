"""The "continue with" line of a stopped run repeats its ``--workers`` (recorded in the log and the
checkpoint), and a run of several ranks is continued as a torchrun command on as many ranks, on rank
0's line only. Review R28b s46 #5: the line dropped ``--workers 1`` (the run's choice for a bitwise
resume; the default 4 hands samples over ready-first), and a 2-rank run's line, pasted, resumed on
one rank (finding 1): that test is in test_r28b_1_global_batch.py, the module of the 2-rank run it
reads."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from featurecache.model.train import load_checkpoint
from tests.model.test_train_guards import _cli, _stop_after, _strict_json
from tests.model.test_trunk import TINY


def test_a_stopped_runs_line_gives_its_workers(sample_store: Path, tmp_path: Path) -> None:
    log, ck, err, cfg = (
        tmp_path / "log.json",
        tmp_path / "ck.pt",
        tmp_path / "stderr.txt",
        tmp_path / "tiny.json",
    )
    TINY.to_json(cfg)
    args = ["--store", str(sample_store), "--device", "cpu", "--crop", "16", "--workers", "1", "--steps", "100000",
            "--checkpoint", str(ck), "--log", str(log), "--model-config", str(cfg)]  # fmt: skip
    with err.open("w") as stderr:
        proc = _cli(*args, stdout=subprocess.PIPE, stderr=stderr)
        _stop_after(proc, log, 1, signal.SIGTERM, err)
    assert proc.returncode == -signal.SIGTERM, err.read_text()[-3000:]
    last = err.read_text().strip().splitlines()[-1]
    assert f"continue with --resume {ck} --steps 100000 --crop 16 --workers 1 --store" in last, last
    assert _strict_json(log)["workers"] == 1 and load_checkpoint(ck)["workers"] == 1
