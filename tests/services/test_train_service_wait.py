"""``featurecache train --url`` started before its lookup service (a training job and ``featurecache
serve`` started together, or a lookup container coming back) waits ``--service-wait`` seconds for
the service's first answer (review RF1 s24 #2: the client's first contact gives up after 2 s, and
train had no way to wait longer: exit 3 where it used to train). A real serve, on the sample store,
started once the real train process has been refused (its client logs the retry) and then for
longer than the client's default first contact."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from featurecache.auth import TOKEN_ENV
from featurecache.client.http import DEFAULT_FIRST_CONTACT_S
from services.lookup.server import free_port

#: seconds between the client's first refused call and serve's start: more than the client's default
#: first contact (2 s), well within --service-wait
DELAY_S = DEFAULT_FIRST_CONTACT_S + 2.0


def test_train_waits_for_a_service_that_starts_later(sample_store: Path, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_") and k != TOKEN_ENV}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "log.json"
    train = [sys.executable, "-m", "featurecache.cli", "train", "--url", url, "--service-wait", "60", "--steps",
             "1", "--crop", "32", "--device", "cpu", "--workers", "1", "--pool", "thread", "--log", str(log), "--verbose"]  # fmt: skip
    serve = [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(port)]
    trainer = subprocess.Popen(train, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    refused = threading.Event()

    def read_stderr() -> None:
        assert trainer.stderr is not None
        for line in trainer.stderr:
            lines.append(line)
            if "retrying" in line:  # the client's DEBUG line (--verbose): it was refused, and retries
                refused.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    server = None
    try:
        deadline = time.monotonic() + 180
        while not refused.wait(0.2) and trainer.poll() is None and time.monotonic() < deadline:
            pass
        assert refused.is_set(), (trainer.poll(), "".join(lines)[-3000:])
        time.sleep(DELAY_S)
        assert trainer.poll() is None, "".join(lines)[-3000:]  # still waiting for the service
        server = subprocess.Popen(serve, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        trainer.wait(timeout=240)  # its stdout: the one summary line
        assert trainer.stdout is not None
        out = trainer.stdout.read()
        reader.join(timeout=30)
    finally:
        for proc in (trainer, server):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    err = "".join(lines)
    assert trainer.returncode == 0, err[-3000:]
    assert out.startswith("trained 1 step;"), out
    assert log.is_file()


def test_service_wait_must_be_positive() -> None:
    from typer.testing import CliRunner

    from featurecache.cli import app

    bad = CliRunner().invoke(
        app, ["train", "--url", "http://127.0.0.1:1", "--service-wait", "0", "--device", "cpu"]
    )
    assert bad.exit_code == 2 and "--service-wait" in bad.output, bad.output
