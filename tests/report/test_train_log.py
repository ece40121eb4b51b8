"""``featurecache report --train-log``: a file that is not a training log is a usage error (exit 2)
naming the file and what is wrong, never a traceback; a real log of a run that did not complete
says so, with the same warm-up-free median data wait as the log's own summary."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from featurecache.cli import app
from featurecache.errors import UsageError
from featurecache.model.config import ModelConfig
from featurecache.report import write_report
from featurecache.report.timeline import load_train_log, timeline_panel

#: the real runs here are for their logs, not their model: a small trunk (the default one's CPU
#: steps cost seconds)
SMALL = ModelConfig(c_token=32, c_pair=16, n_blocks=1, n_heads=1, head_dim=16, n_heads_single=2, transition_n=2,
                    distogram_bins=16)  # fmt: skip


@pytest.fixture(scope="module")
def real_log(sample_store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The log of a real three-step CPU run over the sample store."""
    from featurecache.model.train import run_training

    path = tmp_path_factory.mktemp("train") / "log.json"
    run_training(sample_store, None, steps=3, crop_size=16, device="cpu", fused=False, log_path=path,
                 workers=2, config=SMALL)  # fmt: skip
    doc: dict[str, Any] = json.loads(path.read_text())
    assert doc["status"] == "completed" and len(doc["steps"]) == 3
    return doc


def _edited(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], bytes]:
    def make(doc: dict[str, Any]) -> bytes:
        doc = json.loads(json.dumps(doc))
        edit(doc)
        return json.dumps(doc).encode()

    return make


def _set_step(i: int, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["steps"][i].__setitem__(key, value)


#: (case, file contents from the real log — None: no file, "dir": a directory —, words of the reason)
BAD_LOGS: list[tuple[str, Any, str]] = [
    ("missing", None, "no such file"),
    ("directory", "dir", "is a directory"),
    ("text", lambda doc: b"training went fine\n", "not JSON"),
    ("binary", lambda doc: bytes(range(256)) * 4, "not a text file"),
    ("truncated", lambda doc: json.dumps(doc).encode()[:200], "not JSON"),
    ("a list", lambda doc: b"[1, 2]", "no 'steps' list"),
    ("no steps", _edited(lambda doc: doc.pop("steps")), "no 'steps' list"),
    ("steps an object", _edited(lambda doc: doc.__setitem__("steps", {})), "no 'steps' list"),
    ("summary text", _edited(lambda doc: doc.__setitem__("summary", "n/a")), "'summary' is the text \"n/a\""),
    ("loader text", _edited(lambda doc: doc.__setitem__("loader", "x")), "'loader' is the text"),
    ("step null", _edited(_set_step(1, "step", None)), "steps[1]: 'step' is null"),
    ("step record a number", _edited(lambda doc: doc["steps"].__setitem__(2, 7)), "steps[2] is the number 7"),
    ("data wait text", _edited(_set_step(1, "data_wait_s", "0.1")), "'data_wait_s' is the text \"0.1\""),
    ("tokens a list", _edited(_set_step(0, "tokens", [64])), "'tokens' is a list"),
    # review R9 F5: drawn, these crashed matplotlib (leaving a half-written --out) or printed "nan ms"
    ("tokens past any step", _edited(_set_step(1, "tokens", 1e300)),
     "'tokens' is the number 1e+300, not a number of a training step"),
    ("data wait NaN", _edited(_set_step(1, "data_wait_s", float("nan"))), "'data_wait_s' is the number nan"),
    ("carried steps negative", _edited(lambda doc: doc.__setitem__("steps_from_earlier_log", -1)),
     "'steps_from_earlier_log' is the number -1"),
    ("steps requested text", _edited(lambda doc: doc.__setitem__("steps_requested", "ten")),
     "'steps_requested' is the text \"ten\""),
]  # fmt: skip


@pytest.mark.parametrize(("case", "contents", "reason"), BAD_LOGS, ids=[c[0] for c in BAD_LOGS])
def test_a_bad_train_log_is_a_usage_error(
    case: str, contents: Any, reason: str, real_log: dict[str, Any], sample_store: Path, tmp_path: Path
) -> None:
    path = tmp_path / "train_log.json"
    if contents == "dir":
        path.mkdir()
    elif contents is not None:
        path.write_bytes(contents(real_log))
    result = CliRunner().invoke(
        app, ["report", str(sample_store), "--out", str(tmp_path / "r"), "--train-log", str(path)]
    )
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.output.startswith(f"error: --train-log {path}: ") and reason in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (tmp_path / "r").exists()  # refused before the report's directory was made
    with pytest.raises(UsageError, match="--train-log"):
        load_train_log(path)


def test_the_real_log_passes(real_log: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    path.write_text(json.dumps(real_log))
    assert load_train_log(path) == real_log


def test_a_log_with_skipped_steps_draws(real_log: dict[str, Any], sample_store: Path, tmp_path: Path) -> None:
    """A step train skipped (no supervised distogram pair: review R25c s43 #1) has a null loss and
    gradient norm: the log is still a training log, and its report is written."""
    from featurecache.model.train import NO_PAIRS

    assert all(isinstance(r["pairs"], int) and r["skip_reason"] is None for r in real_log["steps"])
    doc = json.loads(json.dumps(real_log))
    doc["steps"][1].update(loss=None, grad_norm=None, pairs=0, skip_reason=NO_PAIRS)
    path = tmp_path / "log.json"
    path.write_text(json.dumps(doc))
    assert load_train_log(path) == doc
    write_report(sample_store, tmp_path / "r", train_log=path)
    timeline = json.loads((tmp_path / "r" / "summary.json").read_text())["loader_timeline"]
    assert timeline["steps"] == 3


class _Terminated(Exception):
    pass


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated(signum)


def test_a_stopped_then_resumed_run(sample_store: Path, tmp_path: Path) -> None:
    """A real run stopped by SIGTERM after 2 of its 50 steps, then resumed from its checkpoint into
    the same log: the caption says the first did not complete and the second carries its steps."""
    from featurecache.model.train import WARMUP_STEPS, run_training

    assert WARMUP_STEPS == 1  # timeline.WARMUP_STEPS, for logs whose summary does not say
    log, ck = tmp_path / "log.json", tmp_path / "ck.pt"
    kw: dict[str, Any] = dict(crop_size=16, device="cpu", fused=False, log_path=log, workers=2, checkpoint=ck,
                              config=SMALL)  # fmt: skip

    def on_step(rec: dict[str, Any]) -> None:
        if rec["step"] == 1:
            signal.raise_signal(signal.SIGTERM)  # the run stops after this step

    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        with pytest.raises(_Terminated):
            run_training(sample_store, None, steps=50, on_step=on_step, **kw)
    finally:
        signal.signal(signal.SIGTERM, previous)
    doc = json.loads(log.read_text())
    assert doc["status"] == "stopped" and len(doc["steps"]) == 2

    out = tmp_path / "stopped"
    write_report(sample_store, out, train_log=log)
    timeline = json.loads((out / "summary.json").read_text())["loader_timeline"]
    assert timeline["status"] == "stopped" and timeline["steps"] == 2
    # the log's summary leaves the warm-up step out of its median; so does the report
    assert timeline["median_data_wait_ms"] == pytest.approx(doc["summary"]["median_data_wait_s"] * 1e3)
    assert timeline["median_data_wait_ms"] == pytest.approx(doc["steps"][1]["data_wait_s"] * 1e3)
    page = (out / "index.html").read_text()
    assert "The run did not complete: stopped by SIGTERM after 2 of 50 steps." in page
    assert "after 1 warm-up step" in page

    run_training(sample_store, None, steps=3, resume=ck, **kw)
    doc = json.loads(log.read_text())
    assert doc["status"] == "completed" and doc["steps_from_earlier_log"] == 2 and len(doc["steps"]) == 3
    out = tmp_path / "resumed"
    write_report(sample_store, out, train_log=log)
    timeline = json.loads((out / "summary.json").read_text())["loader_timeline"]
    assert timeline["status"] == "completed" and timeline["steps_from_earlier_log"] == 2
    assert timeline["median_data_wait_ms"] == pytest.approx(doc["summary"]["median_data_wait_s"] * 1e3)
    page = (out / "index.html").read_text()
    assert "did not complete" not in page
    assert (
        "3 steps from " in page
        and "the first 2 carried over from the log of the run this one resumed" in page
    )


@pytest.mark.parametrize(
    ("status", "extra", "words"),
    [
        ("running", {"steps_requested": 10},
         "still running (or killed) when the log was last written, after 3 of 10 steps"),
        ("failed", {"error": "TrainingError: non-finite loss at step 2", "steps_requested": 8},
         "failed after 3 of 8 steps (TrainingError: non-finite loss at step 2)"),
        ("interrupted", {"steps_requested": 1000}, "interrupted (Ctrl-C) after 3 of 1000 steps"),
        # a log written before the run recorded --steps
        ("interrupted", {"steps_requested": None}, "interrupted (Ctrl-C) after 3 steps"),
    ],
)  # fmt: skip
def test_other_runs_that_did_not_complete(
    status: str, extra: dict[str, Any], words: str, real_log: dict[str, Any]
) -> None:
    doc = dict(real_log, status=status, **extra)
    panel, summary = timeline_panel(doc)
    assert panel.caption.startswith(f"The run did not complete: {words}. 3 steps from "), panel.caption
    assert summary["status"] == status
    done, _ = timeline_panel(real_log)
    assert "did not complete" not in done.caption
