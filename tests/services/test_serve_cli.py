"""``featurecache serve`` as a command: invalid options refused up front, its startup line shown;
``featurecache --version``. Real processes of the installed command line (the refusals: the same
command line run in this process, tests.conftest.cli_in_process)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.ipc as ipc
import pytest

from services.lookup.server import free_port, wait_ready
from tests.conftest import cli_in_process

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--port", "70000"], "--port 70000"),
        (["--port", "-1"], "--port -1"),
        (["--port", "0"], "--port 0"),
        (["--workers", "0"], "--workers 0"),
        (["--workers", "-3"], "--workers -3"),
    ],
)
def test_serve_refuses_invalid_options(sample_store: Path, args: list[str], option: str) -> None:
    run = cli_in_process("serve", str(sample_store), *args)  # refused before it serves: in this process
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {option}"), run.stderr[-2000:]


def test_serve_logs_its_startup_line(sample_store: Path) -> None:
    with ipc.open_file(sample_store / "index" / "entries.arrow") as f:
        n_entries = f.read_all().num_rows
    port = free_port()
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=60)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    want = (
        f"serving {sample_store.resolve()} ({n_entries} entries) on http://127.0.0.1:{port} with 1 worker(s)"
    )
    assert want in out, out[-3000:]
    assert f"Uvicorn running on http://127.0.0.1:{port}" in out, out[-3000:]  # uvicorn's own lines stay
    assert "without a token" not in out, out[-3000:]  # loopback: only this machine reaches it


def test_serve_on_a_port_in_use_is_one_error_line(sample_store: Path) -> None:
    """A port another process listens on (review R4 LOW 4): before, serve logged "serving … on" and
    uvicorn's start-up lines, then uvicorn's bind error. Now one ``error:`` line naming the address
    and what to do, exit 3 (the status for a port that cannot be bound), and nothing said as serving."""
    port = free_port()
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", port))
        other.listen()
        run = _cli("serve", str(sample_store), "--port", str(port))
    assert run.returncode == 3, (run.returncode, run.stderr[-2000:])
    assert "serving" not in run.stdout + run.stderr, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1] == (
        f"error: cannot serve on http://127.0.0.1:{port}: address already in use: another process listens "
        "there (stop it, or give another --port)"
    ), run.stderr[-2000:]


@pytest.mark.parametrize("token", [None, "s3cret-token"])
def test_serve_on_every_interface_without_a_token_warns(sample_store: Path, token: str | None) -> None:
    """``--host 0.0.0.0`` without a token is a store anyone on the network reads: a warning says so
    and how to require one (review R4 LOW 8); with a token, no warning."""
    port = free_port("0.0.0.0")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_AUTH_TOKEN")}
    if token:
        env["FEATURECACHE_AUTH_TOKEN"] = token
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--host", "0.0.0.0",
           "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=60, token=token)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    warned = f"serving on 0.0.0.0 without a token: anyone who can reach this machine on port {port} reads the store"
    assert (warned in out) == (token is None), out[-3000:]


def test_version() -> None:
    import featurecache
    from featurecache.const import FEATURIZER_VERSION, SCHEMA_VERSION, STORE_FORMAT_VERSION

    run = cli_in_process("--version")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == (
        f"featurecache {featurecache.__version__} (featurizer {FEATURIZER_VERSION}, store format "
        f"{STORE_FORMAT_VERSION}, schema {SCHEMA_VERSION}; source {featurecache.source_digest()})"
    )
