"""The loader timeline: per-step data wait, reorder depth and skips from a ``featurecache train`` log.

The log is the JSON document :func:`featurecache.model.train.run_training` writes: ``steps`` is a
list of per-step records. Read per step: ``step``, ``data_wait_s``, ``step_time_s``, ``tokens``;
and, when the log carries them, ``reorder_depth`` (an int, or one int per sample of the batch — the
batch key of the same name) and ``skipped`` (a count, or the list of skip records the batch
reported). A top-level ``loader`` object (``LoaderStats.summary()``) and ``summary`` are quoted in
the caption, and so is how a run that did not complete ended (``status``, ``stop_signal``,
``error``) and how many steps were carried over from the log of the run it resumed
(``steps_from_earlier_log``). The median data wait leaves out the warm-up steps, as the log's
``summary`` does. A log that records ``steps_requested`` (the run's ``--steps``) is quoted as
"after N of M steps".

:func:`load_train_log` refuses a file that is not such a log with a :class:`UsageError`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, cast

from featurecache.errors import UsageError
from featurecache.report.data import Panel

#: steps the log's ``summary`` leaves out of its medians when it does not say
#: (``featurecache.model.train.WARMUP_STEPS``; not imported: that module loads torch)
WARMUP_STEPS = 1
#: per-step values drawn as numbers (null allowed)
_NUMBER_KEYS = ("data_wait_s", "step_time_s", "tokens")


def _per_step(value: Any, how: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list | tuple):
        if how == "count":
            return float(len(value))
        nums = [float(v) for v in value if isinstance(v, int | float)]
        return max(nums) if nums else 0.0
    return None


def load_train_log(path: str | Path) -> dict[str, Any]:
    """Read and check a ``featurecache train`` log; a file that is not one is a :class:`UsageError`
    (the ``--train-log`` argument is wrong) naming the file and what is wrong with it."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"--train-log {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"--train-log {path}: is a directory, not a `featurecache train` log") from None
    except OSError as exc:
        raise UsageError(f"--train-log {path}: cannot read it ({exc.strerror or exc})") from exc
    except UnicodeDecodeError:
        raise UsageError(f"--train-log {path}: not a text file, not a `featurecache train` log") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--train-log {path}: not JSON ({exc}), not a `featurecache train` log") from None
    problem = train_log_problem(doc)
    if problem is not None:
        raise UsageError(f"--train-log {path}: {problem}")
    return cast(dict[str, Any], doc)


#: the largest per-step value drawn: a train log's seconds and token counts are far below it; NaN,
#: infinities and values past it (a hand-edited log) are refused, not drawn (matplotlib overflows)
_LARGEST = 1e15


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= _LARGEST


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def train_log_problem(doc: Any) -> str | None:
    """Why ``doc`` (parsed JSON) cannot be drawn as a training log, or None. Checks the types of
    what :func:`timeline_panel` reads, so a hand-edited log is refused in words, not a traceback."""
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        return "not a `featurecache train` log (no 'steps' list)"
    for key in ("summary", "loader"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            return f"'{key}' is {_kind(doc[key])}, not an object"
    if doc.get("status") is not None and not isinstance(doc["status"], str):
        return f"'status' is {_kind(doc['status'])}, not a word (running, completed, stopped, …)"
    counts = {"steps_from_earlier_log": doc.get("steps_from_earlier_log"),
              "steps_requested": doc.get("steps_requested"),
              "summary.warmup_steps_excluded": (doc.get("summary") or {}).get("warmup_steps_excluded")}  # fmt: skip
    for key, value in counts.items():
        if value is not None and not _is_count(value):
            return f"'{key}' is {_kind(value)}, not a count"
    for i, rec in enumerate(doc["steps"]):
        if not isinstance(rec, dict):
            return f"steps[{i}] is {_kind(rec)}, not a step record"
        step = rec.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            return f"steps[{i}]: 'step' is {_kind(step)}, not a step number"
        for key in _NUMBER_KEYS:
            if rec.get(key) is not None and not _is_number(rec[key]):
                return (
                    f"steps[{i}] (step {step}): '{key}' is {_kind(rec[key])}, not a number of a training step"
                )
    return None


def unfinished(doc: dict[str, Any], n_steps: int) -> str | None:
    """How a run that did not complete ended, in words; None for a completed run (or an older log
    without ``status``). ``n_steps`` counts the log's steps; with ``steps_requested`` in the log
    (older logs lack it) the words say how many of those the run was asked for."""
    status = doc.get("status")
    if status in (None, "completed"):
        return None
    requested = doc.get("steps_requested")
    of = f" of {requested}" if _is_count(requested) else ""
    after = f"after {n_steps}{of} step{'s' if n_steps != 1 or of else ''}"
    if status == "stopped":
        signal = doc.get("stop_signal")
        return f"stopped by {signal} {after}" if signal else f"stopped {after}"
    if status == "failed":
        error = doc.get("error")
        return f"failed {after}" + (f" ({str(error)[:200]})" if error else "")
    if status == "interrupted":
        return f"interrupted (Ctrl-C) {after}"
    if status == "running":
        return f"still running (or killed) when the log was last written, {after}"
    return f"status {status!r} {after}"


def _kind(value: Any) -> str:
    """A JSON value as a reader of the log would name it: ``null``, ``the text "n/a"``, …"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {json.dumps(value)}"
    if isinstance(value, str):
        return f"the text {json.dumps(value[:40])}"
    if isinstance(value, int | float):
        return f"the number {value}"
    return "a list" if isinstance(value, list) else "an object"


def timeline_panel(doc: dict[str, Any]) -> tuple[Panel, dict[str, Any]]:
    """The timeline panel (series over steps) and its summary numbers."""
    steps = [s for s in doc["steps"] if isinstance(s, dict)]
    x = [int(s.get("step", i)) for i, s in enumerate(steps)]
    cols: dict[str, list[Any]] = {"x": x}
    labels: dict[str, str] = {}
    styles: dict[str, str] = {}
    waits = [float(s.get("data_wait_s") or 0.0) * 1e3 for s in steps]
    cols["data_wait_ms"], labels["data_wait_ms"], styles["data_wait_ms"] = waits, "data wait (ms)", "bar"
    if any("step_time_s" in s for s in steps):
        cols["step_time_ms"] = [float(s.get("step_time_s") or 0.0) * 1e3 for s in steps]
        labels["step_time_ms"] = "step time (ms)"
    depth_key = next((k for k in ("reorder_depth", "reorder_depth_max") if any(k in s for s in steps)), None)
    if depth_key:
        cols["reorder_depth"] = [_per_step(s.get(depth_key), "max") or 0.0 for s in steps]
        labels["reorder_depth"], styles["reorder_depth"] = "reorder depth (max in batch)", "bar"
    skip_key = next((k for k in ("skipped", "skips", "n_skipped") if any(k in s for s in steps)), None)
    if skip_key:
        total, cum = 0.0, []
        for s in steps:
            total += _per_step(s.get(skip_key), "count") or 0.0
            cum.append(total)
        cols["skips_cumulative"], labels["skips_cumulative"] = cum, "skipped samples (cumulative)"
    if any("tokens" in s for s in steps):
        cols["tokens"], labels["tokens"], styles["tokens"] = (
            [int(s.get("tokens") or 0) for s in steps],
            "tokens",
            "bar",
        )
    warmup = (doc.get("summary") or {}).get("warmup_steps_excluded", WARMUP_STEPS)
    timed = waits[warmup:] or waits  # as the log's summary: warm-up steps out of the median
    status = doc.get("status")
    carried = int(doc.get("steps_from_earlier_log") or 0)
    summary = {
        "steps": len(steps),
        "status": status,
        "steps_from_earlier_log": carried,
        "warmup_steps_excluded": len(waits) - len(timed),
        "median_data_wait_ms": statistics.median(timed) if timed else None,
        "max_data_wait_ms": max(waits) if waits else None,
        "source": doc.get("source"),
        "device": doc.get("device"),
        "has_reorder_depth": depth_key is not None,
        "has_skips": skip_key is not None,
    }
    if skip_key:
        summary["skipped"] = cols["skips_cumulative"][-1] if steps else 0
    loader = doc.get("loader") if isinstance(doc.get("loader"), dict) else None
    if loader:
        summary["loader"] = loader
    caption = f"{len(steps)} step{'s' if len(steps) != 1 else ''} from {doc.get('source') or '?'} on {doc.get('device') or '?'}"
    ended = unfinished(doc, len(steps))
    if ended:
        summary["unfinished"] = ended
        caption = f"The run did not complete: {ended}. {caption}"
    if carried:
        caption += f" (the first {carried} carried over from the log of the run this one resumed)"
    if waits:
        caption += f"; median data wait {summary['median_data_wait_ms']:.1f} ms"
        if summary["warmup_steps_excluded"]:
            n_warm = summary["warmup_steps_excluded"]
            caption += f" after {n_warm} warm-up step{'s' if n_warm != 1 else ''}"
        caption += f", max {summary['max_data_wait_ms']:.1f} ms"
    frac = (doc.get("summary") or {}).get("data_wait_fraction")
    if _is_number(frac):
        caption += f"; data wait is {frac:.1%} of step time"
    missing = [n for n, ok in (("reorder depth", depth_key), ("skips", skip_key)) if not ok]
    if missing:
        caption += f" ({' and '.join(missing)} not recorded in this log)"
    panel = Panel("loader_timeline", "Loader timeline", "Training loader", "series", cols, "step", "", caption,
                  extra={"labels": labels, "styles": styles})  # fmt: skip
    return panel, summary
