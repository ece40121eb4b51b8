"""``featurecache serve --workers N`` and a full metrics directory (review R42b s52 #3).

Each worker keeps its Prometheus values in memory-mapped files in the metrics directory (serve's own
under ``$TMPDIR``, or ``PROMETHEUS_MULTIPROC_DIR``). prometheus_client only extends those files, so
on a full filesystem (a ``/tmp`` tmpfs in a read-only container) the first write to a new page killed
the worker with SIGBUS; uvicorn's supervisor started another at once, which died the same way, without
end: no request was answered, ``/v1/health`` included, and nothing said why. Now:

* a metrics directory without room for the workers' files stops serve at start-up: exit 3, one line
  naming the directory and "No space left on device";
* a directory that fills while serving costs no worker: every request is answered, ``/metrics``
  answers 503 naming the directory and the reason, and the values wait in memory until there is
  room again (then ``/metrics`` counts every request);
* workers that die again and again before they serve (here: killed by SIGBUS at start, as a native
  crash does) stop serve after a few, exit 3 naming the signal, instead of being restarted for ever.

Real ``featurecache serve`` processes with real uvicorn workers on 127.0.0.1, and real tmpfs mounts
filled with a file (skipped where this process cannot mount one: not root, no tmpfs)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.lookup.server import free_port, wait_ready
from tests.faults import mounted_tmpfs

pytestmark = pytest.mark.timeout(400)

#: how long serve may take to stop by itself (before the fix it never did)
STOP_WITHIN_S = 90
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for the test (unmounted after it)."""
    with mounted_tmpfs(tmp_path / "tmpfs", "2M") as mount:
        yield mount


def _fill(directory: Path) -> Path:
    """Fill ``directory``'s filesystem to the last byte with one file (returned)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, bytes(4096)):
                pass
    finally:
        os.close(fd)
    statvfs = os.statvfs(directory)
    assert statvfs.f_bavail == 0, statvfs
    return filler


def _env(**extra: str) -> dict[str, str]:
    """The environment of a child: this tree's featurecache first, no settings of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env["PYTHONPATH"] = str(REPO)
    return {**env, **extra}


def _no_core() -> None:  # a worker killed by SIGBUS leaves no core file in the working directory
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _serve(store: Path, env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "featurecache.cli",
        "serve",
        str(store),
        "--workers",
        "2",
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=_no_core,
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}"


def _finish(proc: subprocess.Popen[str], timeout: float = STOP_WITHIN_S) -> tuple[int | None, str]:
    """Exit status (None: still running after ``timeout``, then killed with its workers), stderr."""
    try:
        _, err = proc.communicate(timeout=timeout)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        return None, err


def _stop(proc: subprocess.Popen[str]) -> tuple[int | None, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return _finish(proc, timeout=60)


def _lines(err: str) -> list[str]:
    return err.strip().splitlines()


def test_serve_refuses_a_metrics_dir_without_room(sample_store: Path, tmpfs: Path, tmp_path: Path) -> None:
    prom = tmpfs / "prom"
    prom.mkdir()
    _fill(tmpfs)
    proc, _ = _serve(sample_store, _env(PROMETHEUS_MULTIPROC_DIR=str(prom)), tmp_path)
    status, err = _finish(proc)
    # before: the workers died of SIGBUS and were restarted without end, serve never ended
    assert status is not None, f"serve still running after {STOP_WITHIN_S} s:\n{err[-3000:]}"
    assert status == 3, err[-3000:]
    line = _lines(err)[-1]
    assert line.startswith("error: serve could not start: the metrics directory "), err[-3000:]
    assert str(prom) in line and "No space left on device" in line, line
    assert "died" not in err and "Traceback" not in err, err[-3000:]
    assert not [p for p in prom.iterdir()], list(prom.iterdir())  # no worker started: no metric file


def test_a_metrics_dir_that_fills_while_serving(sample_store: Path, tmpfs: Path, tmp_path: Path) -> None:
    proc, url = _serve(sample_store, _env(TMPDIR=str(tmpfs)), tmp_path)
    try:
        wait_ready(url, timeout=60)
        assert httpx.get(f"{url}/v1/entries/102m", timeout=30).status_code == 200
        filler = _fill(tmpfs)
        # every (method, route) is a new histogram series (16 values, about a page of its file) in
        # the worker that answers it: with 2 workers, one of them must find no room
        methods = ["GET", "HEAD", "PROPFIND", "MKCOL", "COPY", "MOVE", "LOCK", "PURGE", "PUT", "DELETE"]
        paths = ["/v1/health", "/v1/info", "/v1/components", "/v1/entries/102m", "/v1/entries/nope"]
        for method in methods:
            for path in paths:
                try:
                    r = httpx.request(method, url + path, timeout=30)
                except httpx.TransportError as exc:  # before: the worker died of SIGBUS
                    pytest.fail(f"{method} {path} after the metrics directory filled: {exc!r}")
                assert r.status_code in (200, 404, 405), (method, path, r.status_code, r.text[:300])
        r = httpx.get(f"{url}/metrics", timeout=30)
        assert r.status_code == 503, r.text[:500]
        detail = r.json()["detail"]
        assert detail.startswith("metrics incomplete: "), detail
        assert str(tmpfs) in detail and "No space left on device" in detail, detail
        assert httpx.get(f"{url}/v1/health", timeout=30).status_code == 200
        filler.unlink()  # room again: the values waiting are written at each worker's next update
        assert httpx.get(f"{url}/v1/entries/102m", timeout=30).status_code == 200
    finally:
        status, err = _stop(proc)
    assert status == -signal.SIGTERM, (status, err[-3000:])
    assert "died" not in err, err[-3000:]
    assert "cannot record its metrics in " in err and "No space left on device" in err, err[-3000:]


_WAITING_SCRIPT = """
import json, os, sys
from services.lookup import metrics
fill = sys.argv[1]
out = {}
metrics.observe("GET", "/before", 200, 0.01, 10)
fd = os.open(fill, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
try:
    while os.write(fd, bytes(4096)):
        pass
except OSError:
    pass
os.close(fd)
for i in range(40):  # 40 new series of each metric: more than the room left in any page
    metrics.observe("GET", f"/full/{i}", 200 + i, 0.01, 10)
    metrics.ENTRY_ROWS.labels(f"group{i}").inc(3)
try:
    metrics.render()
    out["full"] = None
except Exception as exc:
    out["full"] = [type(exc).__name__, getattr(exc, "status_code", None), getattr(exc, "detail", str(exc))]
os.unlink(fill)
text = metrics.render()[0].decode()
out["after"] = text
print(json.dumps(out))
"""


def test_metric_values_wait_for_room(tmpfs: Path, tmp_path: Path) -> None:
    """A worker's view (the metrics module in a process of its own, as in a uvicorn worker): values
    that find no room wait in memory, ``/metrics`` says why, and once there is room every value is
    written (none lost)."""
    prom = tmpfs / "prom"
    prom.mkdir()
    r = subprocess.run(
        [sys.executable, "-c", _WAITING_SCRIPT, str(tmpfs / "filler")], cwd=REPO, capture_output=True, text=True,
        env=_env(PROMETHEUS_MULTIPROC_DIR=str(prom)), timeout=120, preexec_fn=_no_core,
    )  # fmt: skip
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])  # before: -7, killed by SIGBUS
    out = json.loads(r.stdout)
    name, status, detail = out["full"]
    assert (name, status) == ("HTTPException", 503), out["full"]
    assert detail.startswith("metrics incomplete: ") and str(prom) in detail, detail
    assert "No space left on device" in detail, detail
    after = out["after"]
    assert 'featurecache_lookup_requests_total{method="GET",route="/before",status="200"} 1.0' in after
    for i in range(40):
        assert (
            f'featurecache_lookup_requests_total{{method="GET",route="/full/{i}",status="{200 + i}"}} 1.0'
            in after
        )
        assert f'featurecache_lookup_entry_rows_served_total{{group="group{i}"}} 3.0' in after
        assert (
            f'featurecache_lookup_request_duration_seconds_count{{method="GET",route="/full/{i}"}} 1.0'
            in after
        )
    assert not [p.name for p in prom.iterdir() if p.name.startswith(".metrics-not-recorded-")]


#: a worker (a process multiprocessing spawned) that dies of SIGBUS as it starts, as one whose native
#: code crashes does
_CRASHING_WORKER = """
import os, signal
if os.environ.get("CRASH_TOKEN") and b"--multiprocessing-fork" in open("/proc/self/cmdline", "rb").read():
    os.kill(os.getpid(), signal.SIGBUS)
"""


def test_workers_that_die_at_start_up_stop_serve(sample_store: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(_CRASHING_WORKER))
    env = _env(TMPDIR=str(tmp_path), PYTHONPATH=os.pathsep.join([str(site), str(REPO)]),
               CRASH_TOKEN=uuid.uuid4().hex)  # fmt: skip
    proc, _ = _serve(sample_store, env, tmp_path)
    status, err = _finish(proc)
    # before: "Child process [N] died", a new one started, without end
    assert status is not None, f"serve still running after {STOP_WITHIN_S} s:\n{err[-3000:]}"
    assert status == 3, (status, err[-3000:])
    line = _lines(err)[-1]
    match = re.match(
        r"error: serve stopped: (\d+) worker processes in a row died before they served; the last, \[", line
    )
    assert match and int(match.group(1)) >= 2, line  # (STARTUP_DEATHS_MAX; the two workers may die at once)
    assert "was killed by SIGBUS" in line, line
    assert "Traceback" not in err, err[-3000:]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("featurecache-")], list(tmp_path.iterdir())
