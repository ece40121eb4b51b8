"""A store without a polymer chain and an ``--msa-dir`` cut into more than one scan batch: the MSA
scan sends the (empty) set of wanted sequence hashes by value, never through ``client.scatter``,
which raises ``ValueError: not enough values to unpack`` for an empty set (review R27c s45 #2:
a pdb-dir of only ions or ligands, or a first build whose every structure failed, crashed the MSA
stage with a traceback on every run, and the store stayed "first build has not finished"). Real
files, a real build on a LocalCluster; the scan's batch floor is lowered so the sample MSAs
(3.5 MB, 13 files) make several batches, as a directory of more than 1 MiB does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from featurecache.build import msa_stage
from featurecache.store.index import is_unfinished, read_table
from tests.conftest import SAMPLES, STRUCTURES, build_store


def test_a_store_of_only_ions_scans_a_multi_batch_msa_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "ions.pdb", pdb / "ions.pdb")  # two MG ions: no polymer chain
    msas = SAMPLES / "msas"
    monkeypatch.setattr(msa_stage, "MIN_SCAN_BATCH_BYTES", 1)
    files = msa_stage._candidate_files(msas)
    assert len(msa_stage._batches([(rel, size) for rel, size, _mtime in files])) > 1, "needs several batches"
    store = tmp_path / "store"

    summary = build_store(store, pdb, msa_dir=msas, workers=1)

    assert summary.n_built == 1
    msa = summary.stages["msa"]
    assert msa["files"] == len(files)
    assert msa["polymer chains with an MSA from files"] == "0 of 0"
    assert not is_unfinished(read_table(store / "index" / "entries.arrow"))  # the first build finished


def test_a_multi_batch_scan_joins_as_a_single_batch_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wanted hashes reach every batch as one set (scattered as one object): the MSAs joined
    are those of a one-batch scan of the same files."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    one = build_store(tmp_path / "one", pdb, msa_dir=SAMPLES / "msas" / "openfold", workers=1)
    monkeypatch.setattr(msa_stage, "MIN_SCAN_BATCH_BYTES", 1)
    many = build_store(tmp_path / "many", pdb, msa_dir=SAMPLES / "msas" / "openfold", workers=1)

    assert many.stages["msa"] == one.stages["msa"]
    assert many.stages["msa"]["polymer chains with an MSA from files"] == "3 of 4"
