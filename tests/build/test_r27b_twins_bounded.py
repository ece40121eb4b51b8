"""The duplicate-file warning stays one bounded line (review R27b s45 #5): it capped the number of
twin groups it names but not the files of a group, so a directory with 2,000 copies of one file gave
one WARNING line of 43,661 characters, on every build. Now each group names its first 3 files and
its count; a group of 2 or 3 is named whole, as before (tests/build/test_r26b_twins.py)."""

from __future__ import annotations

import logging

import pytest

from featurecache.build.discover import InputFile
from featurecache.build.run import _warn_twins


def _input(rel: str, sha: str) -> InputFile:
    return InputFile(path=f"/in/{rel}", rel=rel, entry_id=rel, fmt="mmcif", sha256=sha, size=1, key=rel)


def test_a_group_of_many_copies_names_three_and_counts_them(caplog: pytest.LogCaptureFixture) -> None:
    # 2,000 copies of one file and 600 of another, plus one pair: three groups of the same bytes
    inputs = [_input(f"c{k:05d}_1lzh.cif", "a") for k in range(2000)]
    inputs += [_input(f"d{k:05d}_1psm.cif", "b") for k in range(600)]
    inputs += [_input("102m.cif", "c"), _input("copy_of_102m.cif", "c")]
    with caplog.at_level(logging.WARNING, logger="featurecache.build.run"):
        _warn_twins(inputs)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(line) < 500, len(line)
    assert line.startswith("3 structure(s) given by several files of the same bytes ("), line
    assert "102m.cif, copy_of_102m.cif; " in line, line
    assert "c00000_1lzh.cif, c00001_1lzh.cif, c00002_1lzh.cif, … (2000 files)" in line, line
    assert "d00000_1psm.cif, d00001_1psm.cif, d00002_1psm.cif, … (600 files)" in line, line
    assert "c00003_1lzh.cif" not in line, line
