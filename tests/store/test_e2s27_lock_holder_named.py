"""A command refused by a store's lock names what holds it by what that is. The holder's word came
from its command line only: ``featurecache prune`` / ``verify`` were named, but any other command
was called a "build" — a training script or notebook that called the library's ``prune_store`` or
``repair_store`` ("another build is writing STORE"), and a holder of an older featurecache whose
command was not featurecache's. The lock's record now carries what its holder is doing (``build``,
``prune``, ``verify --repair``: ``BuildLock(root, what)``), and a holder that says nothing of it
is "another process", its command beside it.

A real store (1A8O and 7DDO, a part each); the holders are real processes (a python program
calling the library, caught holding the lock and stopped with SIGSTOP; a program holding the
lock file's flock with an older featurecache's record); the refused command is the real CLI, run in
this process."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES, CliRun, build_store, cli_in_process
from tests.locks import caught_holding

LIBRARY_CALLS = {
    "prune": "import sys; from featurecache.store.prune import prune_store; prune_store(sys.argv[1])",
    "verify --repair": "import sys; from featurecache.store.verify import repair_store; repair_store(sys.argv[1])",
}


def _cli(*args: str | Path) -> CliRun:
    """``featurecache ARGS`` (prune, verify): the real CLI, in this process (tests/conftest.py); the
    holders are other processes, so this process's attempts are refused alike."""
    return cli_in_process(*map(str, args), cwd=REPO)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    for name in ("1A8O.pdb", "7DDO.pdb"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    build_store(store, pdb, workers=1, part_size=1)
    return store


@pytest.mark.timeout(600)
@pytest.mark.parametrize("what", sorted(LIBRARY_CALLS))
def test_a_program_calling_the_library_is_named_by_what_it_does(store: Path, what: str) -> None:
    program = [sys.executable, "-c", LIBRARY_CALLS[what], str(store)]
    with caught_holding(program, store) as pid:
        refused = _cli("prune", store)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert f"another {what} is writing {store} (pid {pid}: " in refused.stderr, refused.stderr
        assert "another build" not in refused.stderr, refused.stderr
        verify = _cli("verify", store, "--no-progress")
        assert verify.returncode == 3, verify.stdout + verify.stderr
        assert f"a {what} is writing {store} (pid {pid}: " in verify.stderr, verify.stderr


HOLD_WITH_AN_OLDER_RECORD = """
import fcntl, os, sys
f = open(sys.argv[1], "a+")
fcntl.flock(f, fcntl.LOCK_EX)
os.ftruncate(f.fileno(), 0)
os.pwrite(f.fileno(), f"{os.getpid()}\\n{sys.argv[2]}\\npython train.py --epochs 3\\n".encode(), 0)
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_holder_whose_record_does_not_say_is_another_process(store: Path) -> None:
    """A record of an older featurecache (pid, host, command: no purpose) whose command is not a
    featurecache command: the program could have been a build, a prune or a repair."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_WITH_AN_OLDER_RECORD, str(store / ".build.lock"), socket.gethostname()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        refused = _cli("prune", store)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        said = f"another process is writing {store} (pid {holder.pid}: python train.py --epochs 3; lock "
        assert said in refused.stderr, refused.stderr
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
