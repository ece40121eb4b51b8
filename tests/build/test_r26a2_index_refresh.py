"""An extension of a few entries does not rewrite the index while its structure parts are written
(review R26a s44 #5, its cheap first step).

Each refresh rebuilds the whole index (~6 s and 0.75 GB at 198k entries), yet during an extension
of a finished store the published index holds the new parts back until the publish anyway. Now the
structure stage refreshes an extending build's index only once the parts written since hold
``INDEX_REFRESH_MIN_ENTRIES`` entries and failures; a first build still refreshes as before (its
partial index is what readers see meanwhile). The rebuild before the MSA stage and the publish stay.
Real builds of the samples, one part per structure, the refresh interval set to 0 s.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from featurecache.build import run as build_run
from tests.conftest import SAMPLES, build_store

NAMES = ("102m.cif", "1psm.cif", "2q2k.cif", "1A8O.pdb")


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    calls: list[bool] = []
    real = build_run.rebuild_index

    def counting(out: Path, **kw: Any) -> Any:
        calls.append(bool(kw.get("publish")))
        return real(out, **kw)

    monkeypatch.setattr(build_run, "rebuild_index", counting)
    return calls


def test_an_extension_of_few_entries_skips_the_refreshes_a_first_build_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_run, "INDEX_REFRESH_S", 0.0)
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    for name in NAMES[:2]:
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    calls = _counting(monkeypatch)
    build_store(store, pdb, workers=1, part_size=1)
    # the start, a refresh after each of the 2 parts, the one before the MSA stage, the publish
    # the start, a refresh after the first part (the next waits ten times its duration: the 10 %
    # share), the one before the MSA stage, the publish
    assert len(calls) == 4 and calls[-1], calls

    for name in NAMES[2:]:
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    calls.clear()
    summary = build_store(store, pdb, workers=1, part_size=1)
    assert summary.n_built == 2
    assert len(calls) == 3 and calls[-1], calls  # before: 4 (a refresh after the first new part)

    monkeypatch.setattr(build_run, "INDEX_REFRESH_MIN_ENTRIES", 1)  # many entries: refreshed as before
    shutil.copy(SAMPLES / "structures" / "7DDO.pdb", pdb / "7DDO.pdb")
    calls.clear()
    build_store(store, pdb, workers=1, part_size=1)
    assert len(calls) == 4, calls
