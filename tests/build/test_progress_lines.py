"""Progress without a bar: with ``--no-progress``, or stderr not a terminal (a log file, CI), each
build stage logs ``label done/total`` lines: when it starts, when it ends, and in between at most
every 10 % *and* 30 s (the rarer), so a long stage says how far it is without flooding the log.
Before, such a build logged nothing while a stage ran (rich's bar was disabled, or drew only its
final state on a non-terminal).

Real builds of the repo's samples (6 structures, their MSAs)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from featurecache.build import progress
from tests.conftest import REPO, SAMPLES, build_store

N_STRUCTURES = len(list((SAMPLES / "structures").iterdir()))
LINE = re.compile(r"^(reading inputs|structures|MSA files|MSAs|conformers) (\d+)/(\d+)\b")


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    pdb = tmp_path / "pdb"
    shutil.copytree(SAMPLES / "structures", pdb)
    return pdb, SAMPLES / "msas"


def _by_stage(lines: list[str]) -> dict[str, list[tuple[int, int, str]]]:
    out: dict[str, list[tuple[int, int, str]]] = {}
    for line in lines:
        m = LINE.match(line)
        if m:
            out.setdefault(m[1], []).append((int(m[2]), int(m[3]), line))
    return out


def test_a_build_without_a_bar_logs_each_stage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No time between lines (LOG_EVERY_S 0): a line per 10 % of a stage, its first and last."""
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    pdb, msa = _inputs(tmp_path)
    with caplog.at_level(logging.INFO, logger="featurecache.build.progress"):
        summary = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa, part_size=1)
    assert summary.n_inputs == N_STRUCTURES == 6
    stages = _by_stage([r.getMessage() for r in caplog.records if r.name == "featurecache.build.progress"])
    assert set(stages) == {"reading inputs", "structures", "MSA files", "MSAs", "conformers"}
    s = stages["structures"]
    # one part per structure (part_size 1), a step of ceil(6 / 10) = 1: every part logged
    assert [(d, t) for d, t, _ in s] == [(i, N_STRUCTURES) for i in range(N_STRUCTURES + 1)]
    assert s[-1][2].startswith(f"structures {N_STRUCTURES}/{N_STRUCTURES} done in ")
    for label, lines in stages.items():
        counts = [d for d, _t, _ in lines]
        total = lines[0][1]
        assert counts[0] == 0 and counts[-1] == total and counts == sorted(counts), (label, lines)
        assert len(lines) <= 12, (label, lines)  # start, end, at most 10 between


def test_a_build_without_a_terminal_logs_a_few_lines_per_stage(tmp_path: Path) -> None:
    """The CLI with its default (progress on) and stderr a pipe: the stages' lines, a few each."""
    pdb, msa = _inputs(tmp_path)
    args = ["build", "--pdb-dir", str(pdb), "--msa-dir", str(msa), "--out", str(tmp_path / "s"),
            "--workers", "1", "--part-size", "1"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "COLUMNS": "250"}, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # RichHandler: "[time] INFO     message"
    messages = [
        re.sub(r"^(\[[^\]]*\])?\s*(INFO|WARNING|DEBUG|ERROR)?\s+", "", line).strip()
        for line in proc.stderr.splitlines()
    ]
    stages = _by_stage(messages)
    assert f"structures 0/{N_STRUCTURES}" in [line for _d, _t, line in stages.get("structures", [])], (
        proc.stderr
    )
    assert set(stages) == {"reading inputs", "structures", "MSA files", "MSAs", "conformers"}, proc.stderr
    for label, lines in stages.items():
        assert 2 <= len(lines) <= 12, (label, lines)
        assert lines[-1][0] == lines[-1][1], (label, lines)
    assert len(proc.stderr.splitlines()) < 150, proc.stderr  # log lines only: the summary table is on stdout
