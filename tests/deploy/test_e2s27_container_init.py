"""The lookup image runs an init as PID 1: tini (Debian's package, the init of `docker run --init`),
with `featurecache serve` its child. Before, serve itself was PID 1 under a plain `docker run`
(no --init; Compose's `init: true` covered only Compose): it handles SIGTERM, but nothing reaped
orphaned processes. Stopping the container goes through tini to serve, which exits 143, and tini
with it, before any SIGKILL.

The real image built with podman (tests/deploy/test_container.py's fixture and settings), run
against the sample store."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from services.lookup.server import free_port, wait_ready
from tests.deploy.test_container import _run, image  # noqa: F401 (image: the module's fixture)

pytestmark = pytest.mark.container


def _cmdline(name: str, pid: int | str) -> list[str]:
    out = _run(["podman", "exec", name, "cat", f"/proc/{pid}/cmdline"], check=True).stdout
    return [a for a in out.split("\0") if a]


def test_tini_is_pid_1_and_stop_ends_serve_by_sigterm(image: str, sample_store: Path) -> None:  # noqa: F811
    (meta,) = json.loads(_run(["podman", "image", "inspect", image], check=True).stdout)
    assert meta["Config"]["Entrypoint"] == ["/usr/bin/tini", "--", "featurecache", "serve"]
    name = f"fc-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    cmd = [
        "podman", "run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:8000",
        "--volume", f"{sample_store}:/store:ro", "--read-only", "--health-interval=disable", image,
    ]  # fmt: skip
    _run(cmd, check=True)
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=90)
        assert _cmdline(name, 1)[:2] == ["/usr/bin/tini", "--"], _cmdline(name, 1)
        # serve is tini's child (the /proc of the container's PID namespace)
        children = _run(["podman", "exec", name, "cat", "/proc/1/task/1/children"], check=True).stdout.split()
        assert len(children) == 1, children
        serve = _cmdline(name, children[0])
        assert "featurecache" in " ".join(serve[:3]) and "serve" in serve, serve
        stop = _run(["podman", "stop", "--time", "60", name], timeout=120)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert "SIGKILL" not in stop.stderr, stop.stderr  # not killed after the timeout
        state = _run(
            ["podman", "inspect", "--format", "{{.State.ExitCode}}", name], check=True
        ).stdout.strip()
        assert state == "143", (state, _run(["podman", "logs", name]).stdout[-3000:])  # 128 + SIGTERM
    finally:
        _run(["podman", "rm", "--force", name], timeout=60)
