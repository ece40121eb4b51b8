"""``run_training`` / ``featurecache train`` when a run does not go to plan: SIGTERM (what SLURM and
torchrun send on a timeout or preemption), a non-finite loss, and arguments it cannot train with,
refused up front (``UsageError``, exit status 2) instead of a traceback after the training."""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from featurecache.errors import FeatureCacheError, UsageError
from featurecache.model.config import ModelConfig
from featurecache.model.train import load_checkpoint, run_training
from tests.conftest import cli_in_process
from tests.model.test_trunk import TINY

#: a tiny synthetic run on the CPU: a few seconds
SYNTH: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}


def _cli(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """``featurecache train ARGS``, started as a terminal starts a foreground job: with SIGINT at its
    default, whatever this session has. A session started in the background (``pytest &`` in a
    script, ``nohup``) has SIGINT ignored, and an ignored signal stays ignored across fork and exec:
    a trainer started from it rightly kept ignoring it (Python does, and ``run_training`` after it)
    and trained on after the test's Ctrl-C (a loaded full run: still running 300 s later)."""
    cmd = [sys.executable, "-m", "featurecache.cli", "train", *args]
    with _sigint(signal.default_int_handler):
        return subprocess.Popen(cmd, text=True, **kwargs)


@contextmanager
def _sigint(handler: Any) -> Iterator[None]:
    """This session's SIGINT handler meanwhile. A child started meanwhile starts with a handled
    SIGINT at its default, with an ignored one ignored."""
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _strict_json(path: Path) -> Any:
    """The file's JSON, refusing the NaN / Infinity that ``json.dumps`` writes by default."""

    def refuse(name: str) -> None:
        raise ValueError(f"{path} holds {name}: not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


# ----------------------------------------------------------------------------------- the log as it goes
def test_log_is_written_as_the_run_goes(tmp_path: Path) -> None:
    """The log is on disk before the first step (written atomically, status "running") and, with
    ``log_every_s=0``, holds every finished step at the moment the next one starts."""
    log = tmp_path / "log.json"
    seen: list[dict[str, Any]] = []
    run_training(None, None, steps=3, log_path=log, log_every_s=0,
                 on_step=lambda rec: seen.append(_strict_json(log)), **SYNTH)  # fmt: skip
    assert [len(d["steps"]) for d in seen] == [1, 2, 3]
    assert all(d["status"] == "running" for d in seen)
    assert seen[1]["summary"]["steps"] == 2
    final = _strict_json(log)
    assert final["status"] == "completed" and len(final["steps"]) == 3
    assert not list(tmp_path.glob(".*.tmp"))

    # the default interval: the first write is before the first step
    at_start: list[dict[str, Any]] = []
    run_training(None, None, steps=1, log_path=log, on_step=lambda rec: at_start.append(_strict_json(log)),
                 **SYNTH)  # fmt: skip
    assert at_start[0]["status"] == "running" and at_start[0]["steps"] == []


# ------------------------------------------------------------------------------------------- SIGTERM
def _stop_after(proc: subprocess.Popen[str], log: Path, steps: int, sig: int, output: Path) -> None:
    """Wait until the run ``proc`` has logged ``steps`` steps in ``log`` (its stderr, or stdout and
    stderr, in ``output``), send it ``sig`` and wait for it to end; killed on the way out if not."""
    try:
        deadline = time.monotonic() + 300
        while len(_steps_logged(log)) < steps:  # the log as it goes
            assert proc.poll() is None, output.read_text()[-3000:]
            assert time.monotonic() < deadline, f"not {steps} step(s) logged within 300 s"
            time.sleep(0.2)
        proc.send_signal(sig)
        proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()


def _steps_logged(path: Path) -> list[Any]:
    try:
        return list(_strict_json(path)["steps"])
    except (OSError, ValueError):  # not written yet (a log is renamed into place whole: never torn)
        return []


class _Terminated(Exception):
    pass


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated(signum)


@contextmanager
def _terminated_by_sigterm(sig: int = signal.SIGTERM) -> Iterator[None]:
    """The body must end in :class:`_Terminated` (``sig`` handed on to the test's handler), and the
    run must have put that handler back."""
    previous = signal.signal(sig, _raise_terminated)
    try:
        with pytest.raises(_Terminated):
            yield
        assert signal.getsignal(sig) is _raise_terminated
    finally:
        signal.signal(sig, previous)


def test_sigterm_stops_after_the_step_then_hands_the_signal_on(tmp_path: Path) -> None:
    """In-process: SIGTERM during step 1 lets the step finish, writes the log and a checkpoint of
    the two steps, restores the handler that was there before and re-raises the signal to it (the
    default handler would end the process as an uncaught SIGTERM does)."""
    log, ck = tmp_path / "log.json", tmp_path / "ck.pt"

    def on_step(rec: dict[str, Any]) -> None:
        if rec["step"] == 1:
            signal.raise_signal(signal.SIGTERM)  # delivered now, to this (the main) thread

    with _terminated_by_sigterm():
        run_training(None, None, steps=50, log_path=log, checkpoint=ck, on_step=on_step, **SYNTH)
    doc = _strict_json(log)
    assert doc["status"] == "stopped" and doc["stop_signal"] == "SIGTERM"
    assert [r["step"] for r in doc["steps"]] == [0, 1]
    assert doc["checkpoints"] == [{"step": 2, "path": str(ck)}]
    assert load_checkpoint(ck)["step"] == 2

    # the run continues from there
    again = run_training(None, None, steps=3, log_path=None, resume=ck, **SYNTH)
    assert [r["step"] for r in again["steps"]] == [2]


def test_a_second_sigterm_hands_the_signal_on_at_once(tmp_path: Path) -> None:
    """Asked twice, the run does not wait for the step: the previous handler gets the signal now
    (the default one would end the process), and no checkpoint is written."""
    ck = tmp_path / "ck.pt"

    def on_step(rec: dict[str, Any]) -> None:
        if rec["step"] == 1:
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)
            raise AssertionError("the second signal did not stop the run at once")

    with _terminated_by_sigterm():
        run_training(None, None, steps=50, log_path=None, checkpoint=ck, on_step=on_step, **SYNTH)
    assert not ck.exists()


def test_ctrl_c_stops_after_the_step_like_sigterm(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) during step 1: the step finishes, the log says ``stopped`` by SIGINT after 2
    of 50 steps, a checkpoint of the two steps is written, and only then is the signal handed on
    (to Python's default handler that is a KeyboardInterrupt out of ``run_training``)."""
    log, ck = tmp_path / "log.json", tmp_path / "ck.pt"

    def on_step(rec: dict[str, Any]) -> None:
        if rec["step"] == 1:
            signal.raise_signal(signal.SIGINT)

    with _terminated_by_sigterm(signal.SIGINT):
        run_training(None, None, steps=50, log_path=log, checkpoint=ck, on_step=on_step, **SYNTH)
    doc = _strict_json(log)
    assert doc["status"] == "stopped" and doc["stop_signal"] == "SIGINT"
    assert [r["step"] for r in doc["steps"]] == [0, 1] and doc["steps_requested"] == 50
    assert load_checkpoint(ck)["step"] == 2

    # with Python's own handler: KeyboardInterrupt, after the log and the checkpoint
    ck.unlink()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_training(None, None, steps=50, log_path=log, checkpoint=ck, on_step=on_step, **SYNTH)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert _strict_json(log)["status"] == "stopped" and load_checkpoint(ck)["step"] == 2


def test_a_second_ctrl_c_interrupts_the_step(tmp_path: Path) -> None:
    """Pressed twice, Ctrl-C does not wait for the step: KeyboardInterrupt now, status
    ``interrupted``, no checkpoint."""
    log, ck = tmp_path / "log.json", tmp_path / "ck.pt"

    def on_step(rec: dict[str, Any]) -> None:
        if rec["step"] == 1:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            raise AssertionError("the second Ctrl-C did not stop the run at once")

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_training(None, None, steps=50, log_path=log, checkpoint=ck, on_step=on_step, **SYNTH)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    doc = _strict_json(log)
    assert doc["status"] == "interrupted" and len(doc["steps"]) == 2
    assert not ck.exists()


def test_an_ignored_sigint_stays_ignored_and_the_log_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A process started with SIGINT ignored (a job started in the background) keeps it ignored: a
    Ctrl-C during step 1 does not stop the run, and the log says at the start that it will not
    (such a run sent Ctrl-C by a test looked hung: it trained on with no word about the signal)."""

    def on_step(rec: dict[str, Any]) -> None:
        if rec["step"] == 1:
            signal.raise_signal(signal.SIGINT)

    with _sigint(signal.SIG_IGN), caplog.at_level(logging.INFO, logger="featurecache.model.train"):
        doc = run_training(None, None, steps=3, log_path=tmp_path / "log.json", on_step=on_step, **SYNTH)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert doc["status"] == "completed" and len(doc["steps"]) == 3 and doc["stop_signal"] is None
    said = [r.getMessage() for r in caplog.records if "SIGINT is ignored" in r.getMessage()]
    assert said == [
        "SIGINT is ignored by this process (as it was started, e.g. in the background): it does not stop the run; "
        "SIGTERM does"
    ]


def test_train_cli_on_ctrl_c_stops_after_the_step_and_says_how_to_continue(
    sample_store: Path, tmp_path: Path
) -> None:
    """``featurecache train`` with client worker processes, Ctrl-C sent to the whole process group
    (as a terminal does): exit 130, no traceback from the trainer or its workers, a ``stopped`` log,
    a checkpoint, and a last line that says how to continue; the continued run ends with its own
    one-line summary. The test passes however the session was started: here the session's SIGINT
    is ignored while the command is started, and :func:`_cli` must still start it as a terminal's
    foreground job."""
    log, ck, out = tmp_path / "log.json", tmp_path / "ck.pt", tmp_path / "output.txt"
    cfg = tmp_path / "tiny.json"
    TINY.to_json(cfg)  # the signal's handling is checked, not the model: a tiny one's steps are cheap
    args = ["--store", str(sample_store), "--device", "cpu", "--crop", "16", "--workers", "2", "--pool",
            "process", "--checkpoint", str(ck), "--log", str(log), "--model-config", str(cfg)]  # fmt: skip
    with out.open("w") as output:
        with _sigint(signal.SIG_IGN):  # the session, as one started in the background has it
            proc = _cli(
                *args, "--steps", "100000", stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            deadline = time.monotonic() + 300
            while len(_steps_logged(log)) < 1:
                assert proc.poll() is None, out.read_text()[-3000:]
                assert time.monotonic() < deadline, "no step logged within 300 s"
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                pytest.fail(f"still running 300 s after the Ctrl-C: {out.read_text()[-3000:]}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    text = out.read_text()
    assert proc.returncode == 130, text[-3000:]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    doc = _strict_json(log)
    done = len(doc["steps"])
    assert doc["status"] == "stopped" and doc["stop_signal"] == "SIGINT" and done >= 1
    assert load_checkpoint(ck)["step"] == done
    last = text.strip().splitlines()[-1]
    assert f"stopped by SIGINT after {done} of 100000 steps" in last, last
    assert f"continue with --resume {ck} --steps 100000" in last, last

    resumed = _cli(*args, "--steps", str(done + 1), "--resume", str(ck), stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE)  # fmt: skip
    resumed_out, resumed_err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, resumed_err[-3000:]
    summary = resumed_out.strip().splitlines()[-1]
    assert summary.startswith(f"trained {done + 1} steps (1 in this run, resumed at step {done});"), (
        resumed_out[-3000:]
    )
    assert f"log {log}" in summary and f"checkpoint {ck}" in summary and "--resume" not in summary


def test_training_off_the_main_thread_leaves_signals_alone(tmp_path: Path) -> None:
    """Only the main thread may install a signal handler: elsewhere the run trains without one."""
    before = signal.getsignal(signal.SIGTERM)
    out: list[Any] = []
    worker = threading.Thread(
        target=lambda: out.append(run_training(None, None, steps=1, log_path=tmp_path / "log.json", **SYNTH))
    )
    worker.start()
    worker.join(timeout=300)
    assert out and out[0]["status"] == "completed"
    assert signal.getsignal(signal.SIGTERM) is before


def test_train_cli_on_sigterm_writes_log_and_checkpoint_and_dies_of_the_signal(
    sample_store: Path, tmp_path: Path
) -> None:
    """``featurecache train`` on a real store, sent SIGTERM mid-run: it finishes the step, writes
    the log and a final checkpoint, and ends as an uncaught SIGTERM does (killed by the signal: exit
    status 143 in a shell, -15 from subprocess). The checkpoint resumes."""
    log, ck, out = tmp_path / "log.json", tmp_path / "ck.pt", tmp_path / "output.txt"
    cfg = tmp_path / "tiny.json"
    TINY.to_json(cfg)  # the signal's handling is checked, not the model: a tiny one's steps are cheap
    args = ["--store", str(sample_store), "--device", "cpu", "--crop", "16", "--workers", "1",
            "--checkpoint", str(ck), "--log", str(log), "--model-config", str(cfg)]  # fmt: skip
    with out.open("w") as output:
        proc = _cli(*args, "--steps", "100000", stdout=output, stderr=subprocess.STDOUT)
        _stop_after(proc, log, 2, signal.SIGTERM, out)  # two steps done
    text = out.read_text()
    assert proc.returncode == -signal.SIGTERM, text[-3000:]
    assert "SIGTERM" in text and "Traceback" not in text
    doc = _strict_json(log)
    done = len(doc["steps"])
    assert doc["status"] == "stopped" and done >= 2
    assert [r["step"] for r in doc["steps"]] == list(range(done))
    assert doc["checkpoints"][-1] == {"step": done, "path": str(ck)}
    assert load_checkpoint(ck)["step"] == done

    resumed = _cli(*args, "--steps", str(done + 1), "--resume", str(ck), stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)  # fmt: skip
    _, resumed_err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, resumed_err[-3000:]
    whole = _strict_json(log)  # the resumed run's log carries the stopped run's steps over
    assert [r["step"] for r in whole["steps"]] == list(range(done + 1))
    assert whole["steps"][:done] == doc["steps"] and whole["status"] == "completed"


def test_torchrun_ranks_stop_after_the_same_step_on_sigterm(sample_store: Path, tmp_path: Path) -> None:
    """Two ranks under torchrun (CPU, gloo), torchrun sent SIGTERM (it passes it to the ranks): the
    ranks agree on the step to stop after (their requests ride in the gradients' all-reduce, so none
    waits forever in a collective the other left), write their logs and one checkpoint of it."""
    from featurecache.model.train import rank_log_path

    cfg = tmp_path / "tiny.json"
    TINY.to_json(cfg)
    log, ck, out = tmp_path / "log.json", tmp_path / "ck.pt", tmp_path / "output.txt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "featurecache.cli", "train", "--device", "cpu", "--store", str(sample_store), "--crop", "24",
           "--workers", "1", "--steps", "100000", "--model-config", str(cfg), "--log-file", str(log),
           "--checkpoint", str(ck)]  # fmt: skip
    with out.open("w") as output:
        proc = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            deadline = time.monotonic() + 300
            while min(len(_steps_logged(rank_log_path(log, r))) for r in (0, 1)) < 2:
                assert proc.poll() is None, out.read_text()[-3000:]
                assert time.monotonic() < deadline, "no second step logged within 300 s"
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)  # torchrun kills its ranks 30 s after passing the signal on
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode != 0
    docs = [_strict_json(rank_log_path(log, r)) for r in (0, 1)]
    done = len(docs[0]["steps"])
    for doc in docs:
        assert doc["status"] == "stopped" and len(doc["steps"]) == done >= 2, out.read_text()[-3000:]
        assert doc["checkpoints"][-1] == {"step": done, "path": str(ck)}
        assert all(r["world_tokens"] is not None for r in doc["steps"])
    saved = load_checkpoint(ck)
    assert saved["step"] == done and len(saved["data"]["ranks"]) == 2


# ------------------------------------------------------------------------------------ non-finite loss
def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    """lr 1e4 makes step 1's loss NaN: the run stops there with an error naming the step, the log
    stays strict JSON (the loss as null). Step 1's loss is computed on the parameters after step 0,
    so the checkpoint after step 0 would hold the diverged model (R2 finding 4): it is not kept, and
    the error says no checkpoint was (tests/model/test_train_diverged.py: the cases where one is).
    The run starts (--init-from) from weights whose every linear is non-zero: a fresh trunk's head
    and residual outputs are zero (review R25c s43 #4), so its step 0 moves the head alone and the
    loss goes NaN a step later."""
    from featurecache.model.train import TrainingError, make_optimizer, save_checkpoint
    from featurecache.model.trunk import Trunk
    from tests.model.util import reinit_zeroed_linears

    torch.manual_seed(0)
    model = Trunk(TINY, fused=False)
    assert reinit_zeroed_linears(model) > 0
    start = save_checkpoint(tmp_path / "start.pt", step=0, model=model, opt=make_optimizer(model, 1e-3), data=None,
                            meta={"model_config": TINY.to_dict()})  # fmt: skip
    log, ck = tmp_path / "log.json", tmp_path / "ck.pt"
    with pytest.raises(TrainingError, match=r"loss is nan at step 1\b") as caught:
        run_training(None, None, steps=5, log_path=log, checkpoint=ck, checkpoint_every=1, lr=1e4, init_from=start,
                     **SYNTH)  # fmt: skip
    assert "\n" not in str(caught.value) and "no checkpoint was kept" in str(caught.value)
    doc = _strict_json(log)
    assert [r["step"] for r in doc["steps"]] == [0, 1]
    assert doc["steps"][1]["loss"] is None and doc["steps"][0]["loss"] > 0
    assert doc["status"] == "failed" and "step 1" in doc["error"]
    assert not ck.exists() and not list(tmp_path.glob(".*.pending")) and doc["checkpoints"] == []


# --------------------------------------------------------------------------- paths checked up front
def _never(rec: dict[str, Any]) -> None:
    raise AssertionError("a refused run must not train")


def test_log_and_checkpoint_paths_are_checked_before_training(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--log .*is a directory"):
        run_training(None, None, steps=2, log_path=tmp_path, on_step=_never, **SYNTH)
    (tmp_path / "ckdir").mkdir()
    with pytest.raises(UsageError, match=r"--checkpoint .*ckdir is a directory"):
        run_training(
            None, None, steps=2, log_path=None, checkpoint=tmp_path / "ckdir", on_step=_never, **SYNTH
        )
    (tmp_path / "ck_4.pt").mkdir()  # the final checkpoint of a {step} template
    with pytest.raises(UsageError, match=r"ck_4\.pt is a directory"):
        run_training(None, None, steps=4, log_path=None, checkpoint=tmp_path / "ck_{step}.pt", checkpoint_every=2,
                     on_step=_never, **SYNTH)  # fmt: skip
    (tmp_path / "afile").write_text("")
    with pytest.raises(
        UsageError, match=r"--log .*afile/log.json: cannot write there \(.*afile is a file, not"
    ):
        run_training(None, None, steps=2, log_path=tmp_path / "afile" / "log.json", on_step=_never, **SYNTH)
    with pytest.raises(UsageError, match=r"--checkpoint .*: cannot write there \(.*afile is a file, not"):
        run_training(
            None,
            None,
            steps=2,
            log_path=None,
            checkpoint=tmp_path / "afile" / "x" / "ck.pt",
            on_step=_never,
            **SYNTH,
        )  # fmt: skip (it said "File exists", not the reason)

    # missing parent directories are created, as for checkpoints
    log, ck = tmp_path / "new" / "sub" / "log.json", tmp_path / "other" / "dir" / "ck.pt"
    run_training(None, None, steps=1, log_path=log, checkpoint=ck, **SYNTH)
    assert _strict_json(log)["status"] == "completed" and load_checkpoint(ck)["step"] == 1


def test_train_cli_refuses_bad_paths_with_exit_2_before_training(sample_store: Path, tmp_path: Path) -> None:
    (tmp_path / "ckdir").mkdir()
    base = ["--store", str(sample_store), "--device", "cpu", "--crop", "16", "--workers", "1", "--steps", "2"]
    for extra, named in ((["--log", "."], "--log"), (["--checkpoint", "ckdir"], "ckdir")):
        proc = cli_in_process("train", *base, *extra, cwd=tmp_path)
        err = proc.stderr
        assert proc.returncode == 2, err[-3000:]
        assert "Traceback" not in err and named in err and "loss" not in err
        assert [line for line in err.splitlines() if line.startswith("error:")], err


# ------------------------------------------------------------------------------------- usage errors
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"device": "gpu"}, "--device 'gpu'"),
        ({"device": "mps"}, "--device 'mps'"),
        ({"device": "cuda:x"}, "--device 'cuda:x'"),
        ({"lr": -1.0}, "--lr"),
        ({"lr": 0.0}, "--lr"),
        ({"lr": float("nan")}, "--lr"),
        ({"crop_size": 0}, "crop"),
        ({"steps": 0}, "steps"),
        ({"batch_size": 0}, "batch"),
        ({"pad_multiple": 0}, "pad_multiple \\(--pad-multiple\\) must be"),
        ({"checkpoint_every": 1}, "needs a checkpoint path"),
        ({"checkpoint_every": 0, "checkpoint": "ck.pt"}, "checkpoint_every \\(--checkpoint-every\\) must be"),
        ({"pool": "fork"}, "pool \\(--pool\\) 'fork'"),
        ({"url": "notaurl"}, "url \\(--url\\) 'notaurl'.*http"),
        ({"cuda_graphs": True}, "CUDA graphs need --device cuda"),
    ],
)
def test_run_training_refuses_invalid_arguments_as_usage_errors(
    tmp_path: Path, kwargs: dict[str, Any], match: str
) -> None:
    args = {**SYNTH, "steps": 2, "log_path": None, "on_step": _never, **kwargs}
    if "checkpoint" in args:
        args["checkpoint"] = tmp_path / args["checkpoint"]
    url = args.pop("url", None)
    with pytest.raises(UsageError, match=match):
        run_training(None, url, **args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_run_training_refuses_cuda_without_a_gpu() -> None:
    with pytest.raises(UsageError, match="--device cuda: no CUDA device"):
        run_training(None, None, steps=1, crop_size=16, device="cuda", log_path=None, config=TINY)


# --------------------------------------------------------------------------------------------- resume
def test_resume_refuses_another_crop_or_seed(tmp_path: Path) -> None:
    run_training(None, None, steps=1, log_path=None, checkpoint=tmp_path / "ck.pt", **SYNTH)
    with pytest.raises(UsageError, match=r"crop.* 16.* 24"):
        run_training(None, None, steps=2, log_path=None, resume=tmp_path / "ck.pt",
                     **{**SYNTH, "crop_size": 24})  # fmt: skip
    with pytest.raises(UsageError, match=r"seed.* 0.* 7"):
        run_training(None, None, steps=2, log_path=None, resume=tmp_path / "ck.pt", seed=7, **SYNTH)


def test_resume_carries_the_earlier_steps_of_its_log_over(tmp_path: Path) -> None:
    """Resuming with the log of the run it continues keeps that run's steps before the checkpoint
    (those after it are trained again); a log of another run, or not a log, is refused."""
    log = tmp_path / "log.json"
    first = run_training(None, None, steps=4, log_path=log, checkpoint=tmp_path / "ck_{step}.pt",
                         checkpoint_every=2, **SYNTH)  # fmt: skip
    resumed = run_training(None, None, steps=5, log_path=log, resume=tmp_path / "ck_2.pt", **SYNTH)
    doc = _strict_json(log)
    assert doc == json.loads(json.dumps(resumed, default=str))
    assert [r["step"] for r in doc["steps"]] == [0, 1, 2, 3, 4]
    assert doc["steps"][:2] == _strict_json_of(first)["steps"][:2]
    assert [r["loss"] for r in doc["steps"][2:4]] == [r["loss"] for r in first["steps"][2:4]]
    assert doc["steps_from_earlier_log"] == 2 and doc["start_step"] == 2
    assert [c["step"] for c in doc["checkpoints"]] == [2]
    assert doc["summary"]["steps"] == 5

    other = tmp_path / "other.json"
    run_training(None, None, steps=1, log_path=other, seed=3, **SYNTH)
    with pytest.raises(UsageError, match=r"other\.json .*another run.*seed"):
        run_training(
            None, None, steps=3, log_path=other, resume=tmp_path / "ck_2.pt", on_step=_never, **SYNTH
        )
    (tmp_path / "text.json").write_text("not a log")
    with pytest.raises(UsageError, match=r"text\.json .*not a training log"):
        run_training(None, None, steps=3, log_path=tmp_path / "text.json", resume=tmp_path / "ck_2.pt",
                     on_step=_never, **SYNTH)  # fmt: skip


def _strict_json_of(doc: dict[str, Any]) -> Any:
    return json.loads(json.dumps(doc, default=str))


@pytest.mark.parametrize("kind", ["text", "pickle", "torch-object"])
def test_resume_from_a_file_that_is_not_a_checkpoint_says_so_in_one_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "notack.pt"
    if kind == "text":
        path.write_text("hello\n")
    elif kind == "pickle":
        path.write_bytes(pickle.dumps({"step": 3}))
    else:  # a zip torch.save wrote, holding an object the weights-only loader refuses
        torch.save({"step": 3, "when": threading.Lock}, path)
    with pytest.raises(UsageError, match=r"notack\.pt: not a featurecache checkpoint") as caught:
        run_training(None, None, steps=5, log_path=None, resume=path, **SYNTH)
    message = str(caught.value)
    assert "\n" not in message and "weights_only" not in message and "Weights only" not in message


def test_checkpoint_lines_number_steps_like_the_step_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="featurecache.model.train"):
        run_training(None, None, steps=3, log_path=None, checkpoint=tmp_path / "ck.pt", checkpoint_every=2,
                     **SYNTH)  # fmt: skip
    lines = [r.getMessage() for r in caplog.records if re.match(r"step \d|checkpoint after", r.getMessage())]
    pairs = [(lines[i - 1], line) for i, line in enumerate(lines) if line.startswith("checkpoint")]
    assert len(pairs) == 2
    for step_line, ck_line in pairs:
        step = re.match(r"step (\d+)", step_line)
        ck = re.match(r"checkpoint after step (\d+) \((\d+) steps done\)", ck_line)
        assert step and ck and step.group(1) == ck.group(1) and int(ck.group(2)) == int(step.group(1)) + 1


def test_training_errors_are_not_usage_errors() -> None:
    """The CLI maps UsageError to exit 2 and every other FeatureCacheError to 3."""
    from featurecache.model.train import TrainingError

    assert issubclass(TrainingError, FeatureCacheError) and not issubclass(TrainingError, UsageError)


def test_a_cpu_crop_that_cannot_fit_in_memory_is_refused_before_training(
    sample_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU the fp32 references need ~N² memory per step: a crop whose step the machine
    cannot hold is refused up front (a UsageError naming --crop and a crop that fits), where it
    used to be killed by the OOM killer mid-run with its log saying "running". The machine's
    available memory is set to 4 GiB for the test; the threshold is the memory planner's."""
    from featurecache.model import train
    from featurecache.plan.ledger import Precision
    from featurecache.plan.memory import estimate_step

    monkeypatch.setattr(train, "_available_memory", lambda: 4 * 2**30)
    log = tmp_path / "log.json"
    with pytest.raises(
        UsageError, match=r"--crop 384 on the CPU: a step of 384 tokens .* give --crop (\d+) or less"
    ) as err:
        run_training(sample_store, None, steps=1, crop_size=384, device="cpu", log_path=log, on_step=_never)
    assert not log.exists()
    suggested = int(re.search(r"give --crop (\d+)", str(err.value)).group(1))  # type: ignore[union-attr]
    budget = 4 * 2**30 * train.CPU_MEMORY_SHARE

    def predict(n: int) -> int:
        return estimate_step(ModelConfig(), n, train.CPU_CHECK_MSA_ROWS, 1, fused=False,
                             precision=Precision.fp32(), overhead_bytes=0).peak_bytes  # fmt: skip

    assert 16 < suggested < 384 and predict(suggested) <= budget < predict(384)
    assert predict(2 * suggested) > budget  # the suggestion is not far below what fits

    # a crop that fits trains
    doc = run_training(sample_store, None, steps=1, crop_size=32, device="cpu", log_path=log, workers=1)
    assert doc["status"] == "completed"


@pytest.mark.parametrize(("option", "value", "words"), [("--seed", "-1", "seed (--seed) must be ≥ 0"),
                                                        ("--workers", "0", "workers (--workers) must be ≥ 1"),
                                                        ("--clip-grad-norm", "0", "clip_grad_norm (--clip-grad-norm) must be")])  # fmt: skip
def test_train_cli_refuses_a_negative_seed_and_no_workers(
    sample_store: Path, tmp_path: Path, option: str, value: str, words: str
) -> None:
    """``--seed -1`` ended in a numpy traceback (exit 1, the code for failed inputs) and ``--workers 0``
    in an exit 3 that did not name the option: both are usage errors (exit 2) naming it."""
    proc = cli_in_process("train", "--store", str(sample_store), "--device", "cpu", "--crop", "16", "--steps", "1",
                          option, value, "--log", str(tmp_path / "log.json"))  # fmt: skip
    err = proc.stderr
    assert proc.returncode == 2, err[-2000:]
    assert words in err and "Traceback" not in err, err[-2000:]


def test_train_cli_clips_at_the_norm_it_is_given(sample_store: Path, tmp_path: Path) -> None:
    """``--clip-grad-norm`` reaches the loop: the log header records the value given, and a step is
    marked clipped exactly when its gradient norm is above it (a norm far below every step's, so
    every trained step is clipped; the CLI had no such option, and always clipped at the default)."""
    log = tmp_path / "log.json"
    proc = cli_in_process("train", "--store", str(sample_store), "--device", "cpu", "--crop", "16", "--steps", "2",
                          "--workers", "1", "--clip-grad-norm", "1e-6", "--log", str(log))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = _strict_json(log)
    assert doc["clip_grad_norm"] == 1e-6
    trained = [r for r in doc["steps"] if r["loss"] is not None]
    assert trained and all(r["clipped"] and r["grad_norm"] > 1e-6 for r in trained), doc["steps"]


def test_the_cpu_memory_check_reads_a_services_entries_as_a_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over ``--url`` the check sizes the step by the service's largest entry, as it does for a local
    store: a store of two small entries (at most ~100 tokens) trains at --crop 384 on a machine
    whose 4 GiB would not hold a 384-token step (it was refused over a URL, where every sample
    has at most ~100 tokens)."""
    from featurecache.model import train
    from services.lookup.server import ThreadedServer
    from services.lookup.settings import Settings
    from tests.conftest import CCD, STRUCTURES, build_store

    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("4zey.cif", "5i55.cif"):
        shutil.copy(STRUCTURES / name, inputs / name)
    store = tmp_path / "store"
    build_store(store, inputs, workers=1, ccd=CCD)
    monkeypatch.setattr(train, "_available_memory", lambda: 4 * 2**30)
    with pytest.raises(UsageError, match="--crop 384 on the CPU"):  # sized by the crop, this would not fit
        train._check_cpu_memory(ModelConfig(), None, 384, 1)
    with ThreadedServer(Settings(store_path=store)) as url:
        doc = run_training(
            None, url, steps=1, crop_size=384, device="cpu", log_path=tmp_path / "log.json", workers=1
        )
    assert doc["status"] == "completed" and doc["steps"][0]["tokens"] <= 128
