"""``featurecache.cli.app()`` called from a user's program degrades its output only while it runs:
afterwards stdout and stderr have their error handlers back, and the program's own output raises as
Python's does by default (review R39a s50 #6: stdout kept the CLI's handler, and the program's print
of a lone surrogate wrote a raw byte)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

PROGRAM = """
import sys
before = (sys.stdout.errors, sys.stderr.errors)
from featurecache.cli import app
for args in (["--version"], ["--help"]):  # --help's text is not all ASCII: degraded inside the run
    app(args, standalone_mode=False)
print("HANDLERS", before, (sys.stdout.errors, sys.stderr.errors), file=sys.stderr)
try:
    print("bad\\udcff.txt")
    sys.stdout.flush()
except UnicodeEncodeError:
    print("RAISED", file=sys.stderr)
"""


def test_the_streams_handlers_come_back() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "ascii"}
    r = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=120,
                       errors="replace")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "featurecache " in r.stdout and "Usage:" in r.stdout, r.stdout[:500]
    kept = "('strict', 'backslashreplace')"
    assert f"HANDLERS {kept} {kept}" in r.stderr, r.stderr[-3000:]
    assert "RAISED" in r.stderr, r.stderr[-3000:]
