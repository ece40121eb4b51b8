"""The checkpoint staged as ``.NAME.pending`` (RF1 finding 1): it waits for the next step's loss
only to catch a divergence, so only a non-finite loss (or non-finite parameters) discards it.
Every other way the run ends keeps it: an exception mid-step, Ctrl-C (once or twice), a second
SIGTERM (which ends the process at once). A SIGKILL cannot be caught: the resume that follows
names the staged file it left. The log lines say "staged" and "kept", never a file not yet there.
Also RF1 findings 2 and 4: --init-from never overwritten by --checkpoint, its errors' wording."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from featurecache.errors import UsageError
from featurecache.model.batches import synthetic_batch
from featurecache.model.train import load_checkpoint, run_training
from tests.model.test_trunk import TINY

SYNTH: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}
ROOT = Path(__file__).resolve().parents[2]


def _stream(at: int, action: Any) -> Iterator[dict[str, torch.Tensor]]:
    """Synthetic batches; ``action()`` runs when batch ``at`` (0-based: step ``at``'s) is drawn."""
    rng = np.random.default_rng(0)
    for i in range(10_000):
        if i == at:
            action()
        yield synthetic_batch(rng, 1, 16, 64, True)


def _broken_batch() -> dict[str, torch.Tensor]:
    """A batch the model cannot run: its token features have the wrong width (an error mid-step)."""
    batch = synthetic_batch(np.random.default_rng(1), 1, 16, 64, True)
    return {k: (v[..., :1] if k == "profile" else v) for k, v in batch.items()}


def _then_broken(at: int) -> Iterator[dict[str, torch.Tensor]]:
    rng = np.random.default_rng(0)
    for i in range(10_000):
        yield _broken_batch() if i == at else synthetic_batch(rng, 1, 16, 64, True)


def test_an_error_mid_step_keeps_the_staged_checkpoint(tmp_path: Path) -> None:
    """Checkpoint after step 1 (2 steps done) is staged; step 2's batch breaks the model mid-step
    (not the source: no data failure). The checkpoint is moved into place, and the log lists it."""
    ck = tmp_path / "ck.pt"
    with pytest.raises(Exception) as caught:
        run_training(None, None, steps=10, log_path=tmp_path / "log.json", checkpoint=ck, checkpoint_every=2,
                     batches=_then_broken(2), prefetch=False, **SYNTH)  # fmt: skip
    assert not isinstance(caught.value, AssertionError)
    assert load_checkpoint(ck)["step"] == 2
    assert not list(tmp_path.glob(".*.pending"))
    logged = json.loads((tmp_path / "log.json").read_text())
    assert logged["checkpoints"] == [{"step": 2, "path": str(ck)}], logged["checkpoints"]


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_during_the_next_step_keeps_the_staged_checkpoint(tmp_path: Path, presses: int) -> None:
    """Ctrl-C while step 2's batch is drawn: once (the run stops after step 2, as before) or twice
    (a KeyboardInterrupt at once). Either way the checkpoint after step 1 is in place, none pending."""

    def press() -> None:
        for _ in range(presses):
            os.kill(os.getpid(), signal.SIGINT)

    ck = tmp_path / "ck.pt"
    # Python's own Ctrl-C handler, whatever the runner inherited: a test run started in the background
    # by a non-interactive shell (`bash .ci/run &`) ignores SIGINT, and run_training leaves an ignored
    # SIGINT ignored (documented), so the presses would do nothing there
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):  # handed on after the run (once) or at once (twice)
            run_training(None, None, steps=10, log_path=None, checkpoint=ck, checkpoint_every=2,
                         batches=_stream(2, press), prefetch=False, **SYNTH)  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, before)
    assert load_checkpoint(ck)["step"] >= 2
    assert not list(tmp_path.glob(".*.pending"))
    if presses == 2:
        assert load_checkpoint(ck)["step"] == 2


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from featurecache.model.batches import synthetic_batch
    from featurecache.model.config import ModelConfig
    from featurecache.model.train import run_training

    ck, how = sys.argv[1], sys.argv[2]
    TINY = ModelConfig.from_json(sys.argv[3])  # tests.model.test_trunk's (importing it costs ~1 s)

    def stream():
        rng = np.random.default_rng(0)
        for i in range(10_000):
            if i == 2:  # while step 2's batch is drawn: the checkpoint after step 1 is staged
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)
            yield synthetic_batch(rng, 1, 16, 64, True)

    run_training(None, None, steps=10, log_path=None, checkpoint=ck, checkpoint_every=1, batches=stream(),
                 prefetch=False, crop_size=16, device="cpu", config=TINY)
    """
)


def _child(tmp_path: Path, how: str) -> subprocess.CompletedProcess[str]:
    cfg = json.dumps(TINY.to_dict())
    return subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "ck.pt"), how, cfg], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_a_second_sigterm_keeps_the_staged_checkpoint(tmp_path: Path) -> None:
    """A second SIGTERM ends the process at once (no Python cleanup runs after it): the staged
    checkpoint after step 1 is moved into place first."""
    done = _child(tmp_path, "term")
    assert done.returncode == -signal.SIGTERM, (done.returncode, done.stderr[-2000:])
    assert load_checkpoint(tmp_path / "ck.pt")["step"] == 2
    assert not list(tmp_path.glob(".*.pending"))


def test_resume_names_the_staged_checkpoint_a_sigkill_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGKILL while step 2's batch is drawn: ck.pt holds step 1, .ck.pt.pending step 2. The resume
    from ck.pt warns, naming the pending file and its step."""
    done = _child(tmp_path, "kill")
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stderr[-2000:])
    ck, pending = tmp_path / "ck.pt", tmp_path / ".ck.pt.pending"
    assert load_checkpoint(ck)["step"] == 1 and load_checkpoint(pending)["step"] == 2
    with caplog.at_level(logging.WARNING, logger="featurecache"):
        run_training(None, None, steps=3, log_path=None, resume=ck, checkpoint=tmp_path / "other.pt", **SYNTH)
    said = [r.getMessage() for r in caplog.records if str(pending) in r.getMessage()]
    assert said and "step 2" in said[0], [r.getMessage() for r in caplog.records]


def test_the_log_says_staged_and_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Checkpoints after steps 0, 1, 2 (every step, 3 steps): the first two are staged, then kept;
    no line names a checkpoint path as written while it is only staged."""
    ck = tmp_path / "ck_{step}.pt"
    with caplog.at_level(logging.INFO, logger="featurecache"):
        run_training(None, None, steps=3, log_path=None, checkpoint=ck, checkpoint_every=1, **SYNTH)
    lines = [r.getMessage() for r in caplog.records if "checkpoint after step" in r.getMessage()]
    first = tmp_path / "ck_1.pt"
    staged = [line for line in lines if str(tmp_path / ".ck_1.pt.pending") in line]
    assert staged and "staged" in staged[0], lines
    assert any(line.startswith("kept the checkpoint") and line.endswith(str(first)) for line in lines), lines
    # the line that names ck_1.pt as a checkpoint comes after the one that stages it
    naming = [i for i, line in enumerate(lines) if line.endswith(str(first))]
    assert naming and naming[0] > lines.index(staged[0]), lines


@pytest.mark.parametrize(("template", "every", "steps"), [("a.pt", None, 3), ("ck_{step}.pt", 2, 6)])
def test_init_from_is_never_overwritten_by_checkpoint(
    tmp_path: Path, template: str, every: int | None, steps: int
) -> None:
    """--init-from X --checkpoint X (or a {step} template that reaches X's name) is refused before
    training; X keeps its step and optimizer state."""
    source = tmp_path / ("a.pt" if template == "a.pt" else "ck_2.pt")
    run_training(None, None, steps=2, log_path=None, checkpoint=source, **SYNTH)
    before = source.read_bytes()
    with pytest.raises(UsageError, match="would overwrite") as caught:
        run_training(None, None, steps=steps, log_path=None, init_from=source, checkpoint=tmp_path / template,
                     checkpoint_every=every, **SYNTH)  # fmt: skip
    assert str(source) in str(caught.value) and "\n" not in str(caught.value)
    assert source.read_bytes() == before
    # another path is fine
    doc = run_training(
        None, None, steps=1, log_path=None, init_from=source, checkpoint=tmp_path / "new.pt", **SYNTH
    )
    assert doc["status"] == "completed" and load_checkpoint(tmp_path / "new.pt")["step"] == 1


def test_init_from_errors_say_initialise(tmp_path: Path) -> None:
    missing = tmp_path / "nosuch.pt"
    with pytest.raises(UsageError) as caught:
        run_training(None, None, steps=1, log_path=None, init_from=missing, **SYNTH)
    assert str(caught.value) == f"cannot initialise from {missing}: no such file"
    bad = tmp_path / "bad.pt"
    bad.write_text("garbage\n")
    with pytest.raises(UsageError) as caught:
        run_training(None, None, steps=1, log_path=None, init_from=bad, **SYNTH)
    assert str(caught.value).startswith(f"cannot initialise from {bad}: not a featurecache checkpoint")


def test_a_new_run_warns_that_it_replaces_an_existing_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """RF1 finding 2: a new run (also --init-from) given an earlier run's --log replaces it: it says so."""
    log_path = tmp_path / "log.json"
    run_training(None, None, steps=1, log_path=log_path, **SYNTH)
    with caplog.at_level(logging.WARNING, logger="featurecache"):
        run_training(None, None, steps=1, log_path=log_path, **SYNTH)
    assert any(str(log_path) in r.getMessage() and "replaces" in r.getMessage() for r in caplog.records)
