"""A worker that dies on an MSA part (KilledWorker) is that MSA's failure in this run, not the
build's end (review R27c s45 #4): before, ``_write`` called ``fut.result()`` bare, the build ended
in a raw traceback (exit 1) and the store stayed "first build has not finished" on every run.

A real external cluster: ``dask scheduler`` (``allowed-failures`` 0: the first death of a task's
worker is its KilledWorker) and a nanny-managed ``dask worker`` whose preload replaces
``build_msa_part`` (tasks name it by reference) with one that kills its worker process
(``os._exit``) while a flag file exists and the part holds an MSA of a poisoned file. The part of
several MSAs is split and its MSAs resubmitted one by one; the poisoned MSA alone kills its worker
again and becomes a failure row (stage ``msa``, key ``""``); the other MSAs are written and the
entries publish. The next build, the flag gone, builds that MSA and the failure row goes."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from featurecache.build.run import run_build
from featurecache.store.index import is_unfinished, read_table
from tests.build.test_cluster import DASK, _start_scheduler, _stop, _wait_for_workers
from tests.conftest import REPO, SAMPLES

#: a worker preload: while the flag file exists, a task of ``module.function`` whose arguments
#: name the poison kills its worker process, as the OOM killer or a segfault would
PRELOAD = """
import os
from featurecache.build import {module} as _m

# the original, also when the module is imported again (a worker restarted by its nanny)
_real = getattr(_m, "_r27c_original", _m.{function})
_m._r27c_original = _real


def {function}(*args, **kwargs):
    if os.path.exists({flag!r}) and {poison!r} in repr(args):
        os._exit(1)
    return _real(*args, **kwargs)


_m.{function} = {function}
"""


@contextmanager
def poisoned_cluster(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, module: str, function: str, poison: str
) -> Iterator[tuple[str, Path]]:
    """(scheduler address, flag file): a scheduler whose tasks fail at their worker's first death,
    and one nanny-managed worker that dies on a ``module.function`` task naming ``poison`` while
    the flag file exists."""
    flag = tmp / "poison-on"
    flag.touch()
    preload = tmp / "poison_preload.py"
    preload.write_text(PRELOAD.format(module=module, function=function, flag=str(flag), poison=poison))
    monkeypatch.setenv("DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES", "0")
    # one task at a time on the worker: none queued there dies with the poisoned one
    monkeypatch.setenv("DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION", "1.0")
    address, sched = _start_scheduler(tmp)
    procs = [sched]
    try:
        cwd = tmp / "worker-cwd"
        cwd.mkdir()
        procs.append(subprocess.Popen(
            [DASK, "worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
             "--memory-limit", "4GiB", "--preload", str(preload)],
            stdout=(cwd / "worker.log").open("wb"), stderr=subprocess.STDOUT, cwd=cwd,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        ))  # fmt: skip
        _wait_for_workers(address, 1)
        yield address, flag
    finally:
        _stop(procs)


def _failures(store: Path) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = read_table(store / "index" / "failures.arrow").to_pylist()
    return rows


def test_an_msa_that_kills_its_worker_is_a_failure_and_the_build_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    msas = SAMPLES / "msas" / "openfold"
    store = tmp_path / "store"
    with poisoned_cluster(tmp_path, monkeypatch, "msa_stage", "build_msa_part", "1psm_A/") as (address, flag):
        with caplog.at_level(logging.WARNING):
            summary = run_build(pdb_dir=pdb, out=store, msa_dir=msas, scheduler=address, progress=False)

        assert "MSAs one by one" in caplog.text  # the part of several MSAs was split
        msa = summary.stages["msa"]
        assert msa["MSAs written (from files / single sequence)"] == "1 / 1"  # 2q2k A's, and the 4th chain's
        assert msa["MSA files failed"] == 1
        (crash,) = [f for f in summary.failures if f["stage"] == "msa"]
        assert crash["path"].startswith("1psm_A/") and crash["key"] == "" and crash["entry_id"] == "1psm"
        assert "KilledWorker" in crash["message"] and "memory limit" in crash["message"], crash["message"]
        assert "1psm/A" in crash["message"], crash["message"]
        entries = read_table(store / "index" / "entries.arrow")
        assert sorted(entries.column("id").to_pylist()) == ["1psm", "2q2k"]
        assert not is_unfinished(entries)  # the first build finished: its entries are served
        assert [f["key"] for f in _failures(store) if f["stage"] == "msa"] == [""]

        flag.unlink()  # the worker no longer dies: the next build builds the MSA and drops the failure
        again = run_build(pdb_dir=pdb, out=store, msa_dir=msas, scheduler=address, progress=False)
    assert again.stages["msa"]["MSAs written (from files / single sequence)"] == "1 / 0"
    assert again.stages["msa"]["polymer chains with an MSA from files"] == "3 of 4"
    assert [f for f in again.failures if f["stage"] == "msa"] == []
    assert [f for f in _failures(store) if f["stage"] == "msa"] == []
