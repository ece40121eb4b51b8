"""Review R33 #7: on a store with no entries (only failures) the MSA-coverage caption read "mean nan";
it says "no entries" now, and the page prints no "mean nan"."""

from __future__ import annotations

import html
import json
from pathlib import Path

from featurecache.report import write_report


def test_the_coverage_caption_of_a_store_with_no_entries(failures_only_store: Path, tmp_path: Path) -> None:
    write_report(failures_only_store, tmp_path / "r")
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["entries"] == 0
    page = html.unescape((tmp_path / "r" / "index.html").read_text())
    start = page.index('<figure id="msa_coverage_per_entry">')
    caption = page[page.index("<figcaption>", start) + len("<figcaption>") : page.index(" — ", start)]
    assert caption == "no entries"
    assert "mean nan" not in page


def test_the_coverage_caption_of_a_store_with_entries(r33_store: Path, tmp_path: Path) -> None:
    write_report(r33_store, tmp_path / "r")
    page = html.unescape((tmp_path / "r" / "index.html").read_text())
    # coverage 1/3 (209d-assembly1), 2/3 (2q2k) and 0 (the formula-named 5y2e): mean 1/3
    assert "2 of 3 entries have an MSA from files; mean 0.33; 0 entries without polymer chains" in page
