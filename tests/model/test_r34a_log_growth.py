"""The training log's memory and write cost do not grow with the run (review R34a s48 #1).

``run_training`` kept every step record in memory (``records``, the log's ``steps``, the log's
serialised lines) and each write of the log (forced at every checkpoint) summarised all of them and
rewrote the whole file: ~1.6 KB a step and a write that grew with the run (3.5 s at 200k steps). Now a
write appends the new step lines to the log's twin and renames it over the log, and the summary is
kept as the records come. The file stays the one JSON document, whole at every moment."""

from __future__ import annotations

import gc
import json
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from featurecache.model import train as train_mod
from featurecache.model.config import ModelConfig
from featurecache.model.train import _RunLog, run_training, summarize

TINY = ModelConfig(c_token=32, c_pair=16, n_blocks=1, n_heads=2, head_dim=16, n_heads_single=2, transition_n=2)  # fmt: skip
SYNTH: dict[str, Any] = {"crop_size": 16, "device": "cpu", "config": TINY}


def _written() -> int:
    """Bytes this process has handed to write(2) and pwrite(2) so far (Linux)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


def _record(template: dict[str, Any], i: int) -> dict[str, Any]:
    return {**template, "step": i, "step_time_s": template["step_time_s"] * (1 + (i % 7) / 100),
            "loss": template["loss"] + i * 1e-9, "positions": [i]}  # fmt: skip


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The log of a real (synthetic-batch) run of 2 steps: the header and records a long run has."""
    log = tmp_path_factory.mktemp("r34a") / "log.json"
    run_training(None, None, steps=2, log_path=log, **SYNTH)
    return json.loads(log.read_text())  # type: ignore[no-any-return]


def test_writes_append_and_the_log_stays_whole(real_log: dict[str, Any], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    template = real_log["steps"][-1]
    doc = {k: v for k, v in real_log.items() if k not in ("steps", "summary")}
    path = tmp_path / "log.json"
    runlog = _RunLog(path, doc, every_s=5.0)
    add = getattr(runlog, "add", None) or doc.setdefault("steps", []).append  # (before the fix: doc["steps"])
    n = 0

    def to(target: int) -> None:
        nonlocal n
        while n < target:
            add(_record(template, n))
            n += 1
            if n % 1000 == 0:  # as a run writes every 5 s
                runlog.write()

    to(2000)
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        to(12000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # the records' medians keep 32 bytes a step; before: ~1.6 KB (the records and their lines)
    assert grown / 10000 < 200, f"{grown / 10000:.0f} bytes a step"

    # a write costs the steps since the write before last and the tail, not the log (~6 MB here)
    to(12005)
    runlog.write()
    to(12010)
    size = path.stat().st_size
    start = _written()
    runlog.write()
    cost = _written() - start
    assert cost < 64 * 1024, f"a write of 10 steps wrote {cost} bytes (the log: {size})"

    # at every step of a write, and a write killed midway, the file at the path is a whole log
    # holding the steps of the last write
    seen: list[int] = []

    def check(name: str, real: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            seen.append(len(json.loads(path.read_text())["steps"]))
            return out

        monkeypatch.setattr(os, name, wrapped)

    for name in ("pwrite", "ftruncate", "replace", "link", "unlink"):
        check(name, getattr(os, name))
    to(12020)
    runlog.write()
    assert seen and set(seen) <= {12010, 12020}, sorted(set(seen))

    def killed(*args: Any) -> None:
        raise KeyboardInterrupt  # (SIGKILL cannot be caught: the write stops here all the same)

    monkeypatch.setattr(os, "replace", killed)
    to(12030)
    with pytest.raises(KeyboardInterrupt):
        runlog.write()
    monkeypatch.undo()
    whole = json.loads(path.read_text())
    assert [r["step"] for r in whole["steps"]] == list(range(12020))
    to(12040)
    runlog.write()  # goes on after it: nothing lost, nothing twice
    whole = json.loads(path.read_text())
    assert [r["step"] for r in whole["steps"]] == list(range(12040))
    assert whole["summary"] == json.loads(json.dumps(summarize(whole["steps"])))
    assert {k: whole[k] for k in doc} == json.loads(json.dumps(doc, default=str))


def test_a_run_holds_no_records_and_reads_the_old_layout(tmp_path: Path) -> None:
    """No list of the run's records grows as it goes (``return_steps=False``: the CLI's); a resume
    carries over the steps of a log in the layout written before the fix (every key before
    ``steps``), and the log it writes is the same JSON document."""
    log = tmp_path / "log.json"
    held: list[int] = []

    def on_step(rec: dict[str, Any]) -> None:
        gc.collect()
        held.append(sum(1 for r in gc.get_referrers(rec) if isinstance(r, list)))

    doc = run_training(None, None, steps=4, log_path=log, checkpoint=tmp_path / "ck_{step}.pt", checkpoint_every=2,
                       on_step=on_step, return_steps=False, **SYNTH)  # fmt: skip
    assert held == [0, 0, 0, 0]  # before: 2 (the run's records, the log's steps)
    assert [r["step"] for r in doc["steps"]] == [3] and doc["summary"]["steps"] == 4
    first = json.loads(log.read_text())
    assert [r["step"] for r in first["steps"]] == [0, 1, 2, 3]
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert not left  # no twin, no temporary file

    # the layout of a log written before (status, checkpoints, summary ahead of "steps")
    older = {k: v for k, v in first.items() if k != "steps"}
    lines = ",\n    ".join(json.dumps(r) for r in first["steps"])
    log.write_text(json.dumps(older, indent=2)[:-2] + ',\n  "steps": [\n    ' + lines + "\n  ]\n}\n")
    again = run_training(None, None, steps=6, log_path=log, resume=tmp_path / "ck_2.pt", log_every_s=0,
                         checkpoint=tmp_path / "ck_{step}.pt", checkpoint_every=2, **SYNTH)  # fmt: skip
    resumed = json.loads(log.read_text())
    assert [r["step"] for r in resumed["steps"]] == [0, 1, 2, 3, 4, 5]
    assert resumed["steps"][:2] == first["steps"][:2] and resumed["steps_from_earlier_log"] == 2
    assert again["steps"] == resumed["steps"] and again["summary"] == resumed["summary"]
    assert resumed["summary"] == json.loads(json.dumps(summarize(resumed["steps"])))
    assert [c["step"] for c in resumed["checkpoints"]] == [2, 4, 6] and resumed["status"] == "completed"
    assert not train_mod.LOG_FIELDS.keys() - resumed["steps"][-1].keys()
