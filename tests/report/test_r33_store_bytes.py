"""Review R33 #4: the report's store size leaves out ``index/.part-rows`` (a quarter to a third of the
index) while its caption put the whole gap with `featurecache info` down to the caches. The size
stays the parts and the index tables (tests/report/test_report.py holds it to that), and the page
says so: the summary row is named for what it sums, and the caption names every part of the gap."""

from __future__ import annotations

import html
import json
from pathlib import Path

from featurecache.report import write_report
from featurecache.store.info import store_bytes


def _files(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_the_page_names_what_its_store_size_leaves_out(r33_store: Path, tmp_path: Path) -> None:
    write_report(r33_store, tmp_path / "r")
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    info = store_bytes(r33_store)[0]
    index = r33_store / "index"
    # the gap, each piece of which the caption names: the index's hidden files (.part-rows first), the
    # caches, the root's own files
    hidden = _files(index) - sum(f.stat().st_size for f in index.glob("*.arrow"))
    assert _files(index / ".part-rows") > 0
    root = sum(f.stat().st_size for f in r33_store.iterdir() if f.is_file())
    assert summary["bytes_total"] + hidden + _files(r33_store / "cache") + root == info["total"]

    page = html.unescape((tmp_path / "r" / "index.html").read_text())
    assert "<th>store size (MB)</th>" not in page
    assert "<th>store size: parts and index tables (MB)</th>" in page
    start = page.index('<figure id="store_bytes">')
    caption = page[page.index("<figcaption>", start) : page.index("</figcaption>", start)]
    for named in ("index/.part-rows", "hidden files", "caches (cache/)", "zarr.json", "build lock"):
        assert named in caption, (named, caption)
