"""``featurecache serve --workers 2`` whose worker cannot start exits non-zero with one line naming
the reason (s24 closing note). Before: a worker whose start-up failed in the app's lifespan (uvicorn's
start-up failure status, 3) stopped uvicorn's supervisor, which returned normally, and serve exited
0 without serving; a worker whose import or app factory raised (status 1) was restarted by the
supervisor again and again, a traceback a second, and serve neither served nor ended.

Real ``featurecache serve`` processes over a real store (a copy of the sample store), with causes
that happen: a ``PROMETHEUS_MULTIPROC_DIR`` that does not exist (each worker's metrics live there;
the parent never opens it), and, once serving, a worker that dies (SIGKILL here, the OOM killer in
life) and whose replacement finds the token file removed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.lookup.server import free_port, wait_ready

TIMEOUT_S = 90


def _serve(store: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--workers", "2"]
    cmd += ["--port", str(port)]
    # its own session: a serve that does not end is stopped with its workers (they hold the pipes)
    proc = subprocess.Popen(
        cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}"


def _kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL serve and every process of its session (its workers, its resource tracker)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _finish(proc: subprocess.Popen[str]) -> tuple[int | None, str]:
    """Exit status (None: still running after TIMEOUT_S, then stopped) and stderr."""
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S)
        return proc.returncode, err
    except subprocess.TimeoutExpired:
        _kill(proc)
        _, err = proc.communicate(timeout=60)
        return None, err


def _workers(pid: int) -> list[int]:
    """The uvicorn worker processes of serve ``pid`` (its children that multiprocessing spawned,
    not its resource tracker)."""
    out = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
        if b"spawn_main" in cmdline:
            out.append(int(child))
    return out


def _last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


def test_a_missing_prometheus_multiproc_dir(store_copy: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    proc, _ = _serve(store_copy, {"PROMETHEUS_MULTIPROC_DIR": str(missing)})
    status, err = _finish(proc)
    assert status is not None, f"serve still running after {TIMEOUT_S} s:\n{err[-3000:]}"  # before
    assert status == 3, err[-3000:]
    line = _last_line(err)
    assert line.startswith("error: ") and "could not start" in line, err[-3000:]
    assert "FileNotFoundError" in line and str(missing) in line, line
    assert "Traceback" not in err, err[-3000:]


# A root zarr.json damaged meanwhile was a third cause here: the replacement worker's open raised a
# bare AttributeError. Since f2b13e9 the reader names the damage in a StoreError, which a worker
# answers with 503 like any store it cannot open yet (tests/store/test_damaged_root_metadata.py:
# `serve` on such a store exits 3 naming the file), so it is no longer a start-up failure.
@pytest.mark.parametrize("cause", ["token file removed"])
def test_a_replacement_worker_that_cannot_start(store_copy: Path, tmp_path: Path, cause: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    proc, url = _serve(store_copy, {"FEATURECACHE_AUTH_TOKEN_FILE": str(token_file)})
    try:
        wait_ready(url, timeout=60, token="s3cret-token")
        workers = _workers(proc.pid)
        assert len(workers) == 2, workers
        token_file.unlink()
        os.kill(workers[0], signal.SIGKILL)
    except BaseException:
        _kill(proc)
        raise
    status, err = _finish(proc)
    assert status is not None, f"serve still running after {TIMEOUT_S} s:\n{err[-3000:]}"
    assert status == 3, (status, err[-3000:])  # before: 0 (zarr.json), still running (token file)
    line = _last_line(err)
    assert line.startswith("error: serve stopped: worker process ["), err[-3000:]
    assert "could not start" in line, line
    assert str(token_file) in line, line
    # the other worker, which was serving, was stopped with it
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{w}").exists() for w in workers[1:]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{w}/cmdline").exists() for w in workers[1:]), workers
