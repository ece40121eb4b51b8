"""The default worker counts follow the CPUs this process may run on, not the host's (review R31d
s47 #4). ``os.cpu_count()`` ignores CPU affinity and a cgroup's CPU quota: under ``taskset -c 0``
on a 2-CPU machine a build without ``--workers`` started 2 workers, and in a pod limited to 4 CPUs
on a 128-CPU host it started 128 of ~200 MB each. Now a build's default, verify's default and the
bound ``--workers`` is refused above count ``dask.system.CPU_COUNT`` (affinity and ``cpu.max``),
and a default the memory cannot hold is lowered (with a warning), never refused.

The affinity is set with ``os.sched_setaffinity`` in a process of its own (dask reads it at import)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, STRUCTURES

if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
    pytest.skip("needs CPU affinity and at least 2 CPUs to pin a process to fewer", allow_module_level=True)

#: pins this process to one CPU before featurecache (and dask) is imported
PIN = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"

COUNTS = (
    PIN
    + """
import json
from pathlib import Path
from types import SimpleNamespace
from featurecache.build.run import check_workers
from featurecache.errors import UsageError
from featurecache.store.verify import MIN_ROWS_FOR_WORKERS, _Checks

# verify's default for a store large enough for worker processes (none is started: no row is checked)
with _Checks(SimpleNamespace(path=Path(".")), {}, None, MIN_ROWS_FOR_WORKERS) as checks:
    verify = checks._workers
try:
    check_workers(5)  # 4 per CPU: at most 4 on one CPU
    refused = ""
except UsageError as exc:
    refused = str(exc)
print(json.dumps({"verify": verify, "refused": refused}))
"""
)


def _pinned(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", program, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


def test_verify_default_and_the_workers_bound_follow_the_affinity() -> None:
    run = _pinned(COUNTS)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["verify"] == 1, got
    assert (
        "workers=5 (--workers 5) is more than this machine runs: at most 4 (4 per CPU, 1 CPU)"
        in got["refused"]
    ), got


def test_a_build_without_workers_starts_one_per_usable_cpu(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "5wkd.pdb", pdb)
    program = PIN + "from featurecache.cli import app\napp()\n"
    run = _pinned(program, "build", "--pdb-dir", str(pdb), "--no-ccd", "--out", str(tmp_path / "s"),
                  "--no-progress")  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "on 1 worker(s)" in run.stdout, run.stdout


def test_a_default_the_memory_cannot_hold_is_lowered_not_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import distributed.system

    from featurecache.build import run

    monkeypatch.setattr(run, "usable_cpus", lambda: 4)
    monkeypatch.setattr(distributed.system, "MEMORY_LIMIT", 600 * 2**20)  # holds 2 workers of 256 MiB
    with caplog.at_level(logging.INFO, logger=run.__name__):
        assert run.default_workers() == 2
    assert (
        "starting 2 worker process(es), not one per CPU (4): 0.6 GiB of memory holds about 2" in caplog.text
    )
    monkeypatch.setattr(distributed.system, "MEMORY_LIMIT", 64 * 2**30)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=run.__name__):
        assert run.default_workers() == 4
    assert "one per usable CPU" in caplog.text and "not one per CPU" not in caplog.text
