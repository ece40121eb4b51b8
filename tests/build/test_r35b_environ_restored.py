"""Review R35b s49 #4: ``run_build()`` leaves the caller's ``os.environ`` as it was.

Dask's Nanny sets its pre-spawn variables in the parent before it starts a worker
(``os.environ.update(pre_spawn_env)``: OMP/MKL/OPENBLAS_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_,
PYTHONHASHSEED=6640) and distributed marks the parent (``__DASK_PARENT_PID``); none of it was undone,
so every process the program started after a build ran with one BLAS thread and a fixed hash seed.
Now the build puts back each variable its cluster set, where it still holds the build's value (a
change the program made meanwhile stays), after a build that finished and one stopped by an error.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from featurecache.build import run
from tests.conftest import SAMPLES

#: what Dask's Nanny (its pre-spawn environment) and distributed's proctitle set in the parent
DASK_SETS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_",
             "PYTHONHASHSEED", "__DASK_PARENT_PID")  # fmt: skip


def _pdb(tmp_path: Path) -> Path:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    return pdb


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of Dask's variables set (an earlier cluster of this test session set them), but a hash
    seed of the program's own (Dask's Nanny replaces "0" with its own)."""
    for key in DASK_SETS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PYTHONHASHSEED", "0")


def test_a_build_leaves_the_environment_as_it_was(tmp_path: Path, clean_environ: None) -> None:
    before = dict(os.environ)
    summary = run.run_build(pdb_dir=_pdb(tmp_path), out=tmp_path / "store", ccd=None, workers=1, progress=False,
                            dashboard=False)  # fmt: skip
    assert summary.n_built == 1 and summary.n_failed == 0, summary.failures
    assert dict(os.environ) == before


def test_a_build_stopped_by_an_error_leaves_it_too(
    tmp_path: Path, clean_environ: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(client: Any, *args: Any, **kwargs: Any) -> None:  # the cluster is up, its workers started
        assert os.environ.get("OMP_NUM_THREADS") == "1"  # Dask's Nanny set it meanwhile
        os.environ["FEATURECACHE_TEST_PROGRAM_VAR"] = "x"  # the program's own, meanwhile: kept
        os.environ["MKL_NUM_THREADS"] = "3"  # changed by the program since the build set it: kept
        raise RuntimeError("stopped from inside")

    monkeypatch.setattr(run, "_check_worker_versions", fail)
    monkeypatch.delenv("FEATURECACHE_TEST_PROGRAM_VAR", raising=False)
    before = dict(os.environ)
    with pytest.raises(RuntimeError, match="stopped from inside"):
        run.run_build(pdb_dir=_pdb(tmp_path), out=tmp_path / "store", ccd=None, workers=1, progress=False,
                      dashboard=False)  # fmt: skip
    assert dict(os.environ) == {**before, "FEATURECACHE_TEST_PROGRAM_VAR": "x", "MKL_NUM_THREADS": "3"}
