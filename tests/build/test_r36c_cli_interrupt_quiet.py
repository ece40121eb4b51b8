"""Review R36c s49 #5: an interrupted ``featurecache build`` silences Dask's loggers before its last
line: the build had put their levels back (the CLI's INFO), and Dask's exit handlers, finishing a
close the interrupt cut short, logged ~15 INFO lines after it.

In process (tests.conftest.cli_in_process, which puts the loggers back): run_build raises the
KeyboardInterrupt the CLI takes (its end to end case needs a third Ctrl-C timed into the
shutdown); the levels are read when the CLI arms its exit timer, right after the line.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import featurecache.build.run
from featurecache import cli
from featurecache.signals import NOISY_AFTER_INTERRUPT
from tests.conftest import SAMPLES, cli_in_process


def test_an_interrupted_cli_build_silences_dasks_loggers_before_it_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(**kwargs: Any) -> None:
        logging.getLogger("distributed").setLevel(logging.NOTSET)  # as the build puts them back
        raise KeyboardInterrupt

    levels: dict[str, int] = {}

    def exit_within(seconds: float, status: int) -> None:  # (the real one arms an os._exit timer)
        levels.update({name: logging.getLogger(name).getEffectiveLevel() for name in NOISY_AFTER_INTERRUPT})
        levels["distributed.scheduler"] = logging.getLogger("distributed.scheduler").getEffectiveLevel()

    monkeypatch.setattr(featurecache.build.run, "run_build", interrupted)
    monkeypatch.setattr(cli, "_exit_within", exit_within)
    done = cli_in_process("build", "--pdb-dir", str(SAMPLES / "structures"), "--out", str(tmp_path / "store"))
    assert done.returncode == 130, done.stderr
    assert "interrupted before the build wrote" in done.stderr
    assert levels and all(level > logging.CRITICAL for level in levels.values()), levels
