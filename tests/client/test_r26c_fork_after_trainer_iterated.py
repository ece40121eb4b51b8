"""Review R26c (session 44) #1: a dataset the trainer iterated itself, then handed to forked
DataLoader workers.

``next(iter(ds))`` leaves the trainer's sample threads computing the samples prefetched after it.
One of them was importing ``scipy.spatial`` (crop.py imported it lazily, at a sample's first
interface search) when the DataLoader forked; the forked workers inherited that module's import
lock held by a thread they do not have, and every sample thread of theirs waited on it for good
(with ``deadline_s=None`` a hang; otherwise every sample abandoned at its deadline).

Each case runs in a fresh interpreter: the test process has long imported scipy (the store's
build does), which hides the lazy import.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from featurecache.client.loader import ReadyFirst, _quiesce_before_fork, _resume_after_fork, _ThreadPool

_RUN = """
import sys
from torch.utils.data import DataLoader
from featurecache.client import FeatureDataset

store, how = sys.argv[1], sys.argv[2]
ds = FeatureDataset(store, crop_size=64, seed=int(sys.argv[3]), deadline_s=None, workers=4)
it = iter(ds)
first = next(it)["position"]                 # the trainer looks at one sample first
if how == "loader":
    ld = ds.loader(batch_size=2, num_workers=2, multiprocessing_context="fork")
else:
    ld = DataLoader(ds, batch_size=2, num_workers=2, multiprocessing_context="fork")
got = sorted(p for b in ld for p in b["position"].tolist())
print("first", first, "len", len(ds), "got", *got)
"""


@pytest.mark.parametrize("how", ["loader", "plain"])
@pytest.mark.parametrize("seed", [0, 1])
def test_forked_workers_after_the_trainer_iterated_deliver_every_sample(
    client_store: Path, how: str, seed: int
) -> None:
    try:
        done = subprocess.run([sys.executable, "-c", _RUN, str(client_store), how, str(seed)],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"forked DataLoader workers hung (60 s): {str(exc.stderr)[-2000:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    words = done.stdout.split()
    first, n, got = int(words[1]), int(words[3]), [int(w) for w in words[5:]]
    # the trainer received position `first`: the pass delivers the rest of the epoch, each once
    assert got == sorted(set(range(n)) - {first}), done.stdout


def _sleep_then(seconds: float) -> Any:
    def run(item: Any) -> Any:
        time.sleep(seconds)
        return item

    return run


def test_close_joins_the_sample_threads() -> None:
    """``close()`` only posted a stop to each thread: threads still computing a sample ran on
    after it (so closing before a fork did not help)."""
    rf = ReadyFirst(_sleep_then(0.3), workers=3, window=2)
    it = rf.run(enumerate(range(20)))
    next(it)  # the other threads are mid-sample now
    threads = list(rf._pool._threads.values())  # type: ignore[union-attr]
    assert any(t.is_alive() for t in threads)
    it.close()
    rf.close()
    assert not any(t.is_alive() for t in threads)


def test_a_fork_waits_for_the_running_samples_and_holds_the_next() -> None:
    """What the fork waits for is the running sample's end, not an amount of time (review R42a s52
    #5: a 0.05 s sleep stood for "running" and the check was the time quiesce took)."""
    started: list[str] = []
    finished = threading.Event()

    def run(item: str) -> str:
        started.append(item)
        time.sleep(0.3)
        finished.set()
        return item

    pool = _ThreadPool(run, 2)
    try:
        pool.submit(0, "a")
        end = time.monotonic() + 30
        while pool._running != 1:  # running (a task not taken yet is held at the gate instead)
            assert time.monotonic() < end, "the sample did not start"
            time.sleep(0.01)
        _quiesce_before_fork()
        assert finished.is_set() and pool._running == 0  # the fork came after the running sample's end
        pool.submit(1, "b")  # held until the fork is done
        time.sleep(0.1)
        assert started == ["a"] and pool._running == 0
        _resume_after_fork()
        got = [tid for _ in range(2) for tid, _ok, _v in pool.get(5)]
        assert sorted(got) == [0, 1]
    finally:
        _resume_after_fork()
        pool.close(join_s=5)
