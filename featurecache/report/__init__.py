"""``featurecache report``: a static HTML page of what a store holds, with the numbers behind it.

``OUT/index.html`` embeds one PNG per plot (``OUT/<panel>.png``, matplotlib) and links the numbers
drawn (``OUT/<panel>.csv``), the per-entry table (``entries.csv``), the failures (``failures.csv``)
and a summary (``summary.json``). It opens from disk in any browser (relative links, no scripts).
In ``entries.csv`` and ``failures.csv`` a text cell that comes from the inputs (an id, a path, a
message, a method or date a file states) and starts with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return is written with a leading ``'``, so a spreadsheet shows it as text instead of
evaluating it as a formula (OWASP's rule for CSV injection); numeric columns are written as they are.
With ``train_log`` it adds the loader timeline of a ``featurecache train`` run.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from featurecache.errors import StoreError, UsageError
from featurecache.report.data import Panel, collect
from featurecache.report.html import render_page

__all__ = ["Panel", "write_report"]

log = logging.getLogger(__name__)


#: the first characters that make a spreadsheet read a cell as a formula (OWASP's CSV injection list)
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: the columns of entries.csv and failures.csv whose text comes from the inputs (file names, entry
#: ids, what a file states, failure messages quoting a file's first line)
_INPUT_TEXT_COLUMNS = frozenset({"id", "entry_id", "path", "message", "method", "release_date"})


def _neutralise(cell: Any) -> Any:
    """A text cell a spreadsheet would evaluate as a formula, prefixed with ``'`` (which it shows as
    text); anything else unchanged."""
    return f"'{cell}" if isinstance(cell, str) and cell.startswith(_FORMULA_STARTS) else cell


def _write_csv(path: Path, columns: dict[str, list[Any]], input_text: frozenset[str] = frozenset()) -> None:
    """``columns`` as CSV; the cells of the ``input_text`` columns go through :func:`_neutralise`."""
    names = list(columns)
    n = max((len(v) for v in columns.values()), default=0)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(names)
        for i in range(n):
            row = [columns[k][i] if i < len(columns[k]) else "" for k in names]
            w.writerow([_neutralise(c) if k in input_text else c for k, c in zip(names, row, strict=True)])


def write_report(store: str | Path, out: str | Path, train_log: str | Path | None = None) -> Path:
    """Write the report of ``store`` into directory ``out``; returns the path of ``index.html``.

    The store and the training log are read before ``out`` is created, so a wrong argument leaves
    nothing behind; an ``out`` inside the store is a :class:`UsageError`; a report that cannot be
    written is a :class:`StoreError` naming ``out``."""
    from featurecache.store.reader import open_store

    store, out = Path(store), Path(out)
    doc = None
    if train_log is not None:
        from featurecache.report.timeline import load_train_log

        doc = load_train_log(train_log)
    reader = open_store(store)
    try:
        _refuse_output_in_store(store, out)
        panels, per_entry, summary = collect(reader, store)
        failures = reader.failures.to_pylist()
    finally:
        reader.close()
    if doc is not None:
        from featurecache.report.timeline import timeline_panel

        panel, tl_summary = timeline_panel(doc)
        panels.append(panel)
        summary["loader_timeline"] = tl_summary
    summary["panels"] = [p.name for p in panels]
    page = render_page(
        f"featurecache report — {store.name}", panels, summary, failures, time.strftime("%Y-%m-%d %H:%M:%S")
    )
    try:
        index = _write_files(out, panels, per_entry, failures, summary, page)
    except OSError as exc:
        raise StoreError(f"cannot write the report to {out}: {exc.strerror or exc}") from exc
    log.info("report: %d plots in %s", len(panels), out)
    return index


def _refuse_output_in_store(store: Path, out: Path) -> None:
    """A :class:`UsageError` for an ``out`` that is the store or lies inside it (its index, its
    parts, anywhere): the report's files would be counted as the store's (its size, a part's
    metadata) by the next report and by ``featurecache info``."""
    root, target = store.resolve(), out.resolve()
    if target == root or root in target.parents:
        raise UsageError(
            f"--out {out} is inside the store {store}: the report's files would become part of the store "
            "(counted in its size by the next report and by `featurecache info`); write it outside the store"
        )


def _write_files(
    out: Path,
    panels: list[Panel],
    per_entry: dict[str, list[Any]],
    failures: list[dict[str, Any]],
    summary: dict[str, Any],
    page: str,
) -> Path:
    """Every file is written into a hidden directory in ``out`` first and renamed into place once
    all are written: a report that fails part way (a full disk) leaves ``out`` as it was — no
    zero-length PNG, no old report mixed with truncated files (review R42b s52 #7)."""
    from featurecache.report.plots import render

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".report-tmp-", dir=out))
    try:
        for panel in panels:
            render(panel, tmp)
            _write_csv(tmp / f"{panel.name}.csv", panel.columns)
        _write_csv(tmp / "entries.csv", per_entry, _INPUT_TEXT_COLUMNS)
        fail_cols = ["path", "entry_id", "stage", "error_class", "message"]
        _write_csv(
            tmp / "failures.csv",
            {c: [f.get(c, "") for f in failures] for c in fail_cols},
            _INPUT_TEXT_COLUMNS,
        )
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        (tmp / "index.html").write_text(page, encoding="utf-8")
        # index.html last: a page never links files older than itself
        for f in sorted(tmp.iterdir(), key=lambda f: f.name == "index.html"):
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "index.html"
