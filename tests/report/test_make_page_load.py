"""make_page marks a ratio measured while the machine's load was above its CPU count (review R31b
s47 #7): build.json's "2 workers vs 1: 1.05×" ran at load 11 on 2 CPUs and the page did not say so,
while build_ab.json (load ~1) shows 1.29-1.49× for the same comparison."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.make_page import render


def _build(results: Path, name: str, loads: tuple[float, float]) -> None:
    rows = [{"workers": w, "entries_per_s": eps, "load_1m": load, "store_over_input": 0.25}
            for w, eps, load in zip((1, 2), (4.36, 4.59), loads, strict=True)]  # fmt: skip
    doc = {"benchmark": "build", "command": "python benchmarks/build.py", "machine": {"cpus": 2, "git": "abc1234"},
           "params": {}, "started": "2026-11-21T00:00:00+00:00", "seconds": 1.0, "rows": rows}  # fmt: skip
    (results / f"{name}.json").write_text(json.dumps(doc))


def test_a_ratio_measured_above_the_cpu_count_is_marked(tmp_path: Path) -> None:
    _build(tmp_path, "build", (11.01, 10.39))
    _build(tmp_path, "build_quiet", (0.95, 1.0))  # a generic section: its ratios per row
    page = render(tmp_path)
    build = page[page.index("## build\n") : page.index("## build_quiet")]
    line = next(x for x in build.splitlines() if x.startswith("| 2 workers vs 1"))
    assert "⚠ LOADED: load_1m 11.0 / 10.4, above the 2 CPUs" in line, line
    quiet = page[page.index("## build_quiet") :]
    ratio_lines = [x for x in quiet.splitlines() if "store_over_input |" in x]
    assert ratio_lines and all("load_1m" in x and "LOADED" not in x for x in ratio_lines), ratio_lines
