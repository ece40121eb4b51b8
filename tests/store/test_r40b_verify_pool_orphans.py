"""``featurecache verify`` stopped while its process pool runs leaves no process behind (review R40b
s51 #1). Before, SIGTERM (``timeout``, ``kill``) ended verify at once, as SIGKILL does, and its
spawned pool workers (with their resource tracker and semaphores) waited on their queue for good,
reparented to init, ~135 MB each, holding verify's stdout and stderr: ``verify STORE | cat`` never
ended. Now SIGTERM shuts the pool down, logs one line and ends verify by the signal (exit status
143 in a shell, as before); SIGKILL ends the workers too (``PR_SET_PDEATHSIG`` on Linux, a thread
watching the parent elsewhere: :func:`featurecache.signals.exits_with_parent`).

A real store of more entries than :data:`~featurecache.store.verify.MIN_ROWS_FOR_WORKERS` (copies
of one real structure, so its build is quick), real ``featurecache verify`` processes, each in a
session of its own, signalled once its pool's workers run; the processes are found with psutil.
Whatever a test finds left running is killed by pid at its end, so a regression fails (within the
timeout) instead of leaving orphans or hanging the run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from featurecache.store.verify import MIN_ROWS_FOR_WORKERS, default_workers
from tests.conftest import REPO, STRUCTURES, build_store

pytestmark = [
    pytest.mark.timeout(600),  # an orphan holding a pipe fails the test instead of hanging the run
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process sessions and /proc: Linux"),
    pytest.mark.skipif(default_workers() < 2, reason="verify checks in this process on one CPU: no pool"),
]

#: entries of the store: enough that verify checks them on a pool
N_ENTRIES = MIN_ROWS_FOR_WORKERS + 14
#: how long a process gets to end once it should (a bound, not a measure: they end in ~0.1-3 s)
GONE_S = 30.0


@pytest.fixture(scope="module")
def pool_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``N_ENTRIES`` copies of the real 5wkd.pdb under names of their own (an entry each), built
    without a CCD: a store verify checks on its process pool."""
    root = tmp_path_factory.mktemp("r40b_pool")
    pdb = root / "pdb"
    pdb.mkdir()
    for i in range(N_ENTRIES):
        shutil.copy(STRUCTURES / "5wkd.pdb", pdb / f"e{i:03d}.pdb")
    out = root / "store"
    summary = build_store(out, pdb, part_size=32)
    assert summary.n_failed == 0 and summary.n_built == N_ENTRIES, summary
    return out


class _Verify:
    """A ``featurecache verify`` process in a session of its own; stdout and stderr are pipes (as in
    ``verify STORE | cat``), read to their end by :meth:`finish`."""

    def __init__(self, *args: str, tmp: Path) -> None:
        env = dict(os.environ, TMPDIR=str(tmp), COLUMNS="1000", NO_COLOR="1")  # (log lines unwrapped)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "featurecache.cli", "verify", *args, "--no-progress"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        self.seen: dict[int, psutil.Process] = {}

    def children(self) -> list[psutil.Process]:
        """Its descendants now (each remembered, to be looked for after it ended)."""
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for k in kids:
            self.seen.setdefault(k.pid, k)
        return kids

    def wait_for_pool(self) -> list[psutil.Process]:
        """Its pool's worker processes, once at least two run (its descendants then)."""
        while self.proc.poll() is None:
            workers = []
            for k in self.children():
                try:
                    if "multiprocessing.spawn" in " ".join(k.cmdline()):
                        workers.append(k)
                except psutil.Error:
                    continue
            if len(workers) >= 2:
                return self.children()
            time.sleep(0.02)
        _, err = self.proc.communicate()
        raise AssertionError(
            f"verify ended (exit {self.proc.returncode}) before its pool ran: {err.decode()[-2000:]}"
        )

    def finish(self) -> tuple[int, str, str]:
        """Its exit status, stdout and stderr: the pipes read to their end, which comes only when no
        process holds them any more (bounded: a hang fails here)."""
        try:
            out, err = self.proc.communicate(timeout=GONE_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"verify's stdout/stderr did not end {GONE_S:.0f} s after the signal (verify's exit "
                f"{self.proc.poll()}): a process still holds them: {self.left()}"
            ) from None
        return self.proc.returncode, out.decode(), err.decode()

    def left(self) -> list[str]:
        """Its processes still running: those remembered, and any of its session."""
        alive = {p.pid: p for p in self.seen.values() if _running(p)}
        for p in psutil.process_iter():
            try:
                if p.pid not in alive and os.getsid(p.pid) == self.proc.pid and _running(p):
                    alive[p.pid] = p
            except (OSError, psutil.Error):
                continue
        return [f"{pid} ppid={_ppid(p)} {_cmd(p)}" for pid, p in sorted(alive.items())]

    def kill_left(self) -> None:
        """Kill, by pid, whatever of it still runs (a regression's orphans)."""
        for p in self.seen.values():
            if _running(p):
                with contextlib.suppress(psutil.Error):
                    p.kill()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _ppid(p: psutil.Process) -> str:
    try:
        return str(p.ppid())
    except psutil.Error:
        return "?"


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())[:140]
    except psutil.Error:
        return "?"


@pytest.fixture
def verify_run(tmp_path: Path) -> Iterator[list[_Verify]]:
    """The verify processes a test starts; whatever of them runs at its end is killed by pid."""
    runs: list[_Verify] = []
    yield runs
    for run in runs:
        run.kill_left()


def _gone_within(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Those of ``procs`` still running after up to ``seconds``."""
    _, alive = psutil.wait_procs(procs, timeout=seconds)
    return [p for p in alive if _running(p)]


@pytest.mark.parametrize("repair", [False, True], ids=["verify", "verify-repair"])
def test_sigterm_shuts_the_pool_down_and_ends_verify_by_the_signal(
    pool_store: Path, tmp_path: Path, verify_run: list[_Verify], repair: bool
) -> None:
    store = pool_store
    if repair:  # a repair holds the build lock: a copy of its own
        store = Path(shutil.copytree(pool_store, tmp_path / "store"))
    (tmp_path / "tmp").mkdir()
    run = _Verify(str(store), *(["--repair"] if repair else []), tmp=tmp_path / "tmp")
    verify_run.append(run)
    kids = run.wait_for_pool()
    assert len(kids) >= 3, [_cmd(k) for k in kids]  # two workers and the resource tracker
    run.proc.send_signal(signal.SIGTERM)
    status, out, err = run.finish()  # before: never (the workers held the pipes)
    # ended by SIGTERM, as the default action did (a shell's 143)
    assert status == -signal.SIGTERM, (status, err[-3000:])
    stopped = "verify --repair of" if repair else "verify of"
    assert f"{stopped} {store} stopped by SIGTERM before it finished" in err, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    # the pool was shut down, not left: no semaphore left for the resource tracker to warn of
    assert "leaked semaphore" not in err, err[-3000:]
    assert out == "", out
    assert _gone_within(list(run.seen.values()), GONE_S) == [], run.left()
    assert run.left() == []
    # the store is free and sound: verify runs to its end
    done = subprocess.run([sys.executable, "-m", "featurecache.cli", "verify", str(store), "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0 and "ok: store verified" in done.stdout, done.stdout + done.stderr[-3000:]


def test_sigkill_of_verify_ends_its_pool_workers(
    pool_store: Path, tmp_path: Path, verify_run: list[_Verify]
) -> None:
    (tmp_path / "tmp").mkdir()
    run = _Verify(str(pool_store), tmp=tmp_path / "tmp")
    verify_run.append(run)
    kids = run.wait_for_pool()
    workers = [k for k in kids if "multiprocessing.spawn" in _cmd(k)]
    assert len(workers) >= 2, [_cmd(k) for k in kids]
    run.proc.send_signal(signal.SIGKILL)
    status, _, err = run.finish()  # before: never (the orphans held the pipes)
    assert status == -signal.SIGKILL, err[-3000:]
    # every process it had started is gone: its workers, then its resource tracker
    assert _gone_within(kids, GONE_S) == [], run.left()
    assert run.left() == []


#: a ProcessPoolExecutor whose workers are started by the fork server (their parent is the
#: server, not the pool's process: the thread that watches the parent), then this process
#: killed by SIGKILL with a task running and one waiting; prints the workers' pids first
_FORKSERVER_POOL = """
import multiprocessing, os, signal, sys, time
from concurrent.futures import ProcessPoolExecutor
from featurecache.signals import exits_with_parent

def pid(_):
    time.sleep(0.2)  # (so that both workers take tasks)
    return os.getpid(), os.getppid()

if __name__ == "__main__":
    ctx = multiprocessing.get_context("forkserver")
    pool = ProcessPoolExecutor(max_workers=2, mp_context=ctx, **exits_with_parent())
    seen = {}
    while len(seen) < 2:
        for p, pp in pool.map(pid, range(8)):
            seen[p] = pp
    print(" ".join(f"{p}:{pp}" for p, pp in seen.items()), flush=True)
    pool.submit(time.sleep, 3600)
    time.sleep(3600)
"""


def test_pool_workers_the_fork_server_started_end_with_the_pools_process(tmp_path: Path) -> None:
    """:func:`exits_with_parent` where the workers are not the pool process's children (the fork
    server's: ``PR_SET_PDEATHSIG`` would follow the server): its watching thread ends them."""
    script = tmp_path / "forkserver_pool.py"  # a file: the fork server's children import its functions
    script.write_text(_FORKSERVER_POOL)
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    workers: list[psutil.Process] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        pairs = [w.split(":") for w in line.split()]
        if len(pairs) != 2:
            proc.wait(timeout=GONE_S)
            raise AssertionError(
                f"no pool workers: {line!r} {proc.stderr.read()[-3000:] if proc.stderr else ''}"
            )
        workers = [psutil.Process(int(p)) for p, _ in pairs]
        assert all(int(pp) != proc.pid for _, pp in pairs), pairs  # the fork server's children
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=GONE_S)
        assert _gone_within(workers, GONE_S) == [], [f"{w.pid} {_cmd(w)}" for w in workers if _running(w)]
    finally:
        for w in workers:
            if _running(w):
                w.kill()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
