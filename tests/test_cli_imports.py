"""What a command's process imports that it does not use, paid at each start. A store-reading
command imports none of the build's featurizers (scipy, gemmi, RDKit), Dask, torch or the service:
``featurecache info`` imported the whole build (featurecache.build.summary imported
featurecache.build.run for a type), ~0.3 s of CPU of each of its ~1 s runs (the suite runs it some
35 times; users run it on every check of a store). A build's driver does not import scipy, which
only its workers' featurizer uses (~0.3 s of each ``featurecache build``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: packages none of these commands needs
HEAVY = ("scipy", "gemmi", "rdkit", "distributed", "dask", "torch", "fastapi", "uvicorn")

_RUN = """
import runpy, sys
sys.argv = ["featurecache", *sys.argv[1:]]
try:
    runpy.run_module("featurecache.cli", run_name="__main__")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("exit", code, "imported", *sorted({m.split(".")[0] for m in sys.modules} & set(%r)))
""" % (HEAVY,)  # noqa: UP031


@pytest.mark.parametrize("command", ["info", "verify"])
def test_a_store_reading_command_imports_no_build_model_or_service(sample_store: Path, command: str) -> None:
    done = subprocess.run([sys.executable, "-c", _RUN, command, str(sample_store)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    last = done.stdout.strip().splitlines()[-1]
    assert last == "exit 0 imported", (last, done.stderr[-2000:])


def test_a_builds_driver_does_not_import_scipy() -> None:
    """The modules ``featurecache build`` imports before its workers start (the driver process)."""
    code = ("import sys, featurecache.cli, featurecache.build.run, featurecache.build.chem_stage; "
            "print('scipy' in sys.modules)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False", done.stdout


def test_a_part_task_imports_the_featurizers_scipy_before_its_first_entry(tmp_path: Path) -> None:
    """RF2 (session 28) #1: once ``featurize.interfaces`` imported scipy lazily, a worker's first
    entry paid the import inside its featurize timer (102m's recorded time 0.03 → 0.3 s). The part
    task imports it before any entry: a part of no input leaves scipy imported, and the first
    entry of a part then finds it there."""
    code = ("import sys; from featurecache.build.tasks import build_structure_part; "
            "print('scipy' in sys.modules, end=' '); "
            f"r = build_structure_part({str(tmp_path / 'store')!r}, 's-000000', [], 'h'); "
            "print('scipy.spatial' in sys.modules)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False True", (done.stdout, done.stderr[-2000:])
