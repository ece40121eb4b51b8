"""Review R38a s50 #8: another featurecache store kept inside ``--pdb-dir`` (or ``--msa-dir``) was
walked as input: every file of it a failed input (~100 for a small store) and exit 1 forever. A
directory that is a featurecache store's root (``store.root.is_store_root``: a small regular
``zarr.json`` group recording featurecache's integer versions, next to ``index/`` and ``parts/``;
review R39a s50 #1/#2 made the test strict) is left out as the build's own store is, named in one
warning; a zarr group that is not a store is still read."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from featurecache.store.reader import open_store
from tests.conftest import SAMPLES, build_store


def test_a_store_inside_the_input_directories_is_not_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("102m.cif", "1A8O.pdb"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    inner = pdb / "old" / "storeA"
    summary = build_store(inner, pdb, workers=1)  # its own store: left out already
    assert summary.n_failed == 0
    (pdb / "grp").mkdir()
    (pdb / "grp" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')

    caplog.set_level(logging.WARNING)
    out = tmp_path / "storeB"
    # the store inside --msa-dir (here --pdb-dir itself) is not the MSA stage's either
    summary = build_store(out, pdb, workers=1, msa_dir=pdb)
    failures = open_store(out).failures.column("path").to_pylist()
    assert failures == ["grp/zarr.json"]  # a zarr group that is no featurecache store is still an input
    assert summary.n_failed == 1
    assert sorted(open_store(out).entries.column("id").to_pylist()) == ["102m", "1A8O"]
    named = [r.getMessage() for r in caplog.records if "featurecache store inside" in r.getMessage()]
    # once for each stage that walks the directory
    assert set(named) == {
        f"{pdb}: 1 featurecache store inside, not read as input (as the build's own store is not): {inner}"
    }
