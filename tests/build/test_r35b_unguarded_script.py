"""Review R35b s49 #12: a script that calls ``run_build`` at its top level, without
``if __name__ == "__main__":``, gets one clear error from the worker that ran it again, not a
nested build's 45 lines of Dask and multiprocessing tracebacks.

Under CPython's spawn, each worker process the build starts runs the main module's top level again
(as ``__mp_main__``) before it starts; there the script's call started a second build, whose own
worker could not start ("... before the current process has finished its bootstrapping phase").
Now run_build refuses at once in such a process (UsageError, one line); the script's own build
finishes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SAMPLES

SCRIPT = """\
from pathlib import Path

from featurecache.build.run import run_build

try:  # no `if __name__ == "__main__":` guard
    summary = run_build(pdb_dir=Path({pdb!r}), out=Path({out!r}), ccd=None, workers=1, progress=False,
                        dashboard=False)
    print("OK", summary.n_built, flush=True)
except BaseException as exc:
    print(f"RAISED {{type(exc).__name__}}: {{exc}}", flush=True)
"""


def test_an_unguarded_script_gets_one_line_from_its_worker_and_its_build(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    script = tmp_path / "unguarded.py"
    script.write_text(SCRIPT.format(pdb=str(pdb), out=str(tmp_path / "store")))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    lines = done.stdout.splitlines()
    assert "OK 1" in lines, output  # the script's own build
    refused = [line for line in lines if line.startswith("RAISED")]
    assert refused == [
        "RAISED UsageError: run_build() was called while a spawned process (one of a build's workers) ran the "
        'program\'s main module to start: call it under `if __name__ == "__main__":`'
    ], output
    assert "bootstrapping phase" not in output and "Traceback" not in output, output
    assert len(output.splitlines()) <= 6, output  # (the build's own warning lines, unconfigured logging)
