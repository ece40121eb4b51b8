"""A checkpoint resumed on another number of ranks keeps its global batch (samples per optimizer
step: ``--batch-size`` × ranks), review R28b s46 #1: 2 ranks of 1 sample resumed on 1 rank took 1
sample a step (exit 0) while ``--batch-size 2``, the same objective, was refused. Now the global batch
is compared: the equivalent setting continues (its positions resharded), another one is refused in
one line naming the ``--batch-size`` that keeps it, or ``--init-from``.

The 2-rank run is real (torchrun, gloo on the CPU, as tests/model/test_distributed.py); the
resumes are one process, and a run "launched on 2 ranks" that is refused before its process group
starts is one process with torchrun's ``WORLD_SIZE`` set.

The other tests of that 2-rank run are here too (a stopped run's torchrun line, review R28b s46 #5;
rank 1's summary line, #7): the run is a session fixture, and under ``pytest --dist loadscope``
every worker that ran a module using it built it again (a torchrun of ~10 s)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from featurecache.errors import UsageError
from featurecache.model.train import describe_run, load_checkpoint, rank_log_path, run_training
from tests.conftest import cli_in_process
from tests.model.test_trunk import TINY

CROP = 24


@pytest.fixture(scope="session")
def two_rank_run(sample_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory of a completed 2-rank run (batch 1 per rank, 2 steps): ``ck.pt``, ``log.json``
    (rank 0's), ``log.rank1.json``, ``tiny.json``, ``stdout.txt`` (both ranks' summary lines)."""
    where = tmp_path_factory.mktemp("two_ranks")
    TINY.to_json(where / "tiny.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "featurecache.cli", "train", "--device", "cpu", "--store", str(sample_store), "--steps", "2",
           "--crop", str(CROP), "--workers", "1", "--model-config", str(where / "tiny.json"),
           "--log-file", str(where / "log.json"), "--checkpoint", str(where / "ck.pt"), "--seed", "3"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=where)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (where / "stdout.txt").write_text(proc.stdout)
    return where


def _resume_cli(store: Path, ck: Path, log: Path, *extra: str, env: dict[str, str | None] | None = None):  # type: ignore[no-untyped-def]
    return cli_in_process("train", "--store", str(store), "--device", "cpu", "--crop", str(CROP), "--seed", "3",
                          "--workers", "1", "--steps", "4", "--resume", str(ck), "--log", str(log), *extra,
                          env=env)  # fmt: skip


@pytest.mark.parametrize("records_world", [True, False], ids=["world_size", "older-checkpoint"])
def test_two_ranks_resumed_on_one_with_their_batch_size_is_refused_naming_the_one_that_keeps_it(
    sample_store: Path, two_rank_run: Path, tmp_path: Path, records_world: bool
) -> None:
    saved = load_checkpoint(two_rank_run / "ck.pt")
    assert saved["batch_size"] == 1 and len(saved["data"]["ranks"]) == 2
    ck = tmp_path / "ck.pt"
    if records_world:
        assert saved["world_size"] == 2
        shutil.copy(two_rank_run / "ck.pt", ck)
    else:  # a checkpoint of a featurecache that recorded no world size: its 2 data positions say it
        saved.pop("world_size", None)
        torch.save(saved, ck)
    done = _resume_cli(sample_store, ck, tmp_path / "log.json")
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr
    for words in (str(ck), "2 sample(s) per step (--batch-size 1 on 2 ranks)", "1 (--batch-size 1 on 1 rank)",
                  "give --batch-size 2", f"--init-from {ck}"):  # fmt: skip
        assert words in last, (words, last)
    assert not (tmp_path / "log.json").exists()


def test_two_ranks_resumed_on_one_rank_with_the_same_global_batch_continues_their_stream(
    sample_store: Path, two_rank_run: Path, tmp_path: Path
) -> None:
    ck, log = tmp_path / "ck.pt", tmp_path / "log.json"
    shutil.copy(two_rank_run / "ck.pt", ck)
    shutil.copy(two_rank_run / "log.json", log)  # rank 0's log of the 2-rank run: carried over
    doc = run_training(sample_store, None, steps=4, crop_size=CROP, device="cpu", seed=3, workers=1,
                       batch_size=2, log_path=log, resume=ck)  # fmt: skip
    assert doc["status"] == "completed" and doc["steps_from_earlier_log"] == 2
    # the ranks drew 0, 2 and 1, 3: one rank of 2 samples goes on at 4, 5 (none drawn twice, none skipped)
    assert [r["positions"] for r in doc["steps"]] == [[0], [2], [4, 5], [6, 7]]
    assert json.loads(log.read_text())["world_size"] == 1


def test_one_rank_resumed_on_two_keeps_its_global_batch(sample_store: Path, tmp_path: Path) -> None:
    ck = tmp_path / "ck.pt"
    run_training(sample_store, None, steps=1, crop_size=CROP, device="cpu", seed=3, workers=1, batch_size=2,
                 config=TINY, log_path=None, checkpoint=ck)  # fmt: skip
    assert load_checkpoint(ck)["world_size"] == 1
    # rank 0 of a torchrun launch of 2 ranks: refused before its process group starts
    torchrun = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}
    done = _resume_cli(sample_store, ck, tmp_path / "log.json", "--batch-size", "2", env=torchrun)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "(--batch-size 2 on 1 rank), this one would train 4 (--batch-size 2 on 2 ranks)" in last, last
    assert "give --batch-size 1 to keep it on 2 ranks" in last, last
    # a global batch no batch size keeps on this number of ranks: says so
    with pytest.raises(UsageError, match=r"no --batch-size keeps it on 3 ranks: resume on a number of ranks that "
                       r"divides 2"):  # fmt: skip
        from featurecache.model.train import _check_global_batch

        _check_global_batch(ck, load_checkpoint(ck), 1, 3)


def test_a_stopped_two_rank_runs_line_is_a_torchrun_command_on_rank_0_only(two_rank_run: Path) -> None:
    """Review R28b s46 #5: a 2-rank run's "continue with" line, pasted, resumed on one rank."""
    log, ck = two_rank_run / "log.json", two_rank_run / "ck.pt"
    docs = [json.loads(rank_log_path(log, r).read_text()) for r in (0, 1)]
    for doc in docs:  # as a signal leaves them (the run completed: no line says how to continue)
        doc.update(status="stopped", stop_signal="SIGTERM", steps_requested=10)
    line = describe_run(docs[0], log)
    assert (
        f"continue with torchrun --nproc-per-node 2 -m featurecache.cli train --resume {ck} --steps 10 --crop 24 "
        f"--seed 3 --workers 1 --store {docs[0]['source']} --device cpu --log-file {log} --checkpoint {ck}"
    ) in line, line
    assert "continue with" not in describe_run(docs[1], rank_log_path(log, 1))


def test_only_rank_0s_line_names_the_checkpoint(two_rank_run: Path) -> None:
    """Rank r > 0's summary line does not claim the checkpoint only rank 0 wrote (review R28b s46 #7):
    it says its rank, and that rank 0's line names the checkpoint."""
    lines = [
        line for line in (two_rank_run / "stdout.txt").read_text().splitlines() if "trained 2 steps" in line
    ]
    assert len(lines) == 2, lines
    ck = two_rank_run / "ck.pt"
    assert sum(f"checkpoint {ck}" in line for line in lines) == 1, lines
    rank0 = next(line for line in lines if f"checkpoint {ck}" in line)
    assert f"log {two_rank_run / 'log.json'}" in rank0, rank0
    rank1 = next(line for line in lines if line != rank0)
    assert "rank 1 of 2 (rank 0 wrote the checkpoints; its line names them and how to continue)" in rank1, (
        rank1
    )
