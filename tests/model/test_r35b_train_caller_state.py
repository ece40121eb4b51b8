"""``run_training()`` called in a caller's process leaves the caller's working directory and torch's
global RNG alone (review R35b s49 #11): by default it wrote ``train_log.json`` into the cwd (the
function's default was the CLI's), and it reseeded the global RNG (``torch.initial_seed()`` was the
run's seed afterwards, and the caller's random stream was gone). The run itself trains as before,
bitwise: its losses and gradient norms are those of the code before the change, run from that
commit's package in a process of its own, with the caller's RNG seeded otherwise first in both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from featurecache.model.train import run_training
from tests.conftest import featurecache_at
from tests.model.test_trunk import TINY

#: the last commit before the change: its run_training seeded the global RNG itself
BEFORE = "9b545ae867a7713cae1bf43c4f3e2ee05c063d6c"

SMALL: dict[str, Any] = {"crop_size": 16, "device": "cpu", "workers": 1}

#: one short run on the sample store, printed as float.hex per step (the caller's RNG seeded 1234
#: first: a run that drew from it, not from its own seed, would initialise other weights)
_RUN = """
import json, sys, torch
from featurecache.model.config import ModelConfig
from featurecache.model.train import run_training
torch.manual_seed(1234)
kw = json.loads(sys.argv[2])
doc = run_training(sys.argv[1], None, steps=3, seed=5, log_path=None, config=ModelConfig(**kw.pop("config")), **kw)
print(json.dumps([[r["step"], r["loss"].hex(), r["grad_norm"].hex()] for r in doc["steps"]]))
"""


def _run_here(store: Path, kw: dict[str, Any]) -> list[list[Any]]:
    from featurecache.model.config import ModelConfig

    torch.manual_seed(1234)
    doc = run_training(store, None, steps=3, seed=5, log_path=None, config=ModelConfig(**kw["config"]),
                       **{k: v for k, v in kw.items() if k != "config"})  # fmt: skip
    return [[r["step"], r["loss"].hex(), r["grad_norm"].hex()] for r in doc["steps"]]


def test_training_is_bitwise_the_code_before_the_change(sample_store: Path, tmp_path: Path) -> None:
    kw = {**SMALL, "config": TINY.to_dict()}
    old = featurecache_at(BEFORE, tmp_path / "old")
    done = subprocess.run([sys.executable, "-c", _RUN, str(sample_store), json.dumps(kw)], cwd=old,
                          env={**os.environ, "PYTHONPATH": str(old)}, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    before = json.loads(done.stdout.strip().splitlines()[-1])
    assert [s for s, *_ in before] == [0, 1, 2]
    assert _run_here(sample_store, kw) == before


def test_the_callers_rng_is_left_as_it_was(sample_store: Path, tmp_path: Path) -> None:
    torch.manual_seed(1234)
    torch.rand(3)  # somewhere in the caller's stream, not at its start
    state, seed = torch.get_rng_state(), torch.initial_seed()
    run_training(sample_store, None, steps=2, seed=5, log_path=tmp_path / "log.json", config=TINY, **SMALL)
    assert torch.initial_seed() == seed == 1234
    assert torch.equal(torch.get_rng_state(), state)
    expected = torch.rand(3, generator=torch.Generator().set_state(state))
    assert torch.equal(torch.rand(3), expected)  # the caller's stream goes on where it was


def test_the_callers_rng_is_left_as_it_was_when_the_run_fails(tmp_path: Path) -> None:
    torch.manual_seed(77)
    state = torch.get_rng_state()

    def fail(record: dict[str, Any]) -> None:
        raise RuntimeError("the caller's step callback failed")

    with pytest.raises(RuntimeError, match="callback failed"):
        run_training(None, None, steps=3, seed=5, log_path=None, config=TINY, on_step=fail, **SMALL)
    assert torch.equal(torch.get_rng_state(), state)


def test_no_log_file_unless_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    doc = run_training(None, None, steps=1, config=TINY, **SMALL)
    assert doc["status"] == "completed"
    assert sorted(os.listdir(tmp_path)) == []
