"""A plan written from a store whose first build has not finished says so in its metadata, and its
readers warn: ``fitting_ids`` (a log warning naming the store) and ``featurecache report`` (a line on
stderr, the memory-plan section marked partial, summary.json; and a line about the store itself). It stays marked after the build
finishes, until the store is planned again. The store is flagged the way the build does it
(``rebuild_index(finished=False)``), as in tests/plan/test_plan_unfinished.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow.ipc as ipc
import pytest

from featurecache import open_store
from featurecache.plan import fitting_ids
from featurecache.store.index import rebuild_index
from tests.store.test_verify_unfinished import WARNING, cli, unfinished_copy

SAYS = "made before the store's first build finished"
#: what was missing, whatever the build was doing: not only entries (all may be listed while their
#: MSAs are not, which makes the plan's peaks too low), so "covers only the N entries" was wrong
MISSING = (
    "entries, MSAs or conformers written since are missing from it, so its memory predictions may be low"
)


def _plan_meta(store: Path) -> dict[str, object]:
    """The written plan's metadata, read from the file with pyarrow."""
    with ipc.open_file(store / "index" / "plan.arrow") as f:
        return json.loads(f.schema.metadata[b"featurecache.plan"])


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_plan_of_an_unfinished_store_is_marked_and_its_readers_warn(
    sample_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = unfinished_copy(sample_store, tmp_path / "store")
    n = len(open_store(store).ids)
    run = cli("plan", str(store))
    assert run.returncode == 0 and (store / "index" / "plan.arrow").is_file(), run.stderr[-2000:]
    assert _plan_meta(store)["first_build_finished"] is False

    caplog.set_level(logging.WARNING, logger="featurecache")
    ids = fitting_ids(store, 384)
    assert ids  # the sample's entries fit at 384 in 80 GiB
    (said,) = _warnings(caplog)
    assert str(store) in said and SAYS in said and f"listed {n} entries" in said and MISSING in said, said
    assert "covers only" not in said, said
    caplog.clear()
    assert fitting_ids(open_store(store), 384) == ids and SAYS in " ".join(_warnings(caplog))

    report = cli("report", str(store), "--out", str(tmp_path / "report"))
    assert report.returncode == 0 and "report written" in report.stdout, report.stderr[-2000:]
    lines = [line for line in report.stderr.splitlines() if line.startswith("warning: ")]
    # one line about the store itself (the report is partial: before, only its plan was warned
    # about), one about its plan
    assert len(lines) == 2, report.stderr[-2000:]
    assert f"warning: {store}: {WARNING}" in lines[0] and "report covers only part" in lines[0], lines
    assert str(store) in lines[1] and SAYS in lines[1], report.stderr[-2000:]
    assert MISSING in lines[1], report.stderr[-2000:]
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert SAYS in summary["plan"]["plan_first_build_unfinished"], summary["plan"]
    assert MISSING in summary["plan"]["plan_first_build_unfinished"], summary["plan"]
    html = (tmp_path / "report" / "index.html").read_text()
    assert "Memory plan — partial" in html

    # the build finishes (the index published without the flag): the plan is still the partial one
    rebuild_index(store, finished=True)
    assert open_store(store).finished
    caplog.clear()
    fitting_ids(store, 384)
    assert SAYS in " ".join(_warnings(caplog))

    # planned again on the finished store: no mark, no warning
    again = cli("plan", str(store))
    assert again.returncode == 0 and "warning" not in again.stderr, again.stderr[-2000:]
    assert _plan_meta(store)["first_build_finished"] is True
    caplog.clear()
    assert fitting_ids(store, 384) == ids and _warnings(caplog) == []
    report = cli("report", str(store), "--out", str(tmp_path / "report2"))
    assert report.returncode == 0 and report.stderr == "", report.stderr[-2000:]
    summary = json.loads((tmp_path / "report2" / "summary.json").read_text())
    assert "plan_first_build_unfinished" not in summary["plan"], summary["plan"]
