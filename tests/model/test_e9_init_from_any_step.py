"""--init-from X is never overwritten by the run's own checkpoints (s25 E9; review RF2 s25 #1, #6).

A run checkpoints the steps done whenever it stops early (SIGTERM, the batch source ending), not
only every --checkpoint-every steps and at --steps: ``--init-from ck_3.pt --checkpoint ck_{step}.pt
--checkpoint-every 100 --steps 1000`` stopped after 3 steps wrote ck_3.pt over the file it started
from. Every step count 1..--steps is a possible save, and each save is written through a temporary
and a staged file beside its path (``.NAME.tmp``, ``.NAME.pending``): a run that could write X under
any of those names is refused before anything runs. A save renames its file over the path, which
replaces a symlink there, not its target: a --checkpoint that is a symlink to X is not refused."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from featurecache.errors import UsageError
from featurecache.model.train import load_checkpoint, make_batches, run_training
from tests.model.test_train_guards import _cli, _steps_logged
from tests.model.test_trunk import TINY

SYNTH: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _tiny(tmp_path: Path) -> Path:
    cfg = tmp_path / "tiny.json"
    TINY.to_json(cfg)
    return cfg


def test_cli_refuses_a_step_template_that_an_early_stop_would_write_over_the_init_file(
    sample_store: Path, tmp_path: Path
) -> None:
    """The brief's repro on the sample store: a 3-step run leaves ck_3.pt; a run from it with
    ck_{step}.pt every 100 of 1000 steps, a real ``featurecache train --device cpu``, is refused
    (exit 2, one line naming both paths) and ck_3.pt is unchanged byte for byte. Before the fix it
    trained; the SIGTERM below (as on a preemption) stopped it and it checkpointed the steps done.
    The first run, which only makes the init file, is the CLI's run_training in this process (a
    process of its own cost ~3 s: the imports)."""
    d, cfg = tmp_path / "ck", _tiny(tmp_path)
    common = ["--store", str(sample_store), "--device", "cpu", "--crop", "16", "--workers", "1",
              "--model-config", str(cfg), "--checkpoint", str(d / "ck_{step}.pt")]  # fmt: skip
    first = run_training(sample_store, None, steps=3, log_path=tmp_path / "first.json", workers=1,
                         checkpoint=d / "ck_{step}.pt", **SYNTH)  # fmt: skip
    assert first["status"] == "completed"
    init = d / "ck_3.pt"
    assert _names(d) == ["ck_3.pt"] and load_checkpoint(init)["step"] == 3
    before = _sha(init)

    log, errfile = tmp_path / "log.json", tmp_path / "stderr.txt"
    args = [
        *common,
        "--init-from",
        str(init),
        "--checkpoint-every",
        "100",
        "--steps",
        "1000",
        "--log",
        str(log),
    ]
    with errfile.open("w") as stderr:
        proc = _cli(*args, stdout=subprocess.PIPE, stderr=stderr)
        try:
            deadline = time.monotonic() + 300
            while proc.poll() is None and time.monotonic() < deadline and not _steps_logged(log):
                time.sleep(0.05)
            if proc.poll() is None:  # it trains: stop it as a preemption would
                proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = errfile.read_text()
    assert _sha(init) == before, f"{init} was overwritten: {_names(d)}; {text[-2000:]}"
    assert proc.returncode == 2, text[-3000:]
    lines = text.strip().splitlines()
    assert "Traceback" not in text and len([line for line in lines if "would overwrite" in line]) == 1, text
    last = lines[-1]
    assert f"--checkpoint {d / 'ck_{step}.pt'} would overwrite {init}," in last, last
    assert "after step 2 (3 steps done" in last, last
    assert _names(d) == ["ck_3.pt"] and not log.exists()


def _real_batches(store: Path, n: int) -> list[dict[str, Any]]:
    src = make_batches(store, None, crop_size=16, batch_size=1, seed=0, workers=1)
    try:
        return list(islice(src.batches, n))
    finally:
        src.close()


def test_a_source_that_ends_after_3_batches_cannot_reach_the_init_file(
    sample_store: Path, tmp_path: Path
) -> None:
    """RF2 #1 (ii): the batch source ends after 3 real batches of the sample store. Before the fix
    the run completed and its end-of-source checkpoint ck_3.pt replaced the init file."""
    three = _real_batches(sample_store, 3)
    init = tmp_path / "ck_3.pt"
    run_training(sample_store, None, steps=3, log_path=None, checkpoint=init, workers=1, **SYNTH)
    before = _sha(init)
    with pytest.raises(UsageError) as caught:
        run_training(sample_store, None, steps=1000, log_path=None, init_from=init, batches=iter(three),
                     checkpoint=tmp_path / "ck_{step}.pt", checkpoint_every=100, workers=1, **SYNTH)  # fmt: skip
    msg = str(caught.value)
    assert "\n" not in msg and f"would overwrite {init}," in msg and str(tmp_path / "ck_{step}.pt") in msg, (
        msg
    )
    assert _sha(init) == before and _names(tmp_path) == ["ck_3.pt"]


@pytest.fixture(scope="module")
def start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-step checkpoint of a synthetic run, copied into each test."""
    path = tmp_path_factory.mktemp("e9") / "start.pt"
    run_training(None, None, steps=2, log_path=None, checkpoint=path, **SYNTH)
    return path


@pytest.mark.parametrize(
    ("name", "template", "every", "steps"),
    [
        ("ck_3.pt", "ck_{step}.pt", 100, 1000),  # an early stop after 3 steps
        ("ck_3.pt", "ck_{step}.pt", None, 7),  # no --checkpoint-every: still any early stop
        ("ck_1.pt", "ck_{step}.pt", 2, 4),  # 1 step done: the first possible save
        ("ck_3.pt", "ck_{step}.pt", 100, 3),  # the final save
        (".ck_5.pt.pending", "ck_{step}.pt", 100, 9),  # a staged file: the save stages there first
        (".ck_5.pt.tmp", "ck_{step}.pt", 100, 9),  # the temporary file of ck_5.pt's save
        ("..ck_5.pt.pending.tmp", "ck_{step}.pt", 100, 9),  # that of its staged file
        ("run_4_ck.pt", "run_{step}_ck.pt", None, 8),
        ("x.pt", "x.pt", 100, 5),  # a run that stops after any step writes x.pt
    ],
)
def test_any_step_a_run_could_save_at_is_refused(
    start: Path, tmp_path: Path, name: str, template: str, every: int | None, steps: int
) -> None:
    init = tmp_path / name
    shutil.copyfile(start, init)
    with pytest.raises(UsageError) as caught:
        run_training(None, None, steps=steps, log_path=None, init_from=init, checkpoint=tmp_path / template,
                     checkpoint_every=every, **SYNTH)  # fmt: skip
    msg = str(caught.value)
    assert "\n" not in msg and f"--checkpoint {tmp_path / template} would overwrite {init}" in msg, msg
    assert init.read_bytes() == start.read_bytes() and _names(tmp_path) == [name]


@pytest.mark.parametrize(
    ("name", "template", "steps"),
    [
        ("ck_3.pt", "ck_{step}.pt", 2),  # a 2-step run never writes ck_3.pt
        ("ck_03.pt", "ck_{step}.pt", 5),  # nor ck_03.pt: steps are written without zeros
        ("ck_3.pt.bak", "ck_{step}.pt", 5),
    ],
)
def test_a_step_the_run_cannot_reach_is_not_refused(
    start: Path, tmp_path: Path, name: str, template: str, steps: int
) -> None:
    init = tmp_path / name
    shutil.copyfile(start, init)
    doc = run_training(None, None, steps=steps, log_path=None, init_from=init, checkpoint=tmp_path / template,
                       **SYNTH)  # fmt: skip
    assert doc["status"] == "completed" and load_checkpoint(tmp_path / f"ck_{steps}.pt")["step"] == steps
    assert init.read_bytes() == start.read_bytes()


def test_a_symlinked_directory_or_step_directory_is_still_refused(start: Path, tmp_path: Path) -> None:
    """The directories are followed when a checkpoint is written: ck/ through a symlink to it, and a
    per-step directory runs/7 that is a symlink to ck/ (a 9-step run may write runs/7/x.pt)."""
    real = tmp_path / "ck"
    real.mkdir()
    for name in ("ck_3.pt", "x.pt"):
        shutil.copyfile(start, real / name)
    (tmp_path / "alias").symlink_to(real)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "7").symlink_to(real)
    cases = [(real / "ck_3.pt", tmp_path / "alias" / "ck_{step}.pt", 5),
             (real / "x.pt", tmp_path / "runs" / "{step}" / "x.pt", 9)]  # fmt: skip
    for init, template, steps in cases:
        with pytest.raises(UsageError, match="would overwrite") as caught:
            run_training(None, None, steps=steps, log_path=None, init_from=init, checkpoint=template,
                         checkpoint_every=100, **SYNTH)  # fmt: skip
        assert str(init) in str(caught.value) and str(template) in str(caught.value)
    assert _names(real) == ["ck_3.pt", "x.pt"] and _names(tmp_path / "runs") == ["7"]
    for name in ("ck_3.pt", "x.pt"):
        assert (real / name).read_bytes() == start.read_bytes()


@pytest.mark.parametrize("every", [None, 1])
def test_a_checkpoint_that_is_a_symlink_to_the_init_file_replaces_the_link(
    start: Path, tmp_path: Path, every: int | None
) -> None:
    """RF2 #6: save_checkpoint renames its file over the path (os.replace), staged ones too, which
    replaces a symlink at the path rather than writing through it: latest.pt -> ck_2.pt ends as a
    regular file holding the new run's step, and ck_2.pt keeps its bytes. Refused before the fix."""
    init, link = tmp_path / "ck_2.pt", tmp_path / "latest.pt"
    shutil.copyfile(start, init)
    link.symlink_to(init.name)
    doc = run_training(None, None, steps=3, log_path=None, init_from=init, checkpoint=link, checkpoint_every=every,
                       **SYNTH)  # fmt: skip
    assert doc["status"] == "completed"
    assert not link.is_symlink() and load_checkpoint(link)["step"] == 3
    assert init.read_bytes() == start.read_bytes() and load_checkpoint(init)["step"] == 2
    assert _names(tmp_path) == ["ck_2.pt", "latest.pt"]
    # initialised through the link, with the link as --checkpoint: the link is replaced, ck_2.pt kept
    link.unlink()
    link.symlink_to(init.name)
    run_training(None, None, steps=1, log_path=None, init_from=link, checkpoint=link, **SYNTH)
    assert not link.is_symlink() and init.read_bytes() == start.read_bytes()
    assert os.stat(link).st_ino != os.stat(init).st_ino
