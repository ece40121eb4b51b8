"""The report's memory-plan panels over a real store: a plan made before entries were added is
flagged as covering only some of them, instead of being shown as the store's current plan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from featurecache.plan import plan_store
from featurecache.report import write_report
from tests.conftest import build_store

#: a real structure that is not in samples/ (the corpus in ../shared)
EXTRA = "1orc.pdb"


def _plan_part(out: Path) -> tuple[dict, str]:
    summary = json.loads((out / "summary.json").read_text())
    return summary["plan"], (out / "index.html").read_text()


def test_a_plan_older_than_the_index_is_flagged(
    sample_store: Path, structures_dir: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    n = plan_store(store, gpu_memory="40GiB", fused=False).num_rows

    write_report(store, tmp_path / "current")
    plan, page = _plan_part(tmp_path / "current")
    assert "plan_out_of_date" not in plan and "out of date" not in page.lower()
    assert "<h2>Memory plan</h2>" in page

    more = tmp_path / "more"
    more.mkdir()
    shutil.copy(structures_dir / EXTRA, more / EXTRA)
    build_store(store, more)  # adds an entry; the plan stays as it was
    write_report(store, tmp_path / "stale")
    plan, page = _plan_part(tmp_path / "stale")
    assert plan["plan_covers_entries"] == n and plan["store_entries"] == n + 1 and plan["plan_n_entries"] == n
    assert f"<h2>Memory plan — out of date: covers {n} of {n + 1} entries</h2>" in page
    assert (
        page.count(f"Out of date: the plan covers {n} of the store&#x27;s {n + 1} entries") == 2
    )  # both plots

    plan_store(store, gpu_memory="40GiB", fused=False)  # planned again: current
    write_report(store, tmp_path / "replanned")
    plan, page = _plan_part(tmp_path / "replanned")
    assert "plan_out_of_date" not in plan and plan["entries"] == n + 1
