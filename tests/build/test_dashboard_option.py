"""`featurecache build --dashboard/--no-dashboard` (and FEATURECACHE_DASHBOARD, which the suite's
conftest sets to 0): the embedded cluster serves Dask's dashboard, and the summary prints its
address, only when asked. Real CLI builds of one real structure on an embedded LocalCluster."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _build(pdb: Path, out: Path, *flags: str, env_value: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    env.pop("FEATURECACHE_DASHBOARD", None)
    if env_value is not None:
        env["FEATURECACHE_DASHBOARD"] = env_value
    cmd = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(pdb), "--out", str(out),
           "--workers", "1", "--no-progress", *flags]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)


def _dashboard_rows(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    return [ln for ln in done.stdout.splitlines() if ln.strip("│ ").startswith("dashboard")]


def test_the_dashboard_is_served_only_when_asked(tmp_path: Path) -> None:
    pytest.importorskip("bokeh")
    pdb = tmp_path / "in"
    pdb.mkdir()
    shutil.copy(REPO / "samples" / "structures" / "1A8O.pdb", pdb)
    out = tmp_path / "s"
    # the default (no variable): on, and the address is a URL on this machine
    rows = _dashboard_rows(_build(pdb, out, env_value=None))
    assert len(rows) == 1 and "http://127.0.0.1:" in rows[0], rows
    # the variable turns it off, the flag too (either way the summary names no address)
    assert _dashboard_rows(_build(pdb, out, env_value="0")) == []
    assert _dashboard_rows(_build(pdb, out, "--no-dashboard", env_value=None)) == []
