"""A real process caught holding a store's lock (tests/store): started, watched until the lock's
record names it, then stopped with SIGSTOP while it still holds the lock, and let go on exit."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from featurecache.store.root import lock_holder
from tests.conftest import REPO


@contextmanager
def caught_holding(argv: list[str], store: Path) -> Iterator[int]:
    """``argv`` (a program that takes the store's lock and lets it go) in another process, stopped
    while it holds the lock (tried again should one end before it is caught: it may have let go
    just before the signal); yields its pid. The program then goes on and must end with status 0."""
    for _attempt in range(20):
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        caught = False
        while proc.poll() is None:
            holder = lock_holder(store)
            if holder is not None and holder.startswith(f"pid {proc.pid}: "):
                os.kill(proc.pid, signal.SIGSTOP)
                caught = (lock_holder(store) or "").startswith(f"pid {proc.pid}: ")
                if not caught:
                    os.kill(proc.pid, signal.SIGCONT)
                break
        if not caught:
            proc.communicate(timeout=120)
            assert proc.returncode == 0, proc.stderr
            continue
        try:
            yield proc.pid
        finally:
            os.kill(proc.pid, signal.SIGCONT)
            _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        return
    pytest.fail(f"{argv} was not caught holding the lock in 20 tries")
