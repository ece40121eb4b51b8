"""The MSA stage's file-scan tasks (``msa-scan-*``) go through ``tasks.run_part`` with
``tasks.stage_guard(root)``, as its part tasks do since d4dc74b (review R27c s45 #6 and #1, the MSA
scan's gap: ``_scan`` submitted ``scan_msa_files`` directly, checking nothing, and a worker of
another featurecache failed it with a TypeError that ended the build in a raw traceback).

The shared cluster: a guard whose token is not the store's (tests/build/test_r27c3_stage_guard)
stands for a worker that does not see the store: the scan, the stage's first task, refuses it
(StoreError, exit 3). A scan task whose function the worker lacks (AttributeError) ends the build
as other code, no failure recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache.build.msa_stage import SCAN_CACHE_DIR, SCAN_CACHE_FILE
from featurecache.build.run import run_build
from featurecache.errors import StoreError
from featurecache.store.index import rebuild_index
from tests.build.test_r27c3_stage_guard import _pdb, _raised_in, _wrong_token_in
from tests.clusters import shared_scheduler
from tests.conftest import SAMPLES


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
