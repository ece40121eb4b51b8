"""A chem scan whose worker dies is this run's failure in the exit status too (review R27c s45 #4
and the standards: a build that recorded a failure exits 1). Before, ``_run_extra_stages`` added
the scan's failure row (stage ``chem``, key ``""``) to the summary's failures but not to
``n_failed``: the build said "failed 0" and exited 0 although a structure part was left unscanned.

The real external cluster of tests/build/test_r27c_chem_scan_worker_death.py (its worker's preload
kills its process on the scan of one structure part) and the real ``featurecache build`` command (run
in this process: tests/conftest.cli_in_process)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.build.test_r27c_msa_worker_death import poisoned_cluster
from tests.conftest import SAMPLES, CliRun, cli_in_process


def _build(pdb: Path, out: Path, address: str, cwd: Path) -> CliRun:
    """``featurecache build`` on the external cluster: the CLI in this process (tests/conftest.py; a
    build on an external cluster leaves no thread or process running), which saves a Python start."""
    return cli_in_process("build", "--pdb-dir", str(pdb), "--out", str(out), "--scheduler", address,
                          "--part-size", "1", "--no-progress", cwd=cwd, env={"COLUMNS": "400"})  # fmt: skip


def test_a_chem_scan_that_kills_its_worker_makes_the_build_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
        done = _build(pdb, store, address, tmp_path)
        flag.unlink()
        again = _build(pdb, store, address, tmp_path)
    out = " ".join(done.stdout.split())
    assert done.returncode == 1, (done.returncode, out[-3000:], done.stderr[-3000:])
    assert "failed at chem" in out, out[-3000:]
    assert "chem scan of structure part s-000001 failed (KilledWorker" in " ".join(done.stderr.split())
    # the next build scans the part again: nothing failed, exit 0
    assert again.returncode == 0, (" ".join(again.stdout.split())[-3000:], again.stderr[-3000:])
