"""serve's "serving …" line comes once every check that can stop it has passed (review R26d s44 #9):
with --workers 2 and no writable temporary directory (a read-only container without --tmpfs /tmp) it
printed "serving" and then the error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from services.lookup.server import free_port

#: the CLI with every temporary directory refused, as in a read-only container (TMPDIR alone cannot
#: do it: tempfile falls back to /tmp, and chmod does not stop root)
READ_ONLY_TMP = """
import runpy, sys, tempfile
def refuse(*args, **kwargs):
    raise OSError(30, "Read-only file system")
tempfile.mkdtemp = refuse
sys.argv = ["featurecache", *sys.argv[1:]]
runpy.run_module("featurecache.cli", run_name="__main__")
"""


def test_no_serving_line_before_the_temporary_directory_check(sample_store: Path) -> None:
    args = ["serve", str(sample_store), "--port", str(free_port()), "--workers", "2"]
    run = subprocess.run(
        [sys.executable, "-c", READ_ONLY_TMP, *args], capture_output=True, text=True, timeout=120
    )
    out = run.stdout + run.stderr
    assert run.returncode == 3, out[-3000:]
    assert "needs a writable temporary directory" in out, out[-3000:]
    assert "serving " not in out, out[-3000:]
