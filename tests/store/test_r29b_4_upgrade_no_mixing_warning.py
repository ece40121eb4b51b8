"""Upgrading an older store by building its own inputs again gives no "the store will mix
featurizer versions" warning (review R29b s46 #4). The parts of an older featurecache record no
``source_dir``, so the build took none of its entries as of its ``--pdb-dir``, warned that it
would keep them at their older featurizer, and then rebuilt every one of them. Now an entry whose
id an input of the build takes counts as the build's (it is rebuilt: the featurizer version is in
its key); entries of other inputs are still named.

A real build of the repo's samples 1psm and 2q2k, made to look older the way such parts are: its
structure parts' ``part.json`` without ``source_dir`` and with featurizer ``0.2.0`` (what
``versions.part_record`` reads)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, build_store

MIXING = "the store will mix featurizer versions"


def _make_older(store: Path) -> None:
    for manifest in sorted((store / "parts").glob("s-*/_index/part.json")):
        doc = json.loads(manifest.read_text())
        doc.pop("source_dir", None)
        doc["featurizer_version"] = "0.2.0"
        manifest.write_text(json.dumps(doc, indent=1, sort_keys=True))


def test_rebuilding_an_older_stores_own_inputs_warns_of_no_mixing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for entry in ("1psm", "2q2k"):
        shutil.copy(SAMPLES / "structures" / f"{entry}.cif", pdb)
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, part_size=1).n_failed == 0
    _make_older(store)

    with caplog.at_level(logging.WARNING, logger="featurecache"):
        assert build_store(store, pdb, workers=1, part_size=1).n_failed == 0
    assert not [r.getMessage() for r in caplog.records if MIXING in r.getMessage()]

    # another --pdb-dir (its own entry only): the two older entries are kept, and named
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", other)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="featurecache"):
        assert build_store(store, other, workers=1, part_size=1).n_failed == 0
    (line,) = [r.getMessage() for r in caplog.records if MIXING in r.getMessage()]
    assert "2 entries of featurizer 0.2.0 from a --pdb-dir it did not record" in line, line
