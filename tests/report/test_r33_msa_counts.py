"""Review R33 #1: the report's summary named "entries with an MSA" what it counted as entries whose
deepest MSA holds more than the query row, while its coverage panel counted entries with an MSA from
files. Each count is now named for what it counts, and the summary table shows all three."""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path


def test_each_msa_count_is_named_for_what_it_counts(r33_report: Path) -> None:
    with (r33_report / "entries.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    # 2q2k: an MSA from files deeper than the query; 209d-assembly1: its MSA from files is the query
    # row alone; the formula-named 5y2e: no MSA from files, a single-sequence one stored
    from_files = sum(1 for r in rows if r["msa_coverage"] not in ("", "nan") and float(r["msa_coverage"]) > 0)
    deep = sum(1 for r in rows if int(r["msa_depth"]) > 1)
    stored = sum(1 for r in rows if int(r["msa_depth"]) > 0)
    assert (from_files, deep, stored) == (2, 1, 3)

    summary = json.loads((r33_report / "summary.json").read_text())
    assert summary["entries_with_msa_from_files"] == from_files
    assert summary["entries_with_deep_msa"] == deep
    assert summary["entries_with_stored_msa"] == stored
    assert summary["entries_with_msa"] == deep  # the old key keeps its meaning for a release

    page = html.unescape((r33_report / "index.html").read_text())
    assert "<th>entries with an MSA</th>" not in page
    assert f'<th>entries with an MSA from files</th><td class="n">{from_files}</td>' in page
    assert f'<th>entries with an MSA deeper than the query</th><td class="n">{deep}</td>' in page
    assert (
        f'<th>entries with an MSA stored (single-sequence included)</th><td class="n">{stored}</td>' in page
    )
    # the coverage panel counts the same entries as the summary's "from files" row
    assert f"{from_files} of 3 entries have an MSA from files" in page
