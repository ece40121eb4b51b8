"""The report's memory-plan panels over a real store: a plan made before entries were added is
flagged as covering only some of them, instead of being shown as the store's current plan."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


def _with_token_counts_of_an_older_build(store: Path, eid: str) -> None:
    """The store's plan as a plan made before ``eid`` gained a token: the plan file records the token
    count it predicted from, so a rebuild that changed the entry leaves the plan's row behind."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from featurecache.plan.planner import read_plan, write_plan

    plan = read_plan(store)
    tokens = plan.column("token_count")
    older = pc.if_else(pc.equal(plan.column("id"), eid), pc.subtract(tokens, 1), tokens)
    write_plan(
        store, plan.set_column(plan.column_names.index("token_count"), "token_count", older.cast(pa.int64()))
    )


def test_a_plan_whose_entries_changed_since_is_flagged_on_the_page_and_on_stderr(
    sample_store: Path, tmp_path: Path
) -> None:
    """Review R9 F1: the report compared only entry ids and counts, so a plan predicted from an
    entry's earlier token count (or MSA rows) was shown as current while fitting_ids warned."""
    from typer.testing import CliRunner

    from featurecache import open_store
    from featurecache.cli import app

    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    plan_store(store, gpu_memory="40GiB", fused=False)
    eid = open_store(store).ids[0]
    _with_token_counts_of_an_older_build(store, eid)
    write_report(store, tmp_path / "changed")
    plan, page = _plan_part(tmp_path / "changed")
    assert plan["plan_entries_changed"] == 1 and plan["plan_covers_entries"] == plan["store_entries"]
    assert "<h2>Memory plan — out of date: 1 entry changed since</h2>" in page
    assert f"1 entry changed since (token count or MSA rows: {eid})" in plan["plan_out_of_date"]
    res = CliRunner().invoke(app, ["report", str(store), "--out", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.output
    assert "is older than the store's index: 1 entry changed since" in res.stderr and eid in res.stderr


def test_a_plan_of_no_entries_is_flagged_once_the_store_has_some(
    sample_store: Path, structures_dir: Path, tmp_path: Path
) -> None:
    """Review R9 F2: a plan with no rows (planned while the store had no entry) left no section
    and no warning once entries were added; fitting_ids warned of every entry."""
    from featurecache.plan.planner import read_plan, write_plan

    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    plan_store(store, gpu_memory="40GiB", fused=False)
    write_plan(store, read_plan(store).slice(0, 0))  # the plan the store had with no entries
    write_report(store, tmp_path / "out")
    plan, page = _plan_part(tmp_path / "out")
    n = plan["store_entries"]
    assert n > 0 and plan["plan_covers_entries"] == 0 and plan["entries"] == 0
    assert f"<h2>Memory plan — out of date: covers 0 of {n} entries</h2>" in page
    # the share of no entries is none, not NaN (which is not JSON: review R10 LOW-1)
    text = (tmp_path / "out" / "summary.json").read_text()
    json.loads(text, parse_constant=lambda word: pytest.fail(f"summary.json holds {word}"))
    assert all(plan[k] is None for k in plan if k.startswith("share_fits_"))


def test_the_plan_captions_give_the_budget_as_plan_prints_it(sample_store: Path, tmp_path: Path) -> None:
    """Review R9 F3: the captions printed the budget left after the headroom, rounded to whole GiB
    ("74 GiB" for --gpu-memory 80GiB, "0 GiB" for 0.3GiB): now the memory given and the usable part."""
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    plan_store(store, gpu_memory="80GiB", fused=False, headroom=0.08)
    write_report(store, tmp_path / "out")
    page = (tmp_path / "out" / "index.html").read_text()
    usable = 80 * 0.92  # 73.6: what fits may use of 80 GiB with 8 % kept free
    assert f"80.0 GiB GPU ({usable:.1f} GiB usable after 8% headroom)" in page
    assert "74 GiB" not in page


def test_a_share_of_zero_at_every_crop_is_drawn_not_shown_as_no_data(tmp_path: Path) -> None:
    """Review R9 F3: when no entry fits at any crop the share plot was the "nothing to show"
    placeholder, the case where the answer is "nothing fits"; a bar plot of zeros elsewhere (no
    failures) keeps the placeholder."""
    from matplotlib import image as mpimg

    from featurecache.report.data import Panel
    from featurecache.report.plots import render

    def png(name: str, share: bool) -> bytes:
        cols = {"label": ["384", "640", "768"], "share_fits": [0.0, 0.0, 0.0]}
        panel = Panel(name, "Share of entries that fit", "Memory plan", "bar", cols, "crop (tokens)", "share",
                      "1.0 GiB GPU", extra={"share": True} if share else {})  # fmt: skip
        return mpimg.imread(render(panel, tmp_path)).tobytes()

    assert png("drawn", True) != png("placeholder", False)


def test_a_damaged_plan_is_left_out_with_a_warning_and_planning_again_mends_it(
    sample_store: Path, tmp_path: Path
) -> None:
    """Review R10 MED-2: an unreadable index/plan.arrow made every command refuse the store (exit 3)
    with advice that did not help (a build keeps the plan). The plan is not the store's data: it is
    left out with one warning naming it and the fix, and `featurecache plan` writes it again."""
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    (store / "index" / "plan.arrow").write_bytes(b"not an Arrow file")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                              timeout=300, check=False)  # fmt: skip

    info = cli("info", str(store))
    assert info.returncode == 0, info.stderr
    assert f"index file {store / 'index' / 'plan.arrow'} is unreadable" in info.stderr
    assert "run `featurecache plan STORE` again, or delete it" in info.stderr
    report = cli("report", str(store), "--out", str(tmp_path / "r"))
    assert report.returncode == 0, report.stderr
    assert "Memory plan" not in (tmp_path / "r" / "index.html").read_text()
    assert cli("plan", str(store), "--gpu-memory", "40GiB", "--reference").returncode == 0
    again = cli("info", str(store))
    assert again.returncode == 0 and "unreadable" not in again.stderr, again.stderr
