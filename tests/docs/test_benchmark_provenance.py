"""What a benchmark result records and how the page shows it (review R1 #3, #8, #9).

- a result records the versions of the libraries the benchmarks exercise, the full commit, whether
  the tree differed from it, and a start time with its UTC offset;
- the page says "not recorded" for an old result without a start time or commit (it printed
  "started no start time ( s)" and "16 CPUs (?)");
- loader.py's straggler comparison always has stragglers (a small --samples drew none and still
  reported a "with stragglers" ratio), and the page gives no ratio for a result with none;
- a benchmark run where the shared data is not (a clone outside /work without
  FEATURECACHE_SHARED) stops with one line naming the variable, exit 2, not a traceback;
- every option of the GPU benchmarks has help text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import make_page  # noqa: E402
from benchmarks.harness import Bench  # noqa: E402

BENCHMARKS = REPO / "benchmarks"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def test_a_result_records_library_versions_commit_and_start(tmp_path: Path) -> None:
    import numpy
    import pyarrow
    import zarr

    before = datetime.now().astimezone()
    doc = json.loads(Bench("prov_case").finish(tmp_path / "prov.json").read_text())
    machine = doc["machine"]
    versions = machine["versions"]
    assert versions["numpy"] == numpy.__version__
    assert versions["zarr"] == zarr.__version__
    assert versions["pyarrow"] == pyarrow.__version__
    for name in ("dask", "gemmi", "rdkit", "torch", "triton", "fastapi", "uvicorn", "featurecache"):
        assert versions.get(name) == metadata.version(name), name
    # the exact commit (full hash) and a dirty flag that matches git's own view of this tree
    assert machine["commit"] == _git("rev-parse", "HEAD") and re.fullmatch(r"[0-9a-f]{40}", machine["commit"])
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    assert machine["dirty"] is dirty
    assert machine["git"].startswith(machine["commit"][:7])
    started = datetime.fromisoformat(doc["started"])
    assert started.utcoffset() is not None  # a start time that says its zone
    assert abs((started - before).total_seconds()) < 120


def _doc(**extra: object) -> dict[str, object]:
    return {"benchmark": "old", "machine": {"cpus": 16, "gpu": "NVIDIA H200", "torch": "2.11.0+cu130"},
            "rows": [{"variant": "a", "ms": 1.0}], **extra}  # fmt: skip


def test_the_page_says_not_recorded_for_an_old_result(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "old_run5.json").write_text(json.dumps(_doc()))
    page = make_page.render(results)
    assert "no start time" not in page and "( s)" not in page and "(?)" not in page, page
    assert "start time not recorded" in page
    assert "commit not recorded" in page
    # a result run on a tree that was not its commit says so
    line = make_page.machine_line({"cpus": 2, "git": "6fffa3b+msa-cut"})
    assert line.endswith("commit 6fffa3b+msa-cut (run on a tree that differed from that commit)"), line
    # and a new result shows its versions and its commit's state
    doc = json.loads(Bench("new").finish(tmp_path / "new.json").read_text())
    line = make_page.machine_line(doc["machine"])
    assert f"numpy {doc['machine']['versions']['numpy']}" in line and doc["machine"]["commit"] in line


def test_loader_stragglers_are_never_none() -> None:
    from benchmarks import loader

    for n in (loader.MIN_SAMPLES, 20, 150, 300):
        slow = loader.straggler_positions(n)
        timed = n - loader.WARMUP
        assert len(slow) == max(1, round(0.1 * timed)), n
        assert all(loader.WARMUP <= p < n for p in slow), (n, slow)
    assert loader.straggler_positions(300) == loader.straggler_positions(300)  # fixed positions


def test_the_page_gives_no_straggler_ratio_when_none_ran() -> None:
    rows = [{"part": "c", "source": "ordered DataLoader workers=2 prefetch=9", "in_flight": 18, "stragglers": 0,
             "samples_per_s": 90.0, "straggled_samples_per_s": 91.0, "p95_wait_s": 0.1},
            {"part": "c", "source": "ready-first processes=2 window=16", "in_flight": 18, "stragglers": 0,
             "samples_per_s": 70.0, "straggled_samples_per_s": 28.0, "p95_wait_s": 0.05}]  # fmt: skip
    ratios = {a: (b, c) for a, b, c in make_page.ratios_loader(rows)}
    key = next(a for a in ratios if "with stragglers" in a)
    assert ratios[key][0] == "–" and "no stragglers" in ratios[key][1], ratios
    rows[0]["stragglers"] = rows[1]["stragglers"] = 2
    ratios = {a: b for a, b, _ in make_page.ratios_loader(rows)}
    assert ratios[key] == "0.31×"


@pytest.mark.parametrize(
    ("name", "args"),
    [("msa", ["--skip-corpus", "--skip-sweep", "--out", "OUT"]), ("msa_scan", ["--out", "OUT"]),
     ("serve", ["--out", "OUT"]), ("store_layout", ["--out", "OUT"]), ("chem", ["--out", "OUT"])],
)  # fmt: skip
def test_without_the_shared_data_a_benchmark_says_what_to_set(
    name: str, args: list[str], tmp_path: Path
) -> None:
    missing = tmp_path / "shared"
    env = {**os.environ, "FEATURECACHE_SHARED": str(missing)}
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), *(str(out) if a == "OUT" else a for a in args)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "FEATURECACHE_SHARED" in lines[0] and str(missing) in lines[0] and "data/ccd" in lines[0], lines[0]
    assert not out.exists()


def _options_without_help(help_text: str) -> list[str]:
    """Options in an argparse --help (at a wide terminal) whose line carries no help text and whose
    next line is not its continuation."""
    lines = help_text.splitlines()
    bare = []
    for i, line in enumerate(lines):
        m = re.match(r"^  (-[-\w]+)(?:[ ,][^ ].*?)?$", line)
        if not m or re.match(r"^  -\S.*\s{2,}\S", line):
            continue
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if not re.match(r"^ {6,}\S", following):  # an option's own line starts with two spaces
            bare.append(m.group(1))
    return bare


@pytest.mark.parametrize(
    "name", ["kernels", "train_e2e", "plan_validate", "build", "loader", "serve", "chem"]
)
def test_every_benchmark_option_has_help(name: str, tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200", "FEATURECACHE_SHARED": str(tmp_path / "no-shared-data")}
    proc = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _options_without_help(proc.stdout) == [], proc.stdout
