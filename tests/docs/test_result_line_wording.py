"""Result and warning lines read as plain sentences (review R1 s26 #5): ``train --steps 1`` ended
with "trained 1 steps", ``info`` on a stale index said "1 entry ... are not in it", and ``plan`` on
an unfinished first build said "... its counts are partial and, as entries, MSAs or conformers
written later are missing from it, its memory predictions may be low ...", which does not parse.

Real builds of the sample structures; the real CLI, run in this process (cli_in_process)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from featurecache import open_store
from featurecache.store.index import rebuild_index
from tests.conftest import SAMPLES, CliRun, build_store, cli_in_process

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str | Path, cwd: Path = REPO) -> CliRun:
    """``featurecache ARGS`` (train on a local store, info, plan): the real CLI, in this process."""
    return cli_in_process(*map(str, args), cwd=cwd)


def _one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pdb = tmp_path_factory.mktemp("pdb")
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    return pdb


def test_train_of_one_step_says_one_step(inputs: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    assert build_store(store, inputs, workers=1).n_failed == 0
    r = _cli("train", "--store", store, "--device", "cpu", "--crop", "32", "--steps", "1",
             "--log", tmp_path / "log.json", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1].startswith("trained 1 step; "), r.stdout


def test_info_on_one_entry_after_the_index_says_is(inputs: Path, tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    shutil.copytree(inputs, pdb)
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, part_size=1).n_failed == 0
    old_index = tmp_path / "old-index"
    shutil.copytree(store / "index", old_index)
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    assert build_store(store, pdb, workers=1, part_size=1).n_failed == 0
    shutil.rmtree(store / "index")
    shutil.copytree(old_index, store / "index")  # the index as before the second build: 2q2k not in it
    r = _cli("info", store)
    assert r.returncode == 0, r.stderr
    said = _one_line(r.stderr)
    assert "1 entry in 1 structure part written after the index was last rebuilt is not in it" in said, said


def test_plan_on_an_unfinished_first_build_says_it_in_sentences(inputs: Path, tmp_path: Path) -> None:
    store = tmp_path / "s"
    assert build_store(store, inputs, workers=1).n_failed == 0
    rebuild_index(store, finished=False)  # as a build does until its first build finishes
    assert not open_store(store).finished
    r = _cli("plan", store, "--no-write-index")
    assert r.returncode == 0, r.stderr[-3000:]
    said = _one_line(r.stderr)
    assert (
        f"warning: {store}: its first build has not finished: the index lists only the entries written so "
        "far, so the plan's counts are partial and its memory predictions may be low, because entries, "
        "MSAs or conformers written later are missing from it. Plan again once the build has finished "
        "(if no build is running, run the same `featurecache build` again to finish it)"
    ) in said, said
    written = _cli("plan", store)
    assert written.returncode == 0, written.stderr[-3000:]
    assert (
        "written later are missing from it (index/plan.arrow records this: fitting_ids and `report` warn). "
        "Plan again once the build has finished"
    ) in _one_line(written.stderr), written.stderr
