"""The store's lock held by a ``featurecache prune``: what a command refused meanwhile says names
the prune that holds it (its pid and command line), not "another build". Before, every refusal by
the lock said "another build is writing STORE (lock ...)" whatever held it; and the refused
command's own open of the lock file emptied it, so the holder's pid was lost to every later look
(``lock_holder``: "its pid is not recorded yet").

A real store (1A8O and 7DDO, a part each) and a real CLI ``featurecache prune`` in a second process,
stopped (SIGSTOP) while it holds the lock and let go (SIGCONT) at the end.
"""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from featurecache.errors import StoreError
from featurecache.store.root import BuildLock, lock_holder
from services.lookup.server import free_port
from tests.conftest import REPO, SAMPLES, CliRun, build_store, cli_in_process
from tests.locks import caught_holding


def _cli(*args: str) -> CliRun:
    """``featurecache ARGS`` (prune, verify, build): the real CLI, in this process (tests/conftest.py;
    a build refused by the lock starts no cluster: one that did would leave its worker processes to
    the check there); the lock is the stopped prune's, another process's, so this process's
    attempts are refused alike."""
    return cli_in_process(*args, cwd=REPO)


def _prune_holding_the_lock(store: Path) -> AbstractContextManager[int]:
    """A real ``featurecache prune STORE`` in another process, stopped while it holds the lock
    (tests/locks.py); yields its pid. The prune itself goes on and ends well once let go."""
    return caught_holding([sys.executable, "-m", "featurecache.cli", "prune", str(store)], store)


@pytest.mark.timeout(600)
def test_a_refusal_names_the_prune_that_holds_the_lock(tmp_path: Path) -> None:
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    for name in ("1A8O.pdb", "7DDO.pdb"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    build_store(store, pdb, workers=1, part_size=1)
    with _prune_holding_the_lock(store) as pid:
        held_by = f"pid {pid}: featurecache prune {store}"
        assert lock_holder(store) == held_by

        again = _cli("prune", str(store))
        assert again.returncode == 3, again.stdout + again.stderr
        assert f"another prune is writing {store} ({held_by}; lock " in again.stderr, again.stderr
        assert "another build" not in again.stderr

        build = _cli("build", "--pdb-dir", str(pdb), "--out", str(store), "--workers", "1", "--no-progress")
        assert build.returncode == 3, build.stdout + build.stderr
        assert f"another prune is writing {store} ({held_by}; lock " in build.stderr, build.stderr
        # refused before it starts or reaches a cluster: given a scheduler address where nothing
        # listens, the build still says the lock's refusal (it did not try the scheduler first)
        nowhere = _cli("build", "--pdb-dir", str(pdb), "--out", str(store), "--scheduler",
                       f"tcp://127.0.0.1:{free_port()}", "--no-progress")  # fmt: skip
        assert nowhere.returncode == 3, nowhere.stdout + nowhere.stderr
        assert f"another prune is writing {store} ({held_by}; lock " in nowhere.stderr, nowhere.stderr
        assert "scheduler" not in nowhere.stderr, nowhere.stderr

        repair = _cli("verify", str(store), "--repair")
        assert repair.returncode == 3, repair.stdout + repair.stderr
        assert f"a prune is writing {store} ({held_by} holds its lock)" in repair.stderr, repair.stderr

        with pytest.raises(StoreError) as refused, BuildLock(store):
            pass
        assert f"another prune is writing {store} ({held_by}; lock " in str(refused.value)

        # none of the refused attempts erased the holder's record
        assert lock_holder(store) == held_by
    assert lock_holder(store) is None
    with BuildLock(store):
        assert lock_holder(store) is not None and lock_holder(store).startswith(f"pid {os.getpid()}")
