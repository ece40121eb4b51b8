"""The driver's first read of every input (their digests, before any stage) shows its progress
(review R15 s40 #4: a first build over 9.7 GB was silent for 29 s; over a PDB mirror, minutes).
Without a terminal, as for the build's stages, the progress is log lines: the start, the end."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from featurecache.build import digest_cache
from featurecache.build.discover import discover
from tests.conftest import SAMPLES


def test_reading_the_inputs_logs_its_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdb = tmp_path / "pdb"
    shutil.copytree(SAMPLES / "structures", pdb)
    n = len(list(pdb.iterdir()))
    # files copied just now count as settled (else kept for no digest: digest_cache.RACY_NS)
    monkeypatch.setattr(digest_cache, "RACY_NS", 0)
    store = tmp_path / "store"
    store.mkdir()
    with caplog.at_level(logging.INFO):
        inputs = discover(pdb, "cfg", {}, cache_root=store)
    assert len(inputs) == n and all(i.sha256 for i in inputs)
    lines = [r.getMessage() for r in caplog.records]
    assert f"reading inputs 0/{n}" in lines, lines
    assert any(line.startswith(f"reading inputs {n}/{n} done") for line in lines), lines
    # read again with every digest kept: nothing is read, so no stage is shown
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert [i.sha256 for i in discover(pdb, "cfg", {}, cache_root=store)] == [i.sha256 for i in inputs]
    assert not any(r.getMessage().startswith("reading inputs") for r in caplog.records)
