"""A path option or argument that begins with a literal ``~`` (quoted, so no shell expanded it) and
does not exist is refused in one line, exit 2, nothing made; a directory of that name that exists is
used; the paused-worker warning of an embedded cluster of one worker does not advise fewer
--workers, and names DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE when that variable set the fraction
(review R38a s50 #9: ``--out '~/fcstore'`` made a directory named ``~`` in the working directory)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, cli_in_process


def test_an_unexpanded_home_is_refused(tmp_path: Path, two_entry_store: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    r = cli_in_process("build", "--pdb-dir", str(pdb), "--out", "~/fcstore", "--workers", "1", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --out ~/fcstore begins with '~'"), r.stderr
    assert "./~/fcstore" in lines[0]
    assert not (tmp_path / "~").exists()  # nothing made

    r = cli_in_process("info", "~nosuchuser/s", cwd=tmp_path)
    assert r.returncode == 2 and "STORE ~nosuchuser/s begins with '~'" in r.stderr, r.stderr

    # a directory named so that exists is the user's own: used
    (tmp_path / "~").mkdir()
    shutil.copytree(two_entry_store, tmp_path / "~" / "s")
    r = cli_in_process("info", "~/s", cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_the_paused_worker_remedy(monkeypatch: pytest.MonkeyPatch) -> None:
    from featurecache.build.run import PAUSE_ENV, _pause_remedy

    monkeypatch.delenv(PAUSE_ENV, raising=False)
    assert _pause_remedy(None, 1) == "raise distributed.worker.memory.pause"
    assert _pause_remedy(None, 2).startswith("run the build with fewer --workers")
    assert _pause_remedy("tcp://h:8786", 1).startswith("restart it with a larger --memory-limit")
    monkeypatch.setenv(PAUSE_ENV, "0.01")
    assert _pause_remedy(None, 1) == f"raise distributed.worker.memory.pause (set to 0.01 by {PAUSE_ENV})"
