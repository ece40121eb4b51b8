"""Inputs that give one structure twice are named (review R26b s44 #8): every file is its own entry,
so ``x.cif`` beside ``x.cif.gz`` (or ``1A8O.pdb`` beside ``1A8O.cif``, or a copy under another name)
was sampled twice as often as its neighbours, without a word."""

from __future__ import annotations

import logging

import pytest

from featurecache.build.discover import InputFile
from featurecache.build.run import TWINS_NAMED, _warn_twins


def _input(rel: str, sha: str) -> InputFile:
    fmt = "pdb" if ".pdb" in rel else "mmcif"
    return InputFile(path=f"/in/{rel}", rel=rel, entry_id=rel, fmt=fmt, sha256=sha, size=1, key=rel)


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_one_name_in_two_formats_and_a_copy_are_named(caplog: pytest.LogCaptureFixture) -> None:
    inputs = [_input("102m.cif", "a"), _input("102m.cif.gz", "b"), _input("1A8O.pdb", "c"),
              _input("1psm.cif", "d"), _input("copy_of_1psm.cif", "d")]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="featurecache.build.run"):
        _warn_twins(inputs)
    lines = _lines(caplog)
    assert len(lines) == 2, lines
    assert "1 structure(s)" in lines[0] and "(102m.cif, 102m.cif.gz)" in lines[0], lines[0]
    assert "the same bytes (1psm.cif, copy_of_1psm.cif)" in lines[1], lines[1]


def test_distinct_structures_and_one_name_in_two_folders_are_not(caplog: pytest.LogCaptureFixture) -> None:
    # two predictors' ranked_0.pdb are two models, not one structure twice
    inputs = [_input("a/ranked_0.pdb", "a"), _input("b/ranked_0.pdb", "b"), _input("102m.cif", "c"),
              _input("1psm.cif", "d")]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="featurecache.build.run"):
        _warn_twins(inputs)
    assert _lines(caplog) == []


def test_many_twins_are_counted_and_the_first_named(caplog: pytest.LogCaptureFixture) -> None:
    n = TWINS_NAMED + 3
    inputs = [_input(f"e{k}.cif{ext}", f"{k}{ext}") for k in range(n) for ext in ("", ".gz")]
    with caplog.at_level(logging.WARNING, logger="featurecache.build.run"):
        _warn_twins(inputs)
    (line,) = _lines(caplog)
    assert line.startswith(f"{n} structure(s)") and "and 3 more" in line, line
    assert "e0.cif, e0.cif.gz" in line and "e7.cif" not in line, line
