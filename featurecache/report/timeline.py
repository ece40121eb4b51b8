"""The loader timeline: per-step data wait, reorder depth and skips from a ``featurecache train`` log.

The log is the JSON document :func:`featurecache.model.train.run_training` writes: ``steps`` is a
list of per-step records. Read per step: ``step``, ``data_wait_s``, ``step_time_s``, ``tokens``;
and, when the log carries them, ``reorder_depth`` (an int, or one int per sample of the batch — the
batch key of the same name) and ``skipped`` (a count, or the list of skip records the batch
reported). A top-level ``loader`` object (``LoaderStats.summary()``) and ``summary`` are quoted in
the caption.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from featurecache.errors import InvalidRequest
from featurecache.report.data import Panel


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
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidRequest(f"cannot read the training log {path}: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise InvalidRequest(f"{path} is not a `featurecache train` log (no 'steps' list)")
    return doc


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
    summary = {
        "steps": len(steps),
        "median_data_wait_ms": statistics.median(waits) if waits else None,
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
    caption = f"{len(steps)} steps from {doc.get('source', '?')} on {doc.get('device', '?')}"
    if waits:
        caption += f"; median data wait {summary['median_data_wait_ms']:.1f} ms, max {summary['max_data_wait_ms']:.1f} ms"
    frac = (doc.get("summary") or {}).get("data_wait_fraction")
    if isinstance(frac, int | float):
        caption += f"; data wait is {frac:.1%} of step time"
    missing = [n for n, ok in (("reorder depth", depth_key), ("skips", skip_key)) if not ok]
    if missing:
        caption += f" ({' and '.join(missing)} not recorded in this log)"
    panel = Panel("loader_timeline", "Loader timeline", "Training loader", "series", cols, "step", "", caption,
                  extra={"labels": labels, "styles": styles})  # fmt: skip
    return panel, summary
