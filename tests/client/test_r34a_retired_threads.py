"""The ready-first thread pool forgets the threads it retired at a sample deadline once they have
ended (review R34a s48 #2): it kept every one until ``close()``, one per deadline skip, for the life
of the dataset (an infinite run, persistent workers). Those still running stay: ``close()`` joins
them and ``quiesce()`` waits for their sample."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from featurecache.client import FeatureDataset
from featurecache.client.loader import _ThreadPool
from featurecache.client.sampler import SampleKey


def _wait_for(what: str, cond: object, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < end, what
        time.sleep(0.01)


def test_pool_forgets_the_retired_threads_that_ended() -> None:
    release = threading.Event()

    def task(item: str) -> str:
        if item == "hang":
            release.wait(30)
        return item

    pool = _ThreadPool(task, 2)
    try:
        pool.submit(0, "hang")  # retired below while it still runs
        wid = pool._worker_of(0)
        assert wid is not None
        hung = pool._threads[wid]
        _wait_for("the hung sample starts", lambda: pool._running == 1)
        pool.abandon(0)
        for tid in range(1, 41):  # 40 deadline skips of samples that end at once
            pool.submit(tid, "quick")
            pool.abandon(tid)
            _wait_for("a retired thread ends", lambda: sum(t.is_alive() for t in pool._threads.values()) <= 3)
        assert pool.retired == 41
        # 2 workers, the thread still running its hung sample and at most the one retired last
        assert len(pool._threads) <= 4, len(pool._threads)  # before: 43
        assert hung.is_alive() and hung in pool._threads.values()  # still running: kept
        assert pool.quiesce(0.05) is False  # ... and its sample is waited for
        pool.resume()
    finally:
        release.set()
        pool.close(5.0)
    assert not hung.is_alive()


def test_dataset_deadline_skips_keep_no_dead_threads(sample_store: Path) -> None:
    """The reviewer's run: every 4th sample outlasts the deadline; the pool's threads stay bounded."""

    def slow(key: SampleKey) -> None:
        if key.position % 4 == 0:
            time.sleep(0.3)

    ds = FeatureDataset(sample_store, crop_size=32, infinite=True, workers=2, window=4, deadline_s=0.1,
                        max_msa_rows=8, sample_hook=slow, max_consecutive_skips=None)  # fmt: skip
    try:
        it = iter(ds)
        for _ in range(40):
            next(it)
        assert ds.stats.deadline_skips >= 8
        pool = next(iter(ds._executors.values()))._pool
        assert pool is not None
        # the two workers and the retired threads still running their 0.3 s sample (a few at most);
        # before: one more per deadline skip
        assert len(pool._threads) <= 2 + 4, (len(pool._threads), ds.stats.deadline_skips)
    finally:
        ds.close()
