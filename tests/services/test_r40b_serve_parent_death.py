"""``featurecache serve --workers N`` killed by SIGKILL (``kill -9``, the OOM killer) takes its uvicorn
workers with it: they kept running, orphaned, listening and answering on the port, and a restart of
serve on that port exited 3 "address already in use" (review R40b s51 #2). The temporary directories
of the killed serve (the workers' shared metrics, their start-up failures) are removed by the next
serve; those of a serve still running are not. Real ``featurecache serve`` processes, real uvicorn
workers on 127.0.0.1.

SIGTERM and Ctrl-C (an orderly stop of every worker) are tests/services/test_serve_signals.py's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import psutil
import pytest

from services.lookup.server import background_server, free_port, wait_ready

pytestmark = pytest.mark.timeout(300)  # a worker that never ends fails the test instead of hanging it

#: how long the workers of a killed serve may take to end (their graceful shutdown is 8 s at most)
GONE_WITHIN_S = 30


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env["TMPDIR"] = str(tmp)  # where serve's temporary directories go
    return env


class Serve:
    """A ``featurecache serve`` process and every process it was seen to start."""

    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc = proc
        self.log = log
        self.seen: dict[int, psutil.Process] = {}

    def children(self) -> list[psutil.Process]:
        """Its processes now (workers, multiprocessing's resource tracker), noted for the clean-up."""
        try:
            found = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        self.seen.update((p.pid, p) for p in found)
        return found

    def workers(self, n: int = 2) -> list[psutil.Process]:
        """The uvicorn workers (spawned: ``multiprocessing.spawn``), once ``n`` run (a worker that
        died is replaced by the supervisor within a second or so) or after a minute."""
        deadline = time.monotonic() + 60
        while True:
            found = [p for p in self.children() if _is_worker(p)]
            if len(found) == n or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


def _is_worker(p: psutil.Process) -> bool:
    with suppress(psutil.NoSuchProcess):
        return "multiprocessing.spawn" in " ".join(p.cmdline())
    return False


@contextmanager
def _serve(store: Path, port: int, tmp: Path, workers: int = 2) -> Iterator[Serve]:
    """``featurecache serve STORE --workers N`` on ``port``, ready; every process it started that
    still runs at the end (an orphaned worker: the bug) is killed by pid."""
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port),
           "--workers", str(workers)]  # fmt: skip
    log = tmp / f"serve-{port}.log"
    with log.open("w") as out:  # the child writes to its own descriptor
        proc = subprocess.Popen(cmd, env=_env(tmp), stdout=out, stderr=subprocess.STDOUT, text=True)
    serve = Serve(proc, log)
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=120)
        serve.children()
        yield serve
    finally:
        serve.children()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for p in serve.seen.values():
            with suppress(psutil.NoSuchProcess):
                p.kill()


def _answers(port: int, n: int = 6) -> None:
    for _ in range(n):  # new connections: both workers share the socket
        with httpx.Client(timeout=10) as client:
            assert client.get(f"http://127.0.0.1:{port}/v1/ready").status_code == 200


def _kill_and_check_gone(serve: Serve, port: int) -> None:
    """SIGKILL serve; every process it started (workers, multiprocessing's resource tracker) ends,
    and nothing listens on ``port`` any more."""
    assert len(serve.workers(2)) == 2
    children = serve.children()
    serve.proc.kill()
    assert serve.proc.wait(timeout=30) == -signal.SIGKILL
    _, alive = psutil.wait_procs(children, timeout=GONE_WITHIN_S)
    survivors = [(p.pid, " ".join(p.cmdline())[:120]) for p in alive if p.is_running()]
    log = serve.log.read_text(errors="replace")[-3000:]
    assert not survivors, f"processes of the killed serve still run: {survivors}\n{log}"
    with pytest.raises(httpx.TransportError):  # no process answers on the port any more
        httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=5)


def test_sigkill_of_serve_ends_its_workers_and_a_restart_serves_on_the_port(
    sample_store: Path, tmp_path: Path
) -> None:
    port = free_port()
    with _serve(sample_store, port, tmp_path) as serve:
        _answers(port)
        killed_dirs = sorted(tmp_path.glob("featurecache-*"))
        names = sorted(p.name.rsplit("-", 1)[0] for p in killed_dirs)
        assert names == ["featurecache-metrics", "featurecache-workers"], killed_dirs
        _kill_and_check_gone(serve, port)
        assert all(p.is_dir() for p in killed_dirs)  # serve, killed, could not remove them
    # before: exit 3 "address already in use" (the orphaned workers held the port)
    with background_server(sample_store, workers=2, port=port, env=_env(tmp_path)) as url:
        assert httpx.get(f"{url}/v1/health", timeout=10).status_code == 200
        # the killed serve's directories are gone, the new serve's are there
        now = sorted(tmp_path.glob("featurecache-*"))
        assert not set(killed_dirs) & set(now), (killed_dirs, now)
        assert len(now) == 2, now
        assert "featurecache_lookup_requests_total" in httpx.get(f"{url}/metrics", timeout=10).text


def test_a_replaced_worker_also_ends_with_its_killed_serve(sample_store: Path, tmp_path: Path) -> None:
    """A worker that dies is replaced by uvicorn's supervisor, as before; the replacement, too,
    ends when serve is killed."""
    port = free_port()
    with _serve(sample_store, port, tmp_path) as serve:
        first = serve.workers(2)
        assert len(first) == 2, first
        first[0].kill()
        first[0].wait(timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the supervisor starts a new worker in its place
            now = serve.workers(2)
            if len(now) == 2 and first[0].pid not in {p.pid for p in now}:
                break
            time.sleep(0.2)
        replaced = {p.pid for p in serve.workers(2)} - {p.pid for p in first}
        assert len(replaced) == 1, (first, serve.children())
        wait_ready(f"http://127.0.0.1:{port}", timeout=60)
        _answers(port)
        _kill_and_check_gone(serve, port)


def test_a_running_serve_keeps_its_directories_when_another_serve_starts(
    sample_store: Path, tmp_path: Path
) -> None:
    """Only a killed serve's directories are removed: those of a serve running in the same temporary
    directory stay, and its /metrics still answers."""
    first_port = free_port()
    with _serve(sample_store, first_port, tmp_path):
        _answers(first_port)
        first_dirs = sorted(tmp_path.glob("featurecache-*"))
        assert len(first_dirs) == 2, first_dirs
        with background_server(sample_store, workers=2, env=_env(tmp_path)) as url:
            assert httpx.get(f"{url}/v1/health", timeout=10).status_code == 200
            assert all(p.is_dir() for p in first_dirs)
            assert len(list(tmp_path.glob("featurecache-*"))) == 4
            metrics = httpx.get(f"http://127.0.0.1:{first_port}/metrics", timeout=10)
            assert metrics.status_code == 200
            assert 'route="/v1/ready"' in metrics.text


def test_a_worker_whose_serve_is_already_gone_stops_at_start(tmp_path: Path) -> None:
    """A worker that starts after its serve was killed (the moment between the spawn and the app's
    start-up) stops there instead of serving: its parent is no longer that serve (whose pid serve
    gives its workers in ``services.lookup.server.SERVE_PID_ENV``)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a serve that was: its pid is no process's parent now
    env = {
        **_env(tmp_path),
        "_FEATURECACHE_SERVE_PID": str(gone.pid),
        "FEATURECACHE_STORE_PATH": str(tmp_path / "none"),
    }
    done = subprocess.run(
        [sys.executable, "-c", "from services.lookup.server import worker_app; worker_app()"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert f"serve's process [{gone.pid}] is gone" in done.stderr, done.stderr[-2000:]
