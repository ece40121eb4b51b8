"""A worker that does not see the store (or an input) at the driver's path (review R27c s45 #1).

The reviewer's worker had a private tmpfs over the store's parent directory: the path existed, on
another filesystem. Its parts were written there, the summary counted them built, the driver's
store stayed empty, and a later stage called the parts damaged. Now the build's start check has
every worker read back a token file written in the store (and check ``--pdb-dir`` and the rest):
a worker that cannot is named, the build refused with exit 3 and nothing of it written. Each part
task reads the token again before it writes (a worker that joined after the check).

The cluster test starts its workers in mount namespaces of their own (``unshare -m`` and a tmpfs,
as the reviewer did); it is skipped where that is not allowed (an unprivileged user)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from featurecache.build.discover import discover
from featurecache.build.tasks import build_structure_part, worker_versions
from featurecache.errors import StoreError
from featurecache.store.root import LOCK_FILE, init_store
from tests.build.test_cluster import DASK, _start_scheduler, _stop, _wait_for_workers
from tests.conftest import REPO, SAMPLES, cli_in_process


def _can_unshare(tmp: Path) -> bool:
    probe = tmp / "unshare-probe"
    probe.mkdir()
    try:
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", f"mount -t tmpfs tmpfs {probe}"],
            capture_output=True, timeout=20,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _hidden_worker(address: str, cwd: Path, hidden: Path) -> subprocess.Popen[bytes]:
    """A ``dask worker`` (no nanny: one process, ours to stop) that sees an empty tmpfs at
    ``hidden``: the path exists for it, on another filesystem than the driver's."""
    cwd.mkdir(parents=True, exist_ok=True)
    log_file = (cwd / "worker.log").open("wb")
    worker = (f"mount -t tmpfs tmpfs {hidden} && exec {DASK} worker {address} --nthreads 1 --no-nanny "
              "--no-dashboard --memory-limit 4GiB")  # fmt: skip
    return subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", worker],
        stdout=log_file, stderr=subprocess.STDOUT, cwd=cwd, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip


def _worker_addresses(address: str) -> dict[str, int]:
    """Worker address -> its pid."""
    from distributed import Client

    with Client(address, timeout="20s") as c:
        return dict(c.run(os.getpid))


def test_workers_that_do_not_see_the_store_or_the_inputs_are_refused_at_start(tmp_path: Path) -> None:
    if not _can_unshare(tmp_path):
        pytest.skip("unshare -m with a tmpfs mount is not allowed here")
    hidden_store, hidden_inputs = tmp_path / "shared", tmp_path / "inputs"
    hidden_store.mkdir()
    pdb_dir = hidden_inputs / "structures"
    pdb_dir.mkdir(parents=True)
    for name in sorted(os.listdir(SAMPLES / "structures"))[:2]:
        (pdb_dir / name).write_bytes((SAMPLES / "structures" / name).read_bytes())
    out = hidden_store / "store"
    address, sched = _start_scheduler(tmp_path)
    procs = [sched]
    try:
        procs.append(_hidden_worker(address, tmp_path / "w-store", hidden_store))
        _wait_for_workers(address, 1)
        store_blind = next(iter(_worker_addresses(address)))
        procs.append(_hidden_worker(address, tmp_path / "w-inputs", hidden_inputs))
        _wait_for_workers(address, 2)
        inputs_blind = next(a for a in _worker_addresses(address) if a != store_blind)
        # the CLI in this process (tests/conftest.py; a build on an external cluster leaves no
        # thread or process running): a Python start saved
        done = cli_in_process("build", "--pdb-dir", str(pdb_dir), "--out", str(out), "--scheduler", address,
                              "--no-progress", cwd=tmp_path, env={"COLUMNS": "400"})  # fmt: skip
    finally:
        _stop(procs)
    stderr = " ".join(done.stderr.split())
    assert done.returncode == 3, stderr[-3000:]
    assert f"worker {store_blind} does not see the store at {out} (" in stderr, stderr[-3000:]
    assert f"worker {inputs_blind} cannot read --pdb-dir {pdb_dir} (no such file or directory)" in stderr
    assert "the store must be on a filesystem every worker sees at the same path" in stderr
    assert "Traceback" not in done.stderr
    # nothing of the build: no store root, no part, no token file left (the lock file only)
    assert not out.exists() or [p.name for p in out.iterdir()] == [LOCK_FILE], sorted(out.iterdir())


def test_a_part_task_that_does_not_read_the_store_token_writes_nothing(tmp_path: Path) -> None:
    """The task-side check (a worker that joined after the start check): a token the task cannot
    read back in the store is a StoreError (exit 3) before anything is written."""
    from featurecache.build.tasks import store_token_file

    out = tmp_path / "store"
    init_store(out, {"config_hash": "t", "entry_config_hash": "t", "config": {}})
    inputs = [i for i in discover(SAMPLES / "structures", "t", {}) if i.entry_id == "102m"]
    token = "0123456789abcdef" * 2
    with pytest.raises(
        StoreError, match=rf"does not see the store at {out} \(.*every worker sees at the same path"
    ):
        build_structure_part(str(out), "s-000000", inputs, "t", versions=worker_versions(), store_token=token)
    assert [p.name for p in (out / "parts").iterdir()] == ["zarr.json"]
    store_token_file(out, token).write_text(token)  # the driver's store: the task writes the part
    res = build_structure_part(
        str(out), "s-000000", inputs, "t", versions=worker_versions(), store_token=token
    )
    assert res.n_entries == 1 and (out / "parts" / "s-000000").is_dir()
