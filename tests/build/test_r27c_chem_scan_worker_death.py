"""A worker that dies on a chem scan task (KilledWorker) does not end the build (review R27c s45
#4, the chem scan's gap: ``client.gather`` of the scan futures raised it as a raw traceback,
exit 1, and the store stayed "first build has not finished"). The part's scan is this run's chem
failure, the part is not recorded as scanned, and the next build scans it again. A real external
cluster whose worker's preload kills its process on the scan of one structure part
(tests/build/test_r27c_msa_worker_death.poisoned_cluster)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from featurecache.build.run import run_build
from featurecache.store.index import is_unfinished, read_table
from tests.build.test_r27c_msa_worker_death import poisoned_cluster
from tests.conftest import SAMPLES


def test_a_chem_scan_that_kills_its_worker_is_scanned_again_by_the_next_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    store = tmp_path / "store"
    with poisoned_cluster(tmp_path, monkeypatch, "chem_stage", "scan_part_task", "s-000001") as (
        address,
        flag,
    ):
        with caplog.at_level(logging.WARNING):
            summary = run_build(pdb_dir=pdb, out=store, scheduler=address, part_size=1, progress=False)

        assert "chem scan of structure part s-000001 failed (KilledWorker" in caplog.text
        # the part queued on the same worker may die with it (Dask sends a worker more than it runs)
        crashed = [f for f in summary.failures if f["stage"] == "chem"]
        assert "structure part s-000001" in [f["path"] for f in crashed]
        assert all(f["key"] == "" and "KilledWorker" in f["message"] for f in crashed), crashed
        assert summary.stages["chem"]["structure parts scanned"] == 2
        entries = read_table(store / "index" / "entries.arrow")
        assert sorted(entries.column("id").to_pylist()) == ["1psm", "2q2k"]
        assert not is_unfinished(entries)

        flag.unlink()
        again = run_build(pdb_dir=pdb, out=store, scheduler=address, part_size=1, progress=False)
    assert again.stages["chem"]["structure parts scanned"] == len(crashed)  # those the worker died on
    assert [f for f in again.failures if f["stage"] == "chem"] == []
