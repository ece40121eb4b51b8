"""BENCHMARKS.md says how old each result is (review R31b s47 #2): it called itself "every
benchmark's latest numbers" while showing results 400-1100 commits old with a bare hash. Each
section and the summary table now give the commits since the run and how many of them changed the
benchmark script or featurecache/ (counted in this repository's history up to a named commit, so
the page is the same for the same results and commit), "stale" past STALE_AFTER of those, and
"commit not recorded" for a result without one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks import make_page

REPO = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def _result(results: Path, name: str, machine: dict[str, object]) -> None:
    doc = {"benchmark": name, "command": f"python benchmarks/{name}.py", "machine": {"cpus": 2, **machine},
           "params": {}, "started": "2026-11-25T00:00:00+00:00", "seconds": 1.0,
           "rows": [{"layout": "a", "ms_per_entry": 1.0}]}  # fmt: skip
    (results / f"{name}.json").write_text(json.dumps(doc))


def test_each_result_says_its_age_and_an_old_one_is_stale(tmp_path: Path) -> None:
    head = _git("rev-parse", "HEAD")  # fixed here: others may commit while this runs
    root = _git("rev-list", "--max-parents=0", head).splitlines()[0]
    recent = _git("rev-parse", f"{head}~1")
    _result(tmp_path, "store_layout", {"commit": root, "dirty": False})
    _result(tmp_path, "serve", {"git": recent[:7] + "+dirty"})
    _result(tmp_path, "loader", {"git": ""})
    page = make_page.render(tmp_path, head)
    assert make_page.page_as_of(page) == head and f"stale** past {make_page.STALE_AFTER}" in page

    total = int(_git("rev-list", "--count", f"{root}..{head}"))
    changed = int(
        _git("rev-list", "--count", f"{root}..{head}", "--", "featurecache", "benchmarks/store_layout.py")
    )
    assert changed > make_page.STALE_AFTER
    layout = page[page.index("## store_layout") :]
    assert (f"- **age:** **stale**: {total} commits old; {changed} changed benchmarks/store_layout.py or "
            "featurecache/") in layout, layout[:800]  # fmt: skip
    summary = next(x for x in page.splitlines() if x.startswith("| [store_layout]"))
    assert f"| {total} ({changed} changed) stale |" in summary, summary

    serve = next(x for x in page.splitlines() if x.startswith("| [serve]"))
    assert "| 1 (" in serve and "stale" not in serve, serve
    loader = next(x for x in page.splitlines() if x.startswith("| [loader]"))
    assert loader.count("commit not recorded") == 2, loader  # the commit column and the age column
    # the same results and commit: the same page, byte for byte
    assert make_page.render(tmp_path, make_page.page_as_of(page)) == page
