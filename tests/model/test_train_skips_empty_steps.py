"""A batch without a supervised distogram pair is not trained on (review R25c s43 #1): the step is
logged (``pairs`` 0, loss and gradient norm null, ``skip_reason``), counts toward ``--steps`` and the
data position, and leaves the parameters and the optimizer state as they were (AdamW's momentum and
weight decay moved every parameter on such a batch: 35 of 35 tensors in R25c); the summary's first
and last loss are of steps that trained, and a resume across such steps is bitwise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from featurecache.model import train
from featurecache.model.train import NO_PAIRS, describe_run, load_checkpoint, run_training
from tests.model.test_trunk import TINY

#: the synthetic stream's batches whose representative atoms are all unresolved
EMPTY = (1, 3)
STEPS = 5


@pytest.fixture
def empty_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Train's synthetic stream with batches :data:`EMPTY` (0-based, in stream order) emptied of
    supervised pairs; returns the supervised pairs each batch drawn had, counted here."""
    real = train.synthetic_batches
    drawn: list[int] = []

    def stream(*args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        for i, batch in enumerate(real(*args, **kwargs)):
            if i in EMPTY:
                batch["rep_mask"][:] = False
            n = int((batch["rep_mask"] & batch["token_mask"]).sum())
            drawn.append(n * (n - 1) // 2)
            yield batch

    monkeypatch.setattr(train, "synthetic_batches", stream)
    return drawn


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two checkpoints hold bitwise the same parameters and optimizer state."""
    if any(not torch.equal(v, b["model"][k]) for k, v in a["model"].items()):
        return False
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[p][k], sb[p][k]) for p in sa for k in sa[p])


COMMON: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}


def test_a_batch_without_pairs_is_skipped_and_resumes_bitwise(
    empty_batches: list[int], tmp_path: Path
) -> None:
    log = tmp_path / "log.json"
    doc = run_training(None, None, steps=STEPS, log_path=log, checkpoint=tmp_path / "ck_{step}.pt", checkpoint_every=1,
                       **COMMON)  # fmt: skip
    steps = doc["steps"]
    assert [r["pairs"] for r in steps] == empty_batches[:STEPS]
    for r in steps:
        if r["step"] in EMPTY:
            assert r["pairs"] == 0 and r["loss"] is None and r["grad_norm"] is None, r
            assert r["skip_reason"] == NO_PAIRS
        else:
            assert r["pairs"] > 0 and isinstance(r["loss"], float) and r["skip_reason"] is None, r
    # a skipped step changes nothing; a trained one does
    ck = {k: load_checkpoint(tmp_path / f"ck_{k}.pt") for k in range(1, STEPS + 1)}
    assert _same(ck[1], ck[2]) and _same(ck[3], ck[4])
    assert not _same(ck[2], ck[3]) and not _same(ck[4], ck[5])
    # every checkpoint kept, in order, none left staged (those after a skipped step waited for a loss)
    assert [c["step"] for c in doc["checkpoints"]] == list(range(1, STEPS + 1))
    assert not list(tmp_path.glob(".*pending"))
    summary = doc["summary"]
    assert summary["first_loss"] == steps[0]["loss"] and summary["last_loss"] == steps[4]["loss"]
    assert summary["skipped_steps"] == 2
    assert "2 steps skipped (no supervised distogram pair)" in describe_run(doc)
    written = json.loads(log.read_text())
    assert written["steps"][1]["loss"] is None and "pairs" in written["fields"]

    # resumed before and after a skipped step: the same steps, bitwise
    for k in (1, 2):
        again = run_training(None, None, steps=STEPS, log_path=None, resume=tmp_path / f"ck_{k}.pt",
                             checkpoint=tmp_path / f"again{k}.pt", **COMMON)  # fmt: skip
        assert [(r["loss"], r["pairs"], r["skip_reason"]) for r in again["steps"]] == [
            (r["loss"], r["pairs"], r["skip_reason"]) for r in steps[k:]
        ]
        assert _same(load_checkpoint(tmp_path / f"again{k}.pt"), ck[STEPS])


def test_a_run_of_skipped_steps_only_has_no_loss(empty_batches: list[int], tmp_path: Path) -> None:
    """Two steps, the second skipped, then a resume of that one step: no loss to report, not 0."""
    run_training(None, None, steps=1, log_path=None, checkpoint=tmp_path / "ck.pt", **COMMON)
    doc = run_training(None, None, steps=2, log_path=None, resume=tmp_path / "ck.pt", **COMMON)
    assert [r["skip_reason"] for r in doc["steps"]] == [NO_PAIRS]
    assert doc["summary"]["first_loss"] is None and doc["summary"]["last_loss"] is None
    assert "loss" not in describe_run(doc) and "1 step skipped" in describe_run(doc)
