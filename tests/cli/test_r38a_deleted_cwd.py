"""Started from a working directory that was deleted, a command with absolute paths works (it goes on
from ``/``, so the processes it starts can start), one with a path relative to the deleted directory
is refused in one line (exit 3), and a serve worker process that cannot be started is serve's exit-3
line (review R38a s50 #7: ``serve --workers 2`` died with a traceback, exit 1; ``build`` exited 3
after ~130 lines of Dask tracebacks)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from services.lookup.server import free_port
from tests.conftest import REPO, SAMPLES

#: runs "$@" in the directory $0 after removing it (Linux lets a process's cwd be removed)
IN_DELETED = 'cd "$0" && rmdir "$0" && exec "$@"'


def _gone(tmp_path: Path) -> Path:
    d = tmp_path / "gone"
    d.mkdir()
    return d


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "FEATURECACHE_DASHBOARD": "0"}


def _cli(tmp_path: Path, *args: str) -> list[str]:
    return ["sh", "-c", IN_DELETED, str(_gone(tmp_path)), sys.executable, "-m", "featurecache.cli", *args]


def test_build_from_a_deleted_directory(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    store = tmp_path / "s"
    r = subprocess.run(_cli(tmp_path, "build", "--pdb-dir", str(pdb), "--out", str(store), "--workers", "1",
                            "--no-progress"), capture_output=True, text=True, env=_env(), timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert (store / "index" / "entries.arrow").is_file()


def test_a_relative_path_from_a_deleted_directory_is_refused(tmp_path: Path) -> None:
    r = subprocess.run(_cli(tmp_path, "build", "--pdb-dir", str(tmp_path), "--out", "rel/store", "--workers", "1"),
                       capture_output=True, text=True, env=_env(), timeout=300)  # fmt: skip
    assert r.returncode == 3, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "the current directory no longer exists" in lines[0] and "--out rel/store" in lines[0], lines
    assert not Path("/rel").exists()


def test_serve_with_two_workers_from_a_deleted_directory(two_entry_store: Path, tmp_path: Path) -> None:
    port = free_port()
    p = subprocess.Popen(_cli(tmp_path, "serve", str(two_entry_store), "--port", str(port), "--workers", "2"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())  # fmt: skip
    try:
        deadline, ready = time.monotonic() + 120, False
        while not ready and p.poll() is None and time.monotonic() < deadline:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/v1/ready", timeout=2).status_code == 200
            except httpx.TransportError:
                time.sleep(0.2)
        assert ready, p.stderr.read() if p.poll() is not None and p.stderr else "not ready"
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    # stopped by the signal (143 in a shell)
    assert p.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), err[-3000:]
    assert "Traceback" not in err, err[-3000:]


def test_a_worker_that_cannot_start_is_serves_exit_3_line(two_entry_store: Path, tmp_path: Path) -> None:
    # run_server itself (a caller that did not leave the deleted directory): spawn cannot start a worker
    code = ("import sys\nfrom featurecache.errors import FeatureCacheError\nfrom services.lookup.server import run_server\n"
            "if __name__ == '__main__':\n    try:\n"
            f"        run_server({str(two_entry_store)!r}, port={free_port()}, workers=2)\n"
            "    except FeatureCacheError as exc:\n        print(exc)\n        sys.exit(3)\n")  # fmt: skip
    script = tmp_path / "serve_here.py"
    script.write_text(code)
    r = subprocess.run(["sh", "-c", IN_DELETED, str(_gone(tmp_path)), sys.executable, str(script)],
                       capture_output=True, text=True, env=_env(), timeout=120)  # fmt: skip
    assert r.returncode == 3, r.stdout + r.stderr[-3000:]
    assert r.stdout.startswith("serve stopped: a worker process could not start: "), r.stdout
    assert "the current directory no longer exists" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
