"""The MSA and chem stages' part tasks check their worker as the structure parts' do (review R27c
s45 #6, #1 finished in the MSA and chem stages).

Before, ``msa_stage._write`` and the chem stage submitted ``build_msa_part``,
``build_component_part`` and ``scan_part_task`` directly: a task checked the worker's versions (the
scan not even those) but never the store's token file, so a worker that joined after the build's
start check and saw another filesystem at the store's path wrote its MSA or component part there;
and a worker of another featurecache failed them with a TypeError that the stage recorded as a
failure. Now each goes through ``tasks.run_part`` with ``tasks.stage_guard(root)``.

A real (shared) cluster. A guard whose token is not the store's (``stage_guard`` replaced in the
driver: the structure stage's guard is the real one) stands for a worker that does not see the
store: the stage's first task refuses it (StoreError, exit 3). A component task whose function the
worker lacks (AttributeError) ends the build as other code, no failure recorded."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from featurecache.build import tasks
from featurecache.build.run import run_build
from featurecache.errors import StoreError
from featurecache.store.index import rebuild_index
from tests.clusters import shared_scheduler
from tests.conftest import SAMPLES

#: a token no build wrote: the store has no token file of it
WRONG_TOKEN = "0123456789abcdef" * 2


def _pdb(tmp: Path) -> Path:
    pdb = tmp / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    return pdb


def _wrong_token_in(monkeypatch: pytest.MonkeyPatch, stage: str, function: str = "") -> None:
    """``tasks.stage_guard`` gives the tasks of the module ``stage`` (of its ``function`` alone,
    when given) a token the store lacks."""
    real = tasks.stage_guard

    def guard(root: str | Path) -> dict[str, Any]:
        right = real(root)
        assert right["token"], "the build holds a token file in the store"
        frame = sys._getframe(1)
        mine = frame.f_globals["__name__"] == stage and function in ("", frame.f_code.co_name)
        return {**right, "token": WRONG_TOKEN} if mine else right

    monkeypatch.setattr(tasks, "stage_guard", guard)


def _raised_in(excinfo: pytest.ExceptionInfo[StoreError]) -> set[str]:
    return {entry.name for entry in excinfo.traceback}


def test_an_msa_part_task_refuses_a_token_the_store_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _wrong_token_in(monkeypatch, "featurecache.build.msa_stage", "_write")  # the scan's guard is real
    out = tmp_path / "store"
    with pytest.raises(StoreError, match=rf"does not see the store at {out} \(") as excinfo:
        run_build(pdb_dir=_pdb(tmp_path), out=out, msa_dir=SAMPLES / "msas" / "openfold",
                  scheduler=shared_scheduler(1), progress=False)  # fmt: skip
    assert "_write" in _raised_in(excinfo), excinfo.traceback
    assert not list((out / "parts").glob("m-*")), "no MSA part written"


def test_a_chem_scan_task_refuses_a_token_the_store_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _wrong_token_in(monkeypatch, "featurecache.build.chem_stage")
    out = tmp_path / "store"
    with pytest.raises(StoreError, match=rf"does not see the store at {out} \(") as excinfo:
        run_build(pdb_dir=_pdb(tmp_path), out=out, scheduler=shared_scheduler(1), progress=False)
    assert "_scan_parts" in _raised_in(excinfo), excinfo.traceback
    assert list((out / "parts").glob("s-*")), "the structure parts (real guard) were written"
    assert list((out / "parts").glob("m-*")), "and the MSA part"


def test_a_component_task_a_worker_cannot_call_is_other_code_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from featurecache.build import chem_stage

    monkeypatch.setattr(
        chem_stage, "COMPONENT_TASK", "featurecache.build.chem_stage:component_part_of_a_later_commit"
    )
    out = tmp_path / "store"
    with pytest.raises(
        StoreError, match=r"refusing to go on: a worker ran other code .*failed with AttributeError"
    ):
        run_build(pdb_dir=_pdb(tmp_path), out=out, scheduler=shared_scheduler(1), progress=False)
    assert rebuild_index(out, finished=False)["failures"].num_rows == 0
    assert not list((out / "parts").glob("c-*")), "no component part written"
