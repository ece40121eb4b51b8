"""benchmarks/make_page.py: BENCHMARKS.md from result files, robust to missing and broken ones."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.make_page import page_as_of, render

GPU = {"gpu": "NVIDIA H200", "cpus": 16, "torch": "2.11.0", "git": "abc1234", "platform": "Linux"}
CPU = {"cpus": 2, "processor": "x86_64", "torch": "2.13.0+cpu"}


def _write(d: Path, name: str, rows: list[dict], machine: dict, command: str) -> None:
    doc = {"benchmark": name, "command": command, "machine": machine, "params": {"n": 1},
           "started": "2026-11-21T00:00:00", "seconds": 1.5, "rows": rows}  # fmt: skip
    (d / f"{name}.json").write_text(json.dumps(doc))


def test_page_has_commands_machines_and_ratios(tmp_path: Path) -> None:
    _write(tmp_path, "kernels", [
        {"op": "attention", "N": 384, "method": "fused", "ms": 2.0, "peak_MiB": 100.0},
        {"op": "attention", "N": 384, "method": "eager", "ms": 7.0, "peak_MiB": 900.0},
        {"op": "attention", "N": 384, "method": "sdpa", "ms": "OOM"},
        {"op": "attention", "N": 384, "method": "flex", "ms": 3.0, "peak_MiB": 150.0},
    ], GPU, "python benchmarks/kernels.py --sweep")  # fmt: skip
    _write(tmp_path, "loader", [
        {"part": "b", "source": "raw: structure", "samples": 57, "cache_speedup_cpu_total": 4.25,
         "cache_speedup_wall_total": 3.5},
        {"part": "c", "source": "ordered DataLoader workers=2", "straggled_samples_per_s": 20.0, "p95_wait_s": 0.25},
        {"part": "c", "source": "ready-first threads=8", "straggled_samples_per_s": 50.0, "p95_wait_s": 0.05},
    ], CPU, "python benchmarks/loader.py --store S")  # fmt: skip
    _write(tmp_path, "plan_validate", [
        {"crop": 384, "mode": "fused", "predicted_GiB": 4.0, "measured_GiB": 3.8, "error_pct": 5.263},
        {"crop": 768, "mode": "reference", "predicted_GiB": 131.0, "measured_GiB": "OOM", "error_pct": None},
    ], GPU, "python benchmarks/plan_validate.py")  # fmt: skip
    _write(
        tmp_path, "something_new", [{"case": "a", "speedup": 2.5}], CPU, "python benchmarks/something_new.py"
    )
    (tmp_path / "broken.json").write_text("{not json")
    page = render(tmp_path)
    assert "`python benchmarks/kernels.py --sweep`" in page and "NVIDIA H200" in page
    assert "| attention N=384: fused vs eager | 3.50× |" in page  # 7.0 / 2.0
    assert "peak memory 9.00× less" in page  # 900 / 100
    assert "| attention N=384: fused vs flex | 1.50× |" in page
    assert "fused vs sdpa | sdpa: OOM" in page
    assert "4.2×" in page and "2.50×" in page  # cache speed-up; ready-first 50 / 20
    assert "+5.3%" in page and "| OOM |" in page
    assert "something_new" in page and "speedup" in page  # generic ratio columns
    assert "broken.json" in page  # reported, not fatal
    assert page.index("## loader") < page.index("## kernels") < page.index("## plan_validate")


def test_page_without_results(tmp_path: Path) -> None:
    page = render(tmp_path / "missing")
    assert page.startswith("# Benchmarks") and "Not yet run here" in page


def test_the_committed_page_is_the_committed_results_rendered() -> None:
    """BENCHMARKS.md says it is generated from benchmarks/results: a result file committed without
    re-running make_page.py left the page showing the run before it (review R27b s45 #8: run 147's
    train_e2e was cited in the README while the page still showed run 146)."""
    repo = Path(__file__).resolve().parents[2]
    page = (repo / "BENCHMARKS.md").read_text()
    # the ages are counted up to the commit the page names (the HEAD it was generated at)
    assert page == render(repo / "benchmarks" / "results", page_as_of(page)), (
        "BENCHMARKS.md differs from `python benchmarks/make_page.py`'s rendering of benchmarks/results: "
        "run it and commit the page (or, for these results, --as-of the commit the page names)"
    )
