"""``featurecache serve`` ends as README and ``--help`` promise whatever ``--workers`` is: SIGTERM
(``docker stop``) after an orderly stop of every worker ends the process as SIGTERM's (shell status
143), Ctrl-C (SIGINT) with status 0 (review R2 s24 #4: with ``--workers 2``, the Compose default,
SIGTERM ended with 0). Real ``featurecache serve`` processes, real uvicorn workers on 127.0.0.1."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from serve_output import STARTED, ServeOutput

from services.lookup.server import free_port, wait_ready


@pytest.mark.parametrize(
    ("workers", "sig", "status"),
    [
        (1, signal.SIGTERM, -signal.SIGTERM),  # what uvicorn already did with one worker
        (2, signal.SIGTERM, -signal.SIGTERM),  # before: 0
        (2, signal.SIGINT, 0),
    ],
    ids=["1-worker-TERM", "2-workers-TERM", "2-workers-INT"],
)
def test_serve_ends_as_its_signal_says_whatever_the_workers(
    sample_store: Path, tmp_path: Path, workers: int, sig: signal.Signals, status: int
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env["TMPDIR"] = str(tmp_path)  # where the workers' shared metrics directory goes
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(port),
           "--workers", str(workers)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = ServeOutput(proc)
    try:
        # every worker started before the signal, so each will log its stop: answers on the shared
        # socket may all come from one of them (review R42a s52 #3), its start-up line may not
        lines.wait_for(STARTED, workers, timeout=90)
        wait_ready(url, timeout=90)
        assert httpx.get(f"{url}/v1/ready", timeout=10).status_code == 200
        metrics_dirs = list(tmp_path.glob("featurecache-metrics-*"))
        assert len(metrics_dirs) == (1 if workers > 1 else 0), metrics_dirs
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = lines.finish()
    assert proc.returncode == status, (proc.returncode, out[-3000:])
    # an orderly stop: every worker finished its shutdown, the parent cleaned up after them
    finished = re.findall(r"Finished server process \[(\d+)\]", out)
    assert len(set(finished)) == workers, out[-3000:]
    assert not list(tmp_path.glob("featurecache-metrics-*")), "the metrics directory was left behind"
    assert "Traceback" not in out, out[-3000:]
