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
    """The reviewer's run: every 4th sample outlasts the deadline; the retired threads that ended
    are forgotten, and only they.

    Only the hooked samples overrun, and they wait for the test rather than for a clock (review R42a
    s52 #2: a 0.1 s deadline on real samples abandoned ordinary ones too under load, one more retired
    thread each, and the bound on the thread count was a guess of how many were still running)."""
    first, then = threading.Event(), threading.Event()
    phase = [first]

    def slow(key: SampleKey) -> None:
        if key.position % 4 == 0:
            phase[0].wait(30)  # outlasts the deadline: held until the test lets it go

    ds = FeatureDataset(sample_store, crop_size=32, infinite=True, workers=2, window=4, deadline_s=0.5,
                        max_msa_rows=8, sample_hook=slow, max_consecutive_skips=None)  # fmt: skip
    try:
        it = iter(ds)
        for _ in range(32):
            next(it)
        assert ds.stats.deadline_skips >= 8
        pool = next(iter(ds._executors.values()))._pool
        assert pool is not None
        # the retired threads (not one of the pool's workers): those of the hooked samples still run
        retired = [t for wid, t in pool._threads.items() if wid not in pool._busy]
        assert sum(t.is_alive() for t in retired) >= 8, (len(retired), pool.retired)
        phase[0] = then
        first.set()  # their samples end, and so do they
        _wait_for("the retired threads end", lambda: not any(t.is_alive() for t in retired), timeout=30)
        skips = pool.retired
        for _ in range(40):  # until one more deadline skip starts a thread (the pool tidies up then)
            if pool.retired > skips:
                break
            next(it)
        assert pool.retired > skips
        # those that ended are forgotten (before: every one kept until close(), one per deadline skip)
        left = [t for t in retired if t in pool._threads.values()]
        assert not left, (len(left), len(pool._threads))
    finally:
        first.set()
        then.set()
        ds.close()
