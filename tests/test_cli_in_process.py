"""tests.conftest.cli_in_process, which the tests of refusals (usage errors, exit 2) use in place of a
``featurecache`` process of their own, gives what the real process gives: the exit status, stdout
and stderr byte for byte (log lines included, their time stamps aside), and leaves this process as
it found it (logging, signal handlers, the environment, the working directory). Real processes here.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES, cli_in_process

#: a log line's time stamp (rich's handler): the one thing two runs may print differently
STAMP = re.compile(r"^\[\d\d/\d\d/\d\d \d\d:\d\d:\d\d\]", flags=re.MULTILINE)


def _real(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> tuple[int, str, str]:
    run = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                         cwd=cwd, env={**os.environ, **(env or {})}, timeout=300)  # fmt: skip
    return run.returncode, run.stdout, STAMP.sub("[T]", run.stderr)


def _state() -> tuple[object, ...]:
    root = logging.getLogger()
    return (
        list(root.handlers), root.level, logging.getLogger("distributed").level,
        logging.getLogger("featurecache").level, signal.getsignal(signal.SIGINT),
        signal.getsignal(signal.SIGTERM), signal.pthread_sigmask(signal.SIG_BLOCK, []), dict(os.environ),
        os.getcwd(),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env"),
    [
        # click's own refusal (its usage lines and rich's error panel)
        (["build", "--pdb-dir", str(SAMPLES / "structures")], {}),
        # the command's, after it set up its logging (build: a UsageError from run_build's checks)
        (["build", "--pdb-dir", str(SAMPLES / "structures"), "--out", "never", "--workers", "-1"], {}),
        # an environment variable the run is given, read by the command
        (
            ["build", "--pdb-dir", str(SAMPLES / "structures"), "--out", "never"],
            {"FEATURECACHE_MAX_OPEN_ARRAYS": "0"},
        ),
        # train: torch imported, an INFO log line (no CUDA) before the refusal
        (
            [
                "train",
                "--store",
                str(SAMPLES),
                "--device",
                "cpu",
                "--crop",
                "16",
                "--steps",
                "1",
                "--log",
                ".",
            ],
            {},
        ),
    ],
    ids=["click", "build", "env", "train"],
)
def test_a_run_in_this_process_is_the_real_process(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    before = _state()
    mine = cli_in_process(*args, env=dict(env), cwd=tmp_path)
    assert _state() == before  # nothing of this process changed
    assert (mine.returncode, mine.stdout, STAMP.sub("[T]", mine.stderr)) == _real(
        *args, env=env, cwd=tmp_path
    )
    assert mine.returncode == 2 and mine.stderr
    assert not (tmp_path / "never").exists()
