"""Hard-linked copies of a store (``cp -al store snap``) each have a lock of their own (review R36b
s49 #3).

``cp -al`` links every file, ``.build.lock`` included: the two stores shared one lock file, so a
build (a prune, a repair) in one locked the other out ("another build is writing …", exit 3, for
``verify``, ``prune``, ``verify --repair`` and ``build`` of the other copy), and its record was
written into both. A command taking the lock now puts a lock file of its store's own in place of
one with other links, and a holder of the shared file whose record names the other copy's
directory holds no lock on this one.

Real stores, real processes: the lock is held by a ``BuildLock`` in another process (as
tests/store/test_lock_record.py holds it); verify and prune run as ``featurecache`` processes and
the build in process, on the other copy.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from featurecache.errors import StoreError
from featurecache.store.root import LOCK_FILE, BuildLock, lock_holder
from tests.conftest import REPO, SAMPLES, build_store

HOLD = (
    "import sys, time; from pathlib import Path; from featurecache.store.root import BuildLock\n"
    "with BuildLock(Path(sys.argv[1])):\n"
    "    print('held', flush=True); time.sleep(120)\n"
)


@contextmanager
def held(store: Path) -> Iterator[int]:
    """``store``'s lock held by another process (its pid) until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(store)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


@pytest.fixture
def linked(two_entry_copy: Path) -> tuple[Path, Path]:
    """(a store, its hard-linked copy: `cp -al`); their lock file is one file of two links."""
    snap = two_entry_copy.with_name("snap")
    subprocess.run(["cp", "-al", str(two_entry_copy), str(snap)], check=True)
    lock = two_entry_copy / LOCK_FILE
    assert lock.stat().st_nlink == 2 and lock.stat().st_ino == (snap / LOCK_FILE).stat().st_ino
    return two_entry_copy, snap


def test_a_lock_held_in_one_copy_leaves_the_other_free(linked: tuple[Path, Path]) -> None:
    store, snap = linked
    with held(store) as pid:
        assert lock_holder(store) is not None and f"pid {pid}" in lock_holder(store)  # type: ignore[operator]
        assert lock_holder(snap) is None
        # the holder's record went into the store's own file, not into the copy's
        assert (store / LOCK_FILE).stat().st_ino != (snap / LOCK_FILE).stat().st_ino
        assert str(pid) not in (snap / LOCK_FILE).read_text()
        for args in (["verify", str(snap), "--no-progress"], ["prune", str(snap)]):
            run = _cli(*args)
            assert run.returncode == 0, (args, run.returncode, run.stderr[-2000:])
        with BuildLock(snap):  # what a build, a prune and a repair take first
            pass
        with pytest.raises(StoreError, match="another"), BuildLock(store):
            pass


def test_a_copy_linked_while_its_store_is_locked_is_free(two_entry_copy: Path, two_entry_store: Path) -> None:
    store = two_entry_copy
    snap = store.with_name("snap")
    with held(store) as pid:
        subprocess.run(["cp", "-al", str(store), str(snap)], check=True)  # the held file itself linked
        assert (store / LOCK_FILE).stat().st_nlink == 2
        assert lock_holder(snap) is None
        assert lock_holder(store) is not None and f"pid {pid}" in lock_holder(store)  # type: ignore[operator]
        inputs = two_entry_store.parent / "two_entry_inputs"
        summary = build_store(snap, inputs / "pdb", workers=1, msa_dir=inputs / "msa", ccd=SAMPLES / "ccd",
                              part_size=1)  # fmt: skip
        assert summary.n_failed == 0
        with pytest.raises(StoreError, match="another"), BuildLock(store):  # the store itself: still held
            pass
    assert lock_holder(snap) is None and lock_holder(store) is None
