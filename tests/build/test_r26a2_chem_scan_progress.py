"""The chem stage's scan of the structure parts reports progress (review R26a s44 #4).

Before, ``client.gather(client.map(scan_part_task, ...))`` said nothing until every part was
scanned: 7.5 min of silence at 12k parts. Now it is a stage like the others ("chem scan": a bar,
or with ``--no-progress`` log lines ``chem scan done/total``). A real build of the samples.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import pytest

from featurecache.build import progress
from tests.conftest import SAMPLES, build_store

LINE = re.compile(r"^chem scan (\d+)/(\d+)\b")


def test_the_chem_scan_logs_its_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    pdb = tmp_path / "pdb"
    shutil.copytree(SAMPLES / "structures", pdb)
    n = len(list(pdb.iterdir()))
    with caplog.at_level(logging.INFO, logger="featurecache.build.progress"):
        build_store(tmp_path / "s", pdb, workers=1, part_size=1, ccd=SAMPLES / "ccd")
    lines = [r.getMessage() for r in caplog.records if r.name == "featurecache.build.progress"]
    scan = [(int(m[1]), int(m[2]), line) for line in lines if (m := LINE.match(line))]
    assert scan, lines  # before: no line between "structures … done" and the chem summary
    assert [(d, t) for d, t, _ in scan] == [(i, n) for i in range(n + 1)]  # one part per structure
    assert scan[-1][2].startswith(f"chem scan {n}/{n} done in ")
