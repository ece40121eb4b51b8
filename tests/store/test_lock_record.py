"""The store lock's holder record and its refusals (review RF2 s25 #3-#5).

- A holder on another host or in a container (its own UTS and pid namespaces) is named by its own
  record: its pid there, its host and its command. Before, the refused command looked the pid up in
  its own /proc and named whatever process had that pid here (pid 1: this machine's init).
- A lock check (``lock_holder``: a shared lock taken and dropped at once, as ``verify``, ``prune
  --dry-run`` and the reader do) no longer makes a command taking the lock fail: the attempt
  retries for ``LOCK_RETRY_S``. Before, ~15 % of attempts beside a checking loop were refused
  with "another build is writing ... (a process that has ended since)".
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from featurecache.errors import StoreError
from featurecache.store.root import BuildLock, lock_holder
from tests.conftest import REPO

HOLD = (
    "import sys, time; from pathlib import Path; from featurecache.store.root import BuildLock\n"
    "with BuildLock(Path(sys.argv[1])):\n"
    "    print('held', flush=True); time.sleep(120)\n"
)


def test_a_holder_in_another_host_and_pid_namespace_is_named_by_its_own_record(tmp_path: Path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    probe = subprocess.run(
        ["unshare", "--uts", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"no private UTS/pid namespaces here: {probe.stderr.decode().strip()}")
    store = tmp_path / "store"
    script = f'hostname fc-box && exec {sys.executable} -c "$0" {store}'
    holder = subprocess.Popen(["unshare", "--uts", "--pid", "--fork", "--mount-proc", "sh", "-c", script, HOLD], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        named = lock_holder(store)
        assert named is not None
        # its own pid there (1 or 2 in a fresh pid namespace), its host, its own command line
        assert named.startswith("pid ") and " on fc-box: " in named, named
        inner_pid = named.split()[1]
        assert inner_pid in ("1", "2"), named
        assert "BuildLock" in named, named  # the holder's `python -c` program, not this machine's pid 1
        local = Path(f"/proc/{inner_pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        assert local not in named, (local, named)
        with pytest.raises(StoreError) as refused, BuildLock(store):
            pass
        assert "on fc-box: " in str(refused.value)
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_lock_checks_beside_it_do_not_make_taking_the_lock_fail(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    checker = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from featurecache.store.root import lock_holder\n"
         "end = time.monotonic() + float(sys.argv[2])\n"
         "print('checking', flush=True)\n"
         "while time.monotonic() < end:\n"
         "    lock_holder(Path(sys.argv[1]))\n",
         str(store), "8"],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert checker.stdout is not None and checker.stdout.readline().strip() == "checking"
        refused: list[str] = []
        taken = 0
        end = time.monotonic() + 4
        while time.monotonic() < end and checker.poll() is None:
            try:
                with BuildLock(store):
                    taken += 1
            except StoreError as exc:
                refused.append(str(exc))
        assert taken > 20, taken  # the loop really ran beside the checks
        assert refused == [], f"{len(refused)} of {taken + len(refused)} refused: {refused[:2]}"
    finally:
        checker.kill()
        checker.wait(timeout=30)
