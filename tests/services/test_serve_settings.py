"""An invalid ``FEATURECACHE_*`` setting (a limit of 0, a number that is not one) stops ``featurecache
serve`` before it listens, with exit 3 and one line naming the variable, its value and the rule,
whatever ``--workers`` is. Before: with one worker a pydantic traceback and exit 1; with two, uvicorn
restarted the crashing workers every few seconds and the service never answered, nor stopped.
Real ``featurecache serve`` processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.lookup.server import free_port


@pytest.mark.parametrize("workers", [1, 2])
def test_an_invalid_setting_stops_serve_in_one_line(sample_store: Path, workers: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_")}
    env.update(FEATURECACHE_MAX_BATCH_ENTRIES="0", FEATURECACHE_STORE_CHECK_SECONDS="soon")
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(free_port()),
           "--workers", str(workers)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = proc.communicate(timeout=90)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
        pytest.fail(f"serve --workers {workers} did not stop on an invalid setting:\n{out[-3000:]}")
    assert proc.returncode == 3, (proc.returncode, out[-3000:])
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out[-3000:]
    assert "FEATURECACHE_MAX_BATCH_ENTRIES=0" in lines[0] and "greater than or equal to 1" in lines[0]
    assert "FEATURECACHE_STORE_CHECK_SECONDS=soon" in lines[0] and "valid number" in lines[0]


def test_a_token_variable_is_named_but_never_shown(sample_store: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_")}
    env.update(FEATURECACHE_AUTH_TOKEN="tok-s3cret", FEATURECACHE_MAX_MSA_ROWS="-1")
    run = subprocess.run(
        [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert run.returncode == 3, (run.returncode, run.stderr[-3000:])
    assert "FEATURECACHE_MAX_MSA_ROWS=-1" in run.stderr and "s3cret" not in run.stderr, run.stderr


def test_a_value_with_a_newline_stays_on_the_one_line(sample_store: Path) -> None:
    """Review RF1 s24 #5: the value was printed raw, so ``5\\nx`` split the error over two lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_")}
    env.update(FEATURECACHE_MAX_MSA_ROWS="5\nx", FEATURECACHE_MAX_BATCH_ENTRIES="0")
    run = subprocess.run(
        [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert run.returncode == 3, (run.returncode, run.stderr[-3000:])
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: invalid setting: "), run.stderr[-3000:]
    assert "FEATURECACHE_MAX_MSA_ROWS='5\\nx': " in lines[0], lines[0]  # escaped, as Python writes it
    assert "FEATURECACHE_MAX_BATCH_ENTRIES=0: " in lines[0], lines[0]  # a printable value as typed
