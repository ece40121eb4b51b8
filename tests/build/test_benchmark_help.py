"""``benchmarks/<name>.py --help`` explains the benchmark and runs nothing.

store_layout.py and msa.py parsed no arguments: ``--help`` started the benchmark (a corpus build)
and overwrote the committed ``benchmarks/results/<name>.json``; loader.py's help stopped its
description mid-sentence. The benchmarks run here without the shared data (FEATURECACHE_SHARED
names a missing directory), so one that starts running fails at once instead of running for
minutes.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"


def _snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.glob("*.json"))}


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("name", ["store_layout", "msa", "msa_scan", "loader", "build", "chem", "serve", "worker_start",
                                  "cluster_overhead"])  # fmt: skip
def test_help_explains_the_benchmark_and_runs_nothing(name: str, tmp_path: Path) -> None:
    script = BENCHMARKS / f"{name}.py"
    doc = ast.get_docstring(ast.parse(script.read_text()))
    assert doc
    first_paragraph = doc.split("\n\n")[0]
    before = _snapshot(BENCHMARKS / "results")
    env = {**os.environ, "FEATURECACHE_SHARED": str(tmp_path / "no-shared-data")}
    proc = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]
    assert _words(first_paragraph) in _words(proc.stdout), proc.stdout
    assert "--out FILE" in proc.stdout  # where the results go can be changed
    assert f"benchmarks/results/{name}.json" in _words(proc.stdout)  # and the default is named right
    assert _snapshot(BENCHMARKS / "results") == before
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran either


@pytest.mark.parametrize("name", ["store_layout", "msa"])
def test_bad_option_values_are_usage_errors(name: str, tmp_path: Path) -> None:
    option = "--reads" if name == "store_layout" else "--rows"
    env = {**os.environ, "FEATURECACHE_SHARED": str(tmp_path / "no-shared-data")}
    proc = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), option, "0"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "at least 1" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("name", ["loader", "serve", "train_e2e"])
def test_a_store_that_is_not_there_is_a_usage_error(name: str, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-store"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--store", str(missing)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{name}.py: error: argument --store:") and str(missing) in last, proc.stderr
