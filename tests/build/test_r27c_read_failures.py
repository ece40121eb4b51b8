"""A worker that cannot read an input the driver read (review R27c s45 #5).

The reviewer's worker did not see the input files (a tmpfs over the input directory in its mount
namespace). Each input was recorded as "the file is gone ... (removed or renamed during the
build)", keyed to the file's bytes, so once the cluster was fixed the same build skipped all of
them as "still failing": nothing short of editing the files or deleting the store retried them.
Now such a row names the worker, says the file may not be visible to it, and has an empty key (as
a worker crash has): the next run builds the inputs.

The worker here sees an empty tmpfs over a subdirectory of ``--pdb-dir`` (``unshare -m``; skipped
where that is not allowed): ``--pdb-dir`` itself is readable, so the build's start check passes
and the part tasks meet the unreadable files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import featurecache
from tests.build.test_cluster import _start_scheduler, _start_worker, _stop, _wait_for_workers
from tests.build.test_r27c_worker_paths import _can_unshare, _hidden_worker, _worker_addresses
from tests.conftest import SAMPLES, CliRun, cli_in_process


def _build(pdb: Path, out: Path, address: str, cwd: Path) -> CliRun:
    """``featurecache build`` on the external cluster: the CLI in this process (tests/conftest.py; a
    build on an external cluster leaves no thread or process running), which saves a Python start."""
    return cli_in_process("build", "--pdb-dir", str(pdb), "--out", str(out), "--scheduler", address,
                          "--no-progress", cwd=cwd, env={"COLUMNS": "400"})  # fmt: skip


def test_inputs_a_worker_cannot_see_fail_naming_it_and_are_retried_next_run(tmp_path: Path) -> None:
    if not _can_unshare(tmp_path):
        pytest.skip("unshare -m with a tmpfs mount is not allowed here")
    pdb = tmp_path / "pdb"
    hidden = pdb / "more"
    hidden.mkdir(parents=True)
    names = sorted(os.listdir(SAMPLES / "structures"))[:3]
    shutil.copy(SAMPLES / "structures" / names[0], pdb)
    for name in names[1:]:
        shutil.copy(SAMPLES / "structures" / name, hidden)
    out = tmp_path / "store"
    address, sched = _start_scheduler(tmp_path)
    procs = [sched]
    try:
        procs.append(_hidden_worker(address, tmp_path / "w-blind", hidden))
        _wait_for_workers(address, 1)
        (blind,) = _worker_addresses(address)
        first = _build(pdb, out, address, tmp_path)
        rows = featurecache.open_store(out).failures.to_pylist()
        _stop([procs.pop()])  # the cluster fixed: a worker that sees every file
        procs.append(_start_worker(address, tmp_path / "w-good"))
        _wait_for_workers(address, 1)
        second = _build(pdb, out, address, tmp_path)
    finally:
        _stop(procs)
    assert first.returncode == 1, first.stderr[-3000:]
    assert sorted(r["path"] for r in rows) == [f"more/{n}" for n in names[1:]], rows
    for r in rows:
        assert (r["stage"], r["key"]) == ("read", ""), r
        assert r["message"] == (
            f"cannot read {r['path']}: the file is gone on worker {blind}: the driver read it when it listed "
            "--pdb-dir: removed or renamed during the build, or not visible to that worker at this path"
        )
    # the next run builds them (before: "still failing", skipped as up to date)
    assert second.returncode == 0, second.stderr[-3000:]
    store = featurecache.open_store(out)
    assert len(store.entries) == len(names) and store.failures.num_rows == 0
