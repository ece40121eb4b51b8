"""``--pdb-dir`` / ``--msa-dir`` at a path that does not exist say so ("does not exist"); at a
file they say "not a directory" (before: "not a directory" for both). Usage error, exit 2, nothing
written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES


@pytest.mark.parametrize("option", ["--pdb-dir", "--msa-dir"])
@pytest.mark.parametrize(("kind", "says"), [("missing", "does not exist"), ("file", "not a directory"),
                                            ("broken link", "does not exist")])  # fmt: skip
def test_an_input_directory_that_is_not_there_is_named_for_what_it_is(
    tmp_path: Path, option: str, kind: str, says: str
) -> None:
    path = tmp_path / "inputs"
    if kind == "file":
        path.write_text("a file, not a directory\n")
    elif kind == "broken link":
        path.symlink_to(tmp_path / "gone")
    dirs = {"--pdb-dir": SAMPLES / "structures", "--msa-dir": SAMPLES / "msas", option: path}
    out = tmp_path / "s"
    args = ["build", *(a for o, d in dirs.items() for a in (o, str(d))), "--out", str(out), "--no-progress"]
    r = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True, cwd=REPO,
                       timeout=120)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert line == f"error: {option} {path}: {says}", line
    assert r.stdout == "" and not out.exists()
