"""A benchmark result that cannot be traced to code says so (review R31b s47 #9).

Outside a git checkout (a copied tree) ``Bench.finish`` wrote ``"commit": ""`` and no word on
stderr: the page then showed "commit not recorded" for numbers the README cites. Now the result
records ``"commit": null`` with the reason, and the run warns on stderr; ``FEATURECACHE_GIT_COMMIT``
(set by the GPU runs, whose copied tree has a stale .git) still names the commit, without a warning.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import harness  # noqa: E402


def test_no_git_state_is_null_with_a_reason_and_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copied = tmp_path / "copied-tree"  # not a git checkout
    copied.mkdir()
    monkeypatch.setattr(harness, "REPO", copied)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.delenv("FEATURECACHE_GIT_COMMIT", raising=False)
    doc = json.loads(harness.Bench("no_git").finish(tmp_path / "no_git.json").read_text())
    machine = doc["machine"]
    assert machine["commit"] is None, machine
    assert "git rev-parse HEAD" in machine["commit_unknown"] and str(copied) in machine["commit_unknown"]
    err = capsys.readouterr().err
    assert "WARNING" in err and "records no commit" in err and "FEATURECACHE_GIT_COMMIT" in err, err

    # the GPU runs' override still names the commit, and warns of nothing
    monkeypatch.setenv("FEATURECACHE_GIT_COMMIT", "f224275+gpu-run")
    machine = json.loads(harness.Bench("gpu").finish(tmp_path / "gpu.json").read_text())["machine"]
    assert machine["commit"] == machine["git"] == "f224275+gpu-run" and "commit_unknown" not in machine
    assert "WARNING" not in capsys.readouterr().err
