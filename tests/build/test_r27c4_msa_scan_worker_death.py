"""The MSA stage's file-scan tasks (``msa-scan-*``, ``_scan``).

A worker that dies scanning an MSA file (KilledWorker on a scan task) does not end the build
(review R27c s45 #4, the MSA scan's gap: ``_scan`` called ``fut.result()`` bare, the build ended in
a raw traceback, exit 1, and the store stayed "first build has not finished"). The batch is split
and its files scanned one by one; the file whose scan still kills its worker is this run's MSA file
failure (key ``""``), it is not cached as scanned, the other files' MSAs are written, and the next
build scans it again. A real external cluster whose worker's preload kills its process on a scan
task naming one file (tests/build/test_r27c_msa_worker_death.poisoned_cluster).

The scan tasks go through ``tasks.run_part`` with ``tasks.stage_guard(root)``, as the MSA part tasks
do since d4dc74b (review R27c s45 #6 and #1): on the shared cluster, a guard whose token is not the
store's (tests/build/test_r27c3_stage_guard) stands for a worker that does not see the store: the
scan, the stage's first task, refuses it (StoreError, exit 3); a scan task whose function the
worker lacks (AttributeError) ends the build as other code, no failure recorded."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from featurecache.build.msa_stage import SCAN_CACHE_DIR, SCAN_CACHE_FILE
from featurecache.build.run import run_build
from featurecache.errors import StoreError
from featurecache.store.index import is_unfinished, read_table, rebuild_index
from tests.build.test_r27c3_stage_guard import _pdb, _raised_in, _wrong_token_in
from tests.build.test_r27c_msa_worker_death import poisoned_cluster
from tests.clusters import shared_scheduler
from tests.conftest import SAMPLES

POISONED = "1psm_A/bfd_uniclust_hits.a3m"


def test_an_msa_file_whose_scan_kills_its_worker_is_a_failure_and_is_scanned_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pdb = _pdb(tmp_path)
    msas = SAMPLES / "msas" / "openfold"
    store = tmp_path / "store"
    with poisoned_cluster(tmp_path, monkeypatch, "msa_stage", "scan_msa_files", POISONED) as (address, flag):
        with caplog.at_level(logging.WARNING):
            summary = run_build(pdb_dir=pdb, out=store, msa_dir=msas, scheduler=address, progress=False)

        assert "MSA scan of 9 files" in caplog.text and "scanning them one by one" in caplog.text
        (crash,) = [f for f in summary.failures if f["stage"] == "msa"]
        assert crash["path"] == POISONED and crash["key"] == "" and crash["entry_id"] == "1psm", crash
        assert "KilledWorker" in crash["message"] and "memory limit" in crash["message"], crash["message"]
        assert summary.n_failed >= 1  # the build exits 1
        msa = summary.stages["msa"]
        assert msa["MSA files failed"] == 1
        # 1psm A's MSA from its other files, 2q2k A's from its file
        assert msa["polymer chains with an MSA from files"] == "3 of 4"
        cached = read_table(store / SCAN_CACHE_DIR / SCAN_CACHE_FILE).column("rel").to_pylist()
        assert POISONED not in cached and len(cached) == 8  # not cached as scanned: read again next time
        entries = read_table(store / "index" / "entries.arrow")
        assert sorted(entries.column("id").to_pylist()) == ["1psm", "2q2k"]
        assert not is_unfinished(entries)

        flag.unlink()  # the worker no longer dies: the next build scans the file and uses it
        again = run_build(pdb_dir=pdb, out=store, msa_dir=msas, scheduler=address, progress=False)
    assert again.stages["msa"]["MSAs written (from files / single sequence)"] == "1 / 0"  # 1psm A's, again
    assert [f for f in again.failures if f["stage"] == "msa"] == []
    rows = read_table(store / "index" / "failures.arrow").to_pylist()
    assert [f for f in rows if f["stage"] == "msa"] == []


def test_an_msa_scan_task_refuses_a_token_the_store_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan tasks go through tasks.run_part with the stage guard (before: submitted directly,
    no check): a worker that does not see the store refuses the stage's first task, the scan."""
    _wrong_token_in(monkeypatch, "featurecache.build.msa_stage")
    out = tmp_path / "store"
    with pytest.raises(StoreError, match=rf"does not see the store at {out} \(") as excinfo:
        run_build(pdb_dir=_pdb(tmp_path), out=out, msa_dir=SAMPLES / "msas" / "openfold",
                  scheduler=shared_scheduler(1), progress=False)  # fmt: skip
    assert "_scan" in _raised_in(excinfo), excinfo.traceback
    assert not (out / SCAN_CACHE_DIR / SCAN_CACHE_FILE).exists(), "no file recorded as scanned"


def test_an_msa_scan_task_a_worker_cannot_call_is_other_code_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from featurecache.build import msa_stage

    monkeypatch.setattr(
        msa_stage, "SCAN_TASK", "featurecache.build.msa_stage:scan_of_a_later_commit", raising=False
    )
    out = tmp_path / "store"
    with pytest.raises(
        StoreError, match=r"refusing to go on: a worker ran other code .*failed with AttributeError"
    ):
        run_build(pdb_dir=_pdb(tmp_path), out=out, msa_dir=SAMPLES / "msas" / "openfold",
                  scheduler=shared_scheduler(1), progress=False)  # fmt: skip
    assert not [f for f in rebuild_index(out, finished=False)["failures"].to_pylist() if f["stage"] == "msa"]
    assert not list((out / "parts").glob("m-*")), "no MSA part written"
