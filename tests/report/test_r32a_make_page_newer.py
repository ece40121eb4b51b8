"""make_page ``--as-of`` an earlier commit says a result run after it is newer than the page's
commit (review R32a s47 #8).

``git rev-list --count RUN..AS_OF`` is 0 for a run on a descendant of ``AS_OF``: a page generated
``--as-of`` the committed page's commit called ``serve_run2.json`` (run two commits later) "0
commits old", a result that did not exist at that commit. Results at HEAD and at HEAD~1, the page
as of HEAD~2, in this repository's real history."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks import make_page

REPO = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def _result(results: Path, name: str, commit: str) -> None:
    doc = {"benchmark": name, "command": f"python benchmarks/{name}.py", "machine": {"cpus": 2, "commit": commit},
           "params": {}, "started": "2026-11-25T00:00:00+00:00", "seconds": 1.0,
           "rows": [{"layout": "a", "ms_per_entry": 1.0}]}  # fmt: skip
    (results / f"{name}.json").write_text(json.dumps(doc))


def test_a_result_run_after_the_pages_commit_is_newer_not_0_commits_old(tmp_path: Path) -> None:
    head = _git("rev-parse", "HEAD")  # fixed here: others may commit while this runs
    parent, grandparent = _git("rev-parse", f"{head}~1"), _git("rev-parse", f"{head}~2")
    _result(tmp_path, "serve", head)
    _result(tmp_path, "loader", parent)
    _result(tmp_path, "store_layout", grandparent)
    page = make_page.render(tmp_path, grandparent)
    assert make_page.page_as_of(page) == grandparent

    for name, after in (("serve", "2 commits"), ("loader", "1 commit")):
        section = page[page.index(f"## {name}") :]
        assert f"- **age:** newer than the page's commit ({after} after it)\n" in section, section[:800]
        summary = next(x for x in page.splitlines() if x.startswith(f"| [{name}]"))
        assert "| newer than the page's commit |" in summary and "0 (0 changed)" not in summary, summary
    layout = page[page.index("## store_layout") :]
    assert "- **age:** 0 commits old; 0 changed" in layout, layout[:800]  # run at the page's commit
    assert make_page.render(tmp_path, grandparent) == page  # deterministic
