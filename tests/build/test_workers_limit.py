"""``--workers`` far above what the machine runs is refused before a worker process starts (review
R3 finding 3: ``--workers 1000`` on a 2-CPU machine started 1000 worker processes of ~200 MB each
and the kernel's OOM killer took the build, and nearly the machine). Only the check is tested:
nothing here starts more worker processes than the machine has CPUs (none at all, in fact)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from featurecache.build.config import BuildConfig
from featurecache.build.run import WORKER_START_BYTES, check_arguments, max_workers
from featurecache.errors import UsageError
from tests.conftest import STRUCTURES, cli_in_process

GIB = 2**30


def test_the_limit_is_four_per_cpu_and_what_memory_holds() -> None:
    assert max_workers(2, 64 * GIB) == 8  # 4 per CPU: the CPUs bind
    assert max_workers(16, 64 * GIB) == 64
    # 1 GiB holds 4 workers of 256 MiB: the memory binds
    assert WORKER_START_BYTES == 256 * 2**20
    assert max_workers(2, 1 * GIB) == 4
    assert max_workers(1, 100 * 2**20) == 1  # never below 1


def _check(workers: int, scheduler: str | None = None) -> None:
    check_arguments(pdb_dir=STRUCTURES, msa_dir=None, ccd=None, workers=workers, part_size=16,
                    config=BuildConfig(), scheduler=scheduler)  # fmt: skip


def test_check_arguments_takes_up_to_four_per_cpu_and_refuses_more() -> None:
    cpus = os.cpu_count() or 1
    _check(4 * cpus)  # this machine has more than 4 * 256 MiB per CPU (the shared one: 24 GB, 2 CPUs)
    with pytest.raises(
        UsageError,
        match=rf"workers={4 * cpus + 1} \(--workers {4 * cpus + 1}\) is more than this machine runs: at most {4 * cpus}",
    ):
        _check(4 * cpus + 1)
    # with --scheduler, --workers is ignored (the cluster's own workers run the build): not refused
    _check(1000, scheduler="tcp://127.0.0.1:8786")


def test_build_with_workers_1000_is_refused_in_one_line_and_starts_nothing(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    (pdb / "5wkd.pdb").write_bytes((STRUCTURES / "5wkd.pdb").read_bytes())
    out = tmp_path / "store"
    # in this process: cli_in_process fails the test if the command leaves a process or thread running
    proc = cli_in_process(
        "build", "--pdb-dir", str(pdb), "--out", str(out), "--workers", "1000", "--no-progress"
    )
    assert proc.returncode == 2, proc.stderr
    cpus = os.cpu_count() or 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"workers=1000 (--workers 1000) is more than this machine runs: at most {4 * cpus}" in lines[0]
    assert "Traceback" not in proc.stderr and "scratch directories" not in proc.stderr
    assert not out.exists()  # refused before the store was created (and before any worker started)
