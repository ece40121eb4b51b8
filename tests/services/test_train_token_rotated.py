"""A lookup service restarted with another token while ``featurecache train --url`` runs (a rotated
secret): the run ends with the token advice (``--token`` and the token variables), as a refusal at
the first contact does, instead of a bare "failed N samples in a row" (session 34's note: a 401 mid-run
went through the data-failure path without it). Real ``featurecache serve`` processes on 127.0.0.1,
the real train CLI, the sample store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from featurecache.auth import TOKEN_ENV, TOKEN_FILE_ENV
from services.lookup.server import free_port, wait_ready


def _serve(store: Path, port: int, token: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port)]
    return subprocess.Popen(
        cmd, env={**env, TOKEN_ENV: token}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _steps(log: Path) -> int:
    try:
        return len(json.loads(log.read_text())["steps"])
    except (OSError, ValueError, KeyError):
        return 0


def test_a_token_rotated_mid_run_ends_train_with_the_token_advice(sample_store: Path, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "log.json"
    train = [sys.executable, "-m", "featurecache.cli", "train", "--url", url, "--token", "first-s3cret",
             "--steps", "100000", "--crop", "16", "--device", "cpu", "--workers", "1", "--pool", "thread",
             "--log", str(log)]  # fmt: skip
    first = _serve(sample_store, port, "first-s3cret", env)
    second = trainer = None
    try:
        wait_ready(url, timeout=120, token="first-s3cret")
        trainer = subprocess.Popen(train, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while _steps(log) < 2 and trainer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _steps(log) >= 2, trainer.poll()  # training on the first service
        first.terminate()
        first.wait(timeout=60)
        second = _serve(sample_store, port, "rotated-s3cret", env)  # the same address, another token
        wait_ready(url, timeout=120, token="rotated-s3cret")
        out, err = trainer.communicate(timeout=300)
    finally:
        for proc in (trainer, first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert trainer.returncode != 0, out + err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "401" in last, err[-3000:]
    # the advice of a refusal at the first contact: what to give, and the ways to give it
    assert (
        "is not the service's" in last and "--token" in last and TOKEN_ENV in last and TOKEN_FILE_ENV in last
    ), last
    # the token was read when the run started; a token file rotated since is read by the resumed run
    # (review R17 s40 #3: the advice said the file's token was not the service's, while it now was)
    assert "read when the run started" in last and "read again by the resumed run" in last, last
