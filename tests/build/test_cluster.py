"""Builds on a real external Dask cluster (``dask scheduler`` + ``dask worker`` processes on
127.0.0.1, workers in another working directory), including workers that run another featurecache
and a scheduler that goes away."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

import featurecache
from featurecache.errors import StoreError
from tests.conftest import REPO, SAMPLES, CliRun, build_store, cli_in_process

VENV_BIN = Path(sys.executable).parent
DASK = str(VENV_BIN / "dask")


@dataclass
class Cluster:
    address: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    worker_cwd: Path | None = None


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """``procs``: the scheduler, then its workers. The workers are stopped first and waited for,
    then the scheduler: a worker stopped together with its scheduler spends seconds retrying to
    say goodbye to it (about 9 s, against 2-3 s)."""
    for group in (procs[1:], procs[:1]):
        for p in group:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in group:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


def _start_scheduler(tmp: Path) -> tuple[str, subprocess.Popen[bytes]]:
    sched_file = tmp / "scheduler.json"
    log_file = (tmp / "scheduler.log").open("wb")
    proc = subprocess.Popen(
        [DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
         "--scheduler-file", str(sched_file)],
        stdout=log_file, stderr=subprocess.STDOUT, cwd=tmp,
    )  # fmt: skip
    for _ in range(300):
        if sched_file.exists():
            try:
                return json.loads(sched_file.read_text())["address"], proc
            except (ValueError, KeyError):
                pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    _stop([proc])
    raise RuntimeError(f"dask scheduler did not start: {(tmp / 'scheduler.log').read_text()[-2000:]}")


def _start_worker(address: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A ``dask worker`` that imports this checkout's featurecache (by default; ``env`` replaces
    its environment), not whatever the venv's editable install points at: from a copy of the tree
    the driver and the worker would otherwise run different sources and the build refuse them."""
    cwd.mkdir(parents=True, exist_ok=True)
    log_file = (cwd / "worker.log").open("wb")
    return subprocess.Popen(
        [DASK, "worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
         "--memory-limit", "4GiB"],
        stdout=log_file, stderr=subprocess.STDOUT, cwd=cwd, env=env or dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip


def _wait_for_workers(address: str, n: int) -> None:
    from distributed import Client

    with Client(address, timeout="20s") as c:
        c.wait_for_workers(n, timeout=60)


@contextmanager
def _one_worker_cluster(tmp: Path) -> Iterator[Cluster]:
    """A scheduler and one worker whose cwd is a directory of its own (not the test's cwd)."""
    address, sched = _start_scheduler(tmp)
    procs = [sched]
    try:
        procs.append(_start_worker(address, tmp / "worker-cwd"))
        _wait_for_workers(address, 1)
        yield Cluster(address, procs, worker_cwd=tmp / "worker-cwd")
    finally:
        _stop(procs)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of its own, for a test that kills a part of it."""
    with _one_worker_cluster(tmp_path) as c:
        yield c


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the tests that only run builds on it or ask it who it is (starting and
    stopping a scheduler and a worker costs seconds each time)."""
    with _one_worker_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


def _run_cli(args: list[str], cwd: Path) -> CliRun:
    """``featurecache build ARGS`` on an external cluster: the CLI in this process (tests/conftest.py;
    a build on an external cluster leaves no thread or process running), which saves a Python start."""
    return cli_in_process("build", *args, "--no-progress", cwd=cwd)


def test_relative_out_on_external_cluster_has_components(
    tmp_path: Path, shared_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative --out is resolved on the driver: a worker in another cwd still finds every part
    (before: the component stage's scan found nothing there and the store had no components)."""
    ref = tmp_path / "ref"
    build_store(ref, SAMPLES / "structures", ccd=SAMPLES / "ccd", workers=1)
    n_ref = featurecache.open_store(ref).components.num_rows
    assert n_ref > 0

    driver_cwd = tmp_path / "driver-cwd"
    driver_cwd.mkdir()
    monkeypatch.chdir(driver_cwd)
    from featurecache.build.run import run_build

    run_build(pdb_dir=SAMPLES / "structures", out=Path("store"), ccd=SAMPLES / "ccd",
              scheduler=shared_cluster.address, part_size=8, progress=False)  # fmt: skip
    store = featurecache.open_store(driver_cwd / "store")
    assert store.components.num_rows == n_ref
    assert shared_cluster.worker_cwd is not None and shared_cluster.worker_cwd.is_dir()
    assert not (shared_cluster.worker_cwd / "store").exists()


def _other_featurecache(root: Path, how: str) -> Path:
    """A copy of this featurecache under ``root`` (for a worker's PYTHONPATH) that differs honestly:
    ``older``: build/tasks.py without ``worker_versions`` (as before the version check); ``code``:
    only a comment added to featurize/entry.py, every version the same."""
    dest = root / "featurecache"
    shutil.copytree(REPO / "featurecache", dest, ignore=shutil.ignore_patterns("__pycache__"))
    if how == "code":
        entry = dest / "featurize" / "entry.py"
        entry.write_text(entry.read_text() + "\n# a reviewer's local edit\n")
    else:
        tasks = dest / "build" / "tasks.py"
        text = tasks.read_text()
        start, end = text.index("def worker_versions("), text.index("def _failure(")
        old = text[:start] + text[end:]
        assert "worker_versions" not in old
        tasks.write_text(old)
    return root


@pytest.mark.parametrize("how", ["older", "code"])
def test_worker_with_another_featurecache_is_refused(tmp_path: Path, how: str) -> None:
    """``code``: a worker whose featurecache differs from the driver's only in its source (same
    versions) is refused too, naming both package directories (before: accepted, exit 0). Another
    featurizer version goes the same way (the answer of worker_versions compared by
    version_differences): test_a_worker_with_another_featurizer_is_refused_naming_it."""
    address, sched = _start_scheduler(tmp_path)
    procs = [sched]
    try:
        other = _other_featurecache(tmp_path / "other", how)
        procs.append(_start_worker(address, tmp_path / "worker-cwd", dict(os.environ, PYTHONPATH=str(other))))
        _wait_for_workers(address, 1)
        from distributed import Client

        with Client(address, timeout="20s") as c:
            (worker,) = c.scheduler_info()["workers"]
            # the worker really imports the copy
            where = c.run(lambda: __import__("featurecache").__file__)[worker]
        assert where.startswith(str(other)), where
        out = tmp_path / "store"
        res = _run_cli(["--pdb-dir", str(SAMPLES / "structures"), "--out", str(out), "--scheduler", address],
                       tmp_path)  # fmt: skip
    finally:
        _stop(procs)
    assert res.returncode == 3, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert worker in res.stderr
    expected = {"older": "AttributeError", "code": "featurecache source"}[how]
    assert expected in res.stderr
    if how == "code":
        assert (
            f"at {other / 'featurecache'} differs from the driver's at {REPO / 'featurecache'}" in res.stderr
        )
    assert not out.exists() or not any(out.rglob("*.json"))


def test_a_worker_with_another_featurizer_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build's start check (run._check_worker_versions) on a worker whose featurecache reports
    another FEATURIZER_VERSION (its worker_versions, with const edited as a worker's copy would be):
    refused with the StoreError the CLI exits 3 on (the real worker and CLI: the test above), naming
    the worker and its featurizer version."""
    from featurecache import const
    from featurecache.build import run
    from featurecache.build.tasks import worker_versions

    mine = worker_versions()
    with monkeypatch.context() as m:
        m.setattr(const, "FEATURIZER_VERSION", "9.9.9-other")
        theirs = worker_versions()
    assert theirs == {**mine, "featurizer": "9.9.9-other"}
    worker = "tcp://127.0.0.1:40001"
    monkeypatch.setattr(run, "_ask_workers", lambda client, function, what, scheduler: {worker: theirs})
    with pytest.raises(StoreError) as err:
        run._check_worker_versions(None, "tcp://127.0.0.1:40000")
    msg = str(err.value)
    assert msg.startswith(f"refusing to build: worker {worker} runs featurizer 9.9.9-other;"), msg
    assert f"the driver runs featurecache {mine['featurecache']}" in msg and "install the same" in msg, msg
    # the same worker with the driver's versions passes
    monkeypatch.setattr(run, "_ask_workers", lambda client, function, what, scheduler: {worker: mine})
    run._check_worker_versions(None, "tcp://127.0.0.1:40000")


def _structure_parts(parts: Path) -> list[Path]:
    """Complete structure parts (renamed into place; temp dirs start with a dot)."""
    return [p for p in parts.glob("s-*") if p.is_dir()] if parts.is_dir() else []


def test_scheduler_lost_mid_build_is_one_line_exit_3(tmp_path: Path, cluster: Cluster) -> None:
    """The scheduler killed while parts are being built: exit 3, one line naming the scheduler, no
    traceback; the parts finished before are kept (before: a raw FutureCancelledError, exit 1)."""
    from tests.conftest import STRUCTURES

    out = tmp_path / "store"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [str(VENV_BIN / "featurecache"), "build", "--pdb-dir", str(STRUCTURES), "--out", str(out),
         "--scheduler", cluster.address, "--part-size", "1", "--no-progress"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        parts = out / "parts"
        for _ in range(1200):  # until the first structure part is renamed into place
            if _structure_parts(parts) or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the build ended before the scheduler could be killed"
        cluster.procs[0].kill()  # the scheduler
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert cluster.address in stderr
    assert _structure_parts(parts)


def test_workers_with_scheduler_warns(
    tmp_path: Path, shared_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """--workers is meaningless on an external cluster: a WARNING says it is ignored (before: silent)."""
    from featurecache.build.run import run_build

    with caplog.at_level(logging.WARNING, logger="featurecache.build.run"):
        run_build(pdb_dir=SAMPLES / "structures", out=tmp_path / "store", workers=3,
                  scheduler=shared_cluster.address, progress=False)  # fmt: skip
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("--workers 3 is ignored" in m for m in warned), warned


def test_worker_crash_is_retried_next_run(tmp_path: Path) -> None:
    """A worker crash recorded for an input (as _run_structure_parts does when a single-input part
    kills its worker) is listed, but the next run builds the input again (before: its failure held
    the input's key and every later run skipped it). Not a real OOM: the failure is written by
    ``_record_crashed_input`` itself, into a real store built on a LocalCluster."""
    from distributed import KilledWorker

    from featurecache.build.config import BuildConfig
    from featurecache.build.discover import discover, existing_entry_ids, next_part_number
    from featurecache.build.run import _fingerprint, _record_crashed_input
    from featurecache.store.index import rebuild_index
    from featurecache.store.layout import STRUCTURE_PART_PREFIX, part_name

    pdb_dir, out = tmp_path / "in", tmp_path / "store"
    pdb_dir.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb_dir)
    build_store(out, pdb_dir, workers=1)
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb_dir)  # new input; its worker "dies"
    entry_config = BuildConfig().entry_config_hash(_fingerprint(None))
    existing = existing_entry_ids(rebuild_index(out)["entries"])
    (crashed,) = [i for i in discover(pdb_dir, entry_config, existing, exclude=out) if i.rel == "102m.cif"]
    res = _record_crashed_input(out, part_name(STRUCTURE_PART_PREFIX, next_part_number(out, STRUCTURE_PART_PREFIX)),
                                crashed, KilledWorker("structure-part-x", SimpleNamespace(address="tcp://127.0.0.1:1"), 3))  # type: ignore[arg-type]  # fmt: skip
    assert res.n_failed == 1
    rebuild_index(out)
    listed = featurecache.open_store(out).failures.to_pylist()
    assert [(f["path"], f["stage"]) for f in listed] == [("102m.cif", "worker")]

    summary = build_store(out, pdb_dir, workers=1)
    assert summary.n_built == 1 and summary.n_failed == 0
    store = featurecache.open_store(out)
    assert set(store.entries.column("source_path").to_pylist()) == {"1psm.cif", "102m.cif"}
    assert store.failures.num_rows == 0


def test_worker_killed_mid_build_leaves_no_duplicate_parts(tmp_path: Path) -> None:
    """A worker process SIGKILLed mid-build (its nanny starts a new one): the parts it had finished
    are not computed again (before: the driver held every future, Dask recomputed them all and
    wrote duplicate parts: 68-69 for the 63 inputs of the whole corpus). One input per part, so each
    input gives one part."""
    from distributed import Client

    from tests.conftest import interrupt_inputs

    inputs = interrupt_inputs(tmp_path / "in")
    n_inputs = sum(1 for p in inputs.iterdir() if p.is_file() and not p.name.startswith("."))
    address, sched = _start_scheduler(tmp_path)
    procs = [sched]
    try:
        procs.append(_start_worker(address, tmp_path / "w1"))
        procs.append(_start_worker(address, tmp_path / "w2"))
        _wait_for_workers(address, 2)
        with Client(address, timeout="20s") as c:
            pids = c.run(os.getpid)
        victim = pids[sorted(pids)[0]]
        out = tmp_path / "store"
        build = subprocess.Popen(
            [str(VENV_BIN / "featurecache"), "build", "--pdb-dir", str(inputs), "--out", str(out),
             "--scheduler", address, "--part-size", "1", "--no-progress"],
            cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            for _ in range(2400):
                if len(_structure_parts(out / "parts")) >= n_inputs // 2 or build.poll() is not None:
                    break
                time.sleep(0.05)
            assert build.poll() is None, "the build ended before a worker could be killed"
            os.kill(victim, signal.SIGKILL)
            _, stderr = build.communicate(timeout=240)
        finally:
            if build.poll() is None:
                build.kill()
                build.wait()
    finally:
        _stop(procs)
    assert build.returncode in (0, 1), stderr[-3000:]
    parts = _structure_parts(out / "parts")
    # at-least-once: the killed worker's task in flight, or one whose part was renamed into place
    # before the driver read its result, is run again (two at most with one thread per worker)
    assert n_inputs <= len(parts) <= n_inputs + 2, f"{len(parts)} structure parts for {n_inputs} inputs"
    assert len(featurecache.open_store(out).entries) + len(featurecache.open_store(out).failures) == n_inputs


def test_scheduler_without_workers_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduler with no worker: a StoreError naming it after the wait (before: waited forever);
    nothing is written."""
    from featurecache.build import run

    monkeypatch.setattr(run, "WAIT_FOR_WORKERS_S", 2.0, raising=False)
    address, sched = _start_scheduler(tmp_path)
    out = tmp_path / "store"
    try:
        with pytest.raises(StoreError, match="no worker") as err:
            run.run_build(pdb_dir=SAMPLES / "structures", out=out, scheduler=address, progress=False)
    finally:
        _stop([sched])
    assert address in str(err.value)
    assert not out.exists()


def test_a_worker_address_as_scheduler_is_refused(tmp_path: Path, shared_cluster: Cluster) -> None:
    """--scheduler at a Dask worker's address: a StoreError saying it is a worker, not a
    scheduler, nothing written (before: a UsageError quoting a TypeError from Worker.identity)."""
    from distributed import Client

    from featurecache.build.run import run_build

    with Client(shared_cluster.address, timeout="20s") as c:
        (worker,) = c.scheduler_info()["workers"]
    out = tmp_path / "store"
    with pytest.raises(StoreError, match="is not a Dask scheduler: it is a Dask Worker") as err:
        run_build(pdb_dir=SAMPLES / "structures", out=out, scheduler=worker, progress=False)
    assert worker in str(err.value)
    assert not out.exists()
