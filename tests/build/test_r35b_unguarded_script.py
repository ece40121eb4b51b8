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

import pytest

from featurecache.build.run import UNGUARDED_LINE
from tests.conftest import REPO, SAMPLES

GUARD = 'if __name__ == "__main__":'

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
    """A script that catches what run_build raises: its worker's one line (stderr), and its build's
    UsageError naming the guard (review R36c s49 #3: the worker now ends at once, so the script's
    own build cannot start it; before, the caught refusal let the worker start all the same)."""
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
    assert done.stderr.count(UNGUARDED_LINE) == 1, output  # the worker's
    refused = [line for line in done.stdout.splitlines() if line.startswith("RAISED")]
    assert len(refused) == 1 and refused[0].startswith(
        "RAISED UsageError: the build's Dask workers could not"
    ), output
    assert GUARD in refused[0], output
    assert "bootstrapping phase" not in output and "Traceback" not in output, output
    assert len(output.splitlines()) <= 6, output  # (the build's own warning lines, unconfigured logging)


PLAIN_SCRIPT = """\
from pathlib import Path

from featurecache.build.run import run_build

summary = run_build(pdb_dir=Path({pdb!r}), out=Path({out!r}), ccd=None, workers=1, progress=False, dashboard=False,
                    fork_server={fork_server!r})
print("OK", summary.n_built)
"""


@pytest.mark.parametrize("fork_server", [False, True], ids=["spawned", "fork_server"])
def test_a_plain_unguarded_script_gets_a_short_error_naming_the_guard(
    tmp_path: Path, fork_server: bool
) -> None:
    """Review R36c s49 #3: no try/except in the script: 73 lines with three tracebacks, ending in
    distributed's ``RuntimeError: Nanny failed to start.``, which named nothing. Now the worker's
    one line, then Python's traceback of the script's uncaught UsageError: the script's call and
    run_build's raise (two frames of two or three lines each), its header and the error line."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    script = tmp_path / "unguarded.py"
    script.write_text(PLAIN_SCRIPT.format(pdb=str(pdb), out=str(tmp_path / "store"), fork_server=fork_server))
    env = {**os.environ, "PYTHONPATH": str(REPO), "FEATURECACHE_DASHBOARD": "0"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode != 0, done.stderr
    assert "OK" not in done.stdout
    lines = done.stderr.splitlines()
    assert sum(UNGUARDED_LINE in line for line in lines) == 1, done.stderr  # the one worker's
    assert lines[-1].startswith("featurecache.errors.UsageError: the build's Dask workers could not"), (
        done.stderr
    )
    assert GUARD in lines[-1], done.stderr
    assert "RuntimeError" not in done.stderr, done.stderr
    assert done.stderr.count("Traceback") == 1, done.stderr  # the script's own, through run_build only
    assert len(lines) <= 9, done.stderr  # 1 (worker) + 1 (header) + 2 frames x <= 3 + 1 (error)


GUARDED_FAILING_WORKERS = """\
from pathlib import Path

if __name__ != "__main__":  # a spawned worker's run of this module fails for its own reason
    raise ImportError("this module cannot be imported by a worker (a missing dependency, say)")

from featurecache.build.run import run_build

if __name__ == "__main__":
    run_build(pdb_dir=Path({pdb!r}), out=Path({out!r}), ccd=None, workers=1, progress=False, dashboard=False)
"""


def test_a_guarded_script_whose_workers_fail_otherwise_is_not_told_to_add_the_guard(tmp_path: Path) -> None:
    """Review R37 s49 #2: the call inside ``if __name__ == "__main__":`` is at the module's top level
    too, and was blamed on a missing guard; the workers' failure is named as such instead."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    script = tmp_path / "guarded.py"
    script.write_text(GUARDED_FAILING_WORKERS.format(pdb=str(pdb), out=str(tmp_path / "store")))
    env = {**os.environ, "PYTHONPATH": str(REPO), "FEATURECACHE_DASHBOARD": "0"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode != 0, done.stderr
    last = done.stderr.splitlines()[-1]
    assert "the build's Dask workers could not start" in last, done.stderr[-3000:]
    assert GUARD not in last and "UsageError" not in last, done.stderr[-3000:]
    assert "cannot be imported by a worker" in done.stderr  # the worker's own error, above
