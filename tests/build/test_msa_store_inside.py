"""A store inside ``--msa-dir`` (``--msa-dir data --out data/store``): the store's own files are not
MSA inputs, as a store inside ``--pdb-dir`` is not a structure input. Before, the MSA scan read
every file of the store (its index, parts and scan cache: here 26 of the 39 files the first build
scanned, 81 of 94 on the second, each read in full as an "other file") and kept them in its scan
cache. Real builds (LocalCluster, 1 worker) of the repo's sample structures and MSAs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow.ipc as ipc

import featurecache
from tests.conftest import SAMPLES, build_store


def _files(top: Path) -> set[str]:
    """Non-hidden files under ``top`` (relative, posix), as os.walk lists them."""
    out = set()
    for dirpath, _dirs, names in os.walk(top):
        for name in names:
            rel = (Path(dirpath) / name).relative_to(top)
            if not any(part.startswith(".") for part in rel.parts):
                out.add(rel.as_posix())
    return out


def test_a_store_inside_msa_dir_is_not_scanned(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(SAMPLES / "msas", data)
    msa_files = _files(data)
    assert msa_files  # the sample's alignments
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    store = data / "store"

    for run in ("first", "second"):
        summary = build_store(store, pdb, workers=1, msa_dir=data)
        assert summary.n_failed == 0, (run, summary.failures)
        # before: 39 on the first build (the structure parts were already in the store), 94 on the second
        assert summary.stages["msa"]["files"] == len(msa_files), run
        assert summary.stages["msa"]["empty / other files"] == "0 / 0", run  # every sample file is an MSA
        assert any(p.startswith("store/") for p in _files(data))  # the store is there, and was not read
        cache = ipc.open_file(store / "cache" / "msa_scan.arrow").read_all()
        assert set(cache.column("rel").to_pylist()) == msa_files, run
        failures = featurecache.open_store(store).failures.to_pylist()
        assert not [f for f in failures if f["path"].startswith("store")], run
    assert summary.stages["msa"]["MSAs written (from files / single sequence)"] == "0 / 0"
