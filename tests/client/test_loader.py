"""ReadyFirst on real thread and process pools: window, deadlines, failures; resume bookkeeping."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from featurecache.client import loader
from featurecache.client.loader import (
    ConsumedPositions,
    Done,
    LoaderStats,
    ReadyFirst,
    Skipped,
    SkipRecord,
    WorkersCannotStart,
)

RELEASE = threading.Event()


@pytest.fixture(autouse=True)
def _release_unset() -> Iterator[None]:
    """Each test starts with RELEASE unset, whichever test set it before (review R42a s52 #7: the
    hung-thread test set it, so a reorder-window test run after it had no slow item), and sets it when
    it ends, so that no thread of it still waits on RELEASE for its seconds."""
    RELEASE.clear()
    yield
    RELEASE.set()


def _job(item: tuple[str, Any]) -> int:
    """('ok', _) → pid; ('slow', s) → wait s seconds (or until RELEASE); ('raise', _); ('exit', _);
    ('until', path) → wait until ``path`` exists (at most 60 s); ('echo', n) → n."""
    kind, seconds = item
    if kind == "until":
        end = time.monotonic() + 60.0
        while not os.path.exists(seconds) and time.monotonic() < end:
            time.sleep(0.01)
    elif kind == "echo":
        return int(seconds)
    elif kind == "slow":
        RELEASE.wait(seconds)
    elif kind == "sleep":
        time.sleep(seconds)
    elif kind == "raise":
        raise ValueError(f"bad sample {seconds}")
    elif kind == "exit":
        os._exit(3)
    return os.getpid()


def _overtakes(order: list[int]) -> dict[int, int]:
    """For each seq: how many larger seqs were yielded before it."""
    return {s: sum(1 for t in order[:i] if t > s) for i, s in enumerate(order)}


def test_ready_first_respects_the_reorder_window() -> None:
    items = [(i, ("slow", 1.0) if i == 2 else ("ok", 0.0)) for i in range(12)]
    rf = ReadyFirst(_job, pool="thread", workers=4, window=3)
    try:
        outs = list(rf.run(items))
    finally:
        rf.close()
    order = [o.seq for o in outs]
    assert sorted(order) == list(range(12)) and all(isinstance(o, Done) for o in outs)
    over = _overtakes(order)
    assert max(over.values()) <= 3
    assert over[2] == 3  # the slow sample was overtaken, by exactly the window
    assert max(o.depth for o in outs if isinstance(o, Done)) >= 1


def test_window_zero_is_in_order() -> None:
    items = [(i, ("sleep", 0.05) if i % 3 == 0 else ("ok", 0.0)) for i in range(10)]
    rf = ReadyFirst(_job, pool="thread", workers=3, window=0)
    try:
        assert [o.seq for o in rf.run(items)] == list(range(10))
    finally:
        rf.close()


def test_failure_is_recorded_and_skipped_once() -> None:
    calls: list[int] = []

    def fn(item: int) -> int:
        calls.append(item)
        if item == 4:
            raise KeyError("entry 4 is missing")
        return item * 10

    rf = ReadyFirst(fn, pool="thread", workers=2, window=4)
    try:
        outs = list(rf.run((i, i) for i in range(8)))
    finally:
        rf.close()
    skipped = [o for o in outs if isinstance(o, Skipped)]
    assert [(s.seq, s.reason, s.error_class) for s in skipped] == [(4, "error", "KeyError")]
    assert sorted(o.value for o in outs if isinstance(o, Done)) == [i * 10 for i in range(8) if i != 4]
    assert calls.count(4) == 1  # never retried


def test_hung_thread_is_abandoned_at_its_deadline_and_work_goes_on() -> None:
    items = [(i, ("slow", 60.0) if i == 1 else ("ok", 0.0)) for i in range(10)]
    rf = ReadyFirst(_job, pool="thread", workers=2, window=2, deadline_s=0.5)
    try:
        outs = list(rf.run(items))
        retired = rf._pool.retired  # type: ignore[union-attr]
    finally:
        RELEASE.set()
        rf.close()
    skipped = [o for o in outs if isinstance(o, Skipped)]
    assert [(s.seq, s.reason) for s in skipped] == [(1, "deadline")]
    assert sorted(o.seq for o in outs if isinstance(o, Done)) == [i for i in range(10) if i != 1]
    assert retired == 1


def test_process_pool_kills_a_hung_worker_and_survives_a_crash() -> None:
    items = [(0, ("ok", 0.0)), (1, ("sleep", 120.0)), (2, ("exit", 0.0)), (3, ("raise", 3.0))]
    items += [(i, ("ok", 0.0)) for i in range(4, 10)]
    # item 3 runs on the process that replaces the one item 2 killed: its start-up is not charged to
    # the item's deadline (a worker takes items once it is up: test_a_process_workers_start_up_is_not_
    # charged_to_its_items_deadline), so the deadline only bounds the hung item 1 (8 s before that)
    rf = ReadyFirst(_job, pool="process", workers=2, window=8, deadline_s=3.0)
    try:
        outs = list(rf.run(items))
        pool = rf._pool
        assert pool is not None
        live = [proc for proc, _ in pool._workers.values()]  # type: ignore[attr-defined]
        assert all(p.is_alive() for p in live) and len(live) == 2
    finally:
        rf.close()
    by_seq = {o.seq: o for o in outs}
    assert sorted(by_seq) == list(range(10))
    assert isinstance(by_seq[1], Skipped) and by_seq[1].reason == "deadline"
    assert isinstance(by_seq[2], Skipped) and by_seq[2].error_class == "WorkerDied"
    assert isinstance(by_seq[3], Skipped) and by_seq[3].error_class == "ValueError"
    pids = {o.value for o in outs if isinstance(o, Done)}
    assert os.getpid() not in pids and len(pids) >= 2  # ran in child processes, replacements included


def test_process_pool_does_not_hold_a_task_behind_a_straggler(tmp_path: Any) -> None:
    # While the straggler 0 runs on one worker, every later item must get through the other one:
    # none may wait behind it (in a worker's queue, say). The straggler finishes only when the test
    # creates the file, which it does once it holds every other outcome (or after 20 s, and fails).
    release = tmp_path / "release"
    items = [(0, ("until", str(release)))] + [(i, ("ok", 0.0)) for i in range(1, 8)]
    rf = ReadyFirst(_job, pool="process", workers=2, window=8)
    timer = threading.Timer(20.0, release.touch)
    timer.start()
    order: list[int] = []
    try:
        for out in rf.run(items):
            order.append(out.seq)
            if len(order) == 7:
                release.touch()
    finally:
        timer.cancel()
        rf.close()
    assert sorted(order) == list(range(8))  # each once
    assert order[-1] == 0, order  # the straggler last: nothing waited for it


def test_a_waiting_task_is_not_charged_deadline_time() -> None:
    # One worker: item 1 waits while item 0 runs 1 s; each runs 1 s of a 1.8 s deadline, so neither
    # is abandoned if the clock starts when the worker starts the item (a clock started when the
    # item was handed to the pool, as a worker queue would, reads 2 s for item 1).
    rf = ReadyFirst(_job, pool="process", workers=1, window=4, deadline_s=1.8)
    try:
        list(rf.run([(0, ("ok", 0.0))]))  # the worker process is up before the clock matters
        outs = list(rf.run([(0, ("sleep", 1.0)), (1, ("sleep", 1.0))]))
    finally:
        rf.close()
    assert [(o.seq, type(o).__name__) for o in outs] == [(0, "Done"), (1, "Done")]
    assert all(o.elapsed_s < 1.8 for o in outs)


class _StartUp:
    """An identity job whose unpickling, in a spawned worker (its start-up), does ``how``: "slow"
    sleeps 3 s (as heavy imports do), "fails" raises (a module it needs is missing there), "hangs"
    does not end in time (an import stuck on a dead mount, a lock)."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __getstate__(self) -> dict[str, Any]:
        return {"how": self.how}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.how = state["how"]
        if self.how == "slow":
            time.sleep(3.0)
        elif self.how == "fails":
            raise ImportError("No module named 'only_in_the_parent'")
        elif self.how == "hangs":
            time.sleep(600)

    def __call__(self, item: int) -> int:
        return item


def test_a_process_workers_start_up_is_not_charged_to_its_items_deadline() -> None:
    # Each worker takes 3 s to come up and each item runs in microseconds, under a 1.5 s deadline:
    # none is abandoned if the clock starts when a worker starts the item. Started at hand-over, it
    # abandoned every item, killing each worker before it was up and starting another (as cold).
    rf = ReadyFirst(_StartUp("slow"), pool="process", workers=2, window=4, deadline_s=1.5)
    try:
        outs = list(rf.run((i, i) for i in range(6)))
    finally:
        rf.close()
    assert [(o.seq, type(o).__name__) for o in sorted(outs, key=lambda o: o.seq)] == [
        (i, "Done") for i in range(6)
    ]
    assert [o.value for o in sorted(outs, key=lambda o: o.seq)] == list(range(6))


def test_process_workers_that_cannot_start_stop_the_run_with_an_error() -> None:
    rf = ReadyFirst(_StartUp("fails"), pool="process", workers=1, window=2, deadline_s=30.0)
    try:
        with pytest.raises(WorkersCannotStart, match=r"3 loader worker processes in a row failed to start \(the "
                           r"last: it exited with code 1\)"):  # fmt: skip
            list(rf.run((i, i) for i in range(4)))
        assert rf._pool is None  # closed: a later run starts a fresh pool, not the dead one's leftovers
    finally:
        rf.close()


def test_process_workers_that_hang_while_starting_stop_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker not up within START_TIMEOUT_S is killed and counts as a failed start. The run waited
    for it without a bound (a worker that is not up has no sample, so no deadline ran)."""
    monkeypatch.setattr(loader, "START_TIMEOUT_S", 1.0)
    rf = ReadyFirst(_StartUp("hangs"), pool="process", workers=1, window=2, deadline_s=30.0)
    try:
        with pytest.raises(
            WorkersCannotStart, match=r"in a row failed to start \(the last: it was not up after 1 s"
        ):
            list(rf.run((i, i) for i in range(2)))
    finally:
        rf.close()


def test_a_process_worker_killed_while_idle_fails_one_sample_not_the_run() -> None:
    """The OOM killer (or a kill) takes a worker between samples: the next sample handed to it fails
    as WorkerDied and a fresh worker takes the rest (the hand-over raised BrokenPipeError, out of the
    whole iteration)."""
    rf = ReadyFirst(_job, pool="process", workers=1, window=2)
    try:
        assert [type(o).__name__ for o in rf.run([(0, ("ok", 0.0))])] == ["Done"]
        pool = rf._pool
        assert pool is not None
        ((proc, _conn),) = pool._workers.values()  # type: ignore[attr-defined]
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=10)
        outs = list(rf.run([(i, ("ok", 0.0)) for i in range(3)]))
    finally:
        rf.close()
    got = [(o.seq, type(o).__name__, getattr(o, "error_class", None)) for o in outs]
    assert got == [(0, "Skipped", "WorkerDied"), (1, "Done", None), (2, "Done", None)], got


def test_a_stopped_process_run_does_not_leak_results_into_the_next() -> None:
    rf = ReadyFirst(_job, pool="process", workers=2, window=6)
    try:
        gen = rf.run((i, ("sleep", 0.2)) for i in range(100))  # → the worker's pid
        first = [next(gen).seq]
        gen.close()  # items of this run are still on the workers or waiting for one
        second = {
            o.seq: o.value for o in rf.run((i, ("echo", 1000 + i)) for i in range(10)) if isinstance(o, Done)
        }
    finally:
        rf.close()
    assert len(first) == 1
    assert second == {i: 1000 + i for i in range(10)}


def test_a_stopped_run_does_not_leak_results_into_the_next() -> None:
    rf = ReadyFirst(lambda x: x, pool="thread", workers=3, window=2)
    try:
        gen = rf.run((i, i) for i in range(100))
        first = [next(gen).seq for _ in range(5)]
        gen.close()
        second = [o.value for o in rf.run((i, 1000 + i) for i in range(10)) if isinstance(o, Done)]
    finally:
        rf.close()
    assert len(first) == 5
    assert sorted(second) == [1000 + i for i in range(10)]


@pytest.mark.parametrize("bad", [{"workers": 0}, {"window": -1}, {"deadline_s": 0.0}, {"pool": "fiber"}])
def test_bad_settings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ReadyFirst(lambda x: x, **bad)


def test_consumed_positions_out_of_order() -> None:
    c = ConsumedPositions(start=10, stop=30, stride=3, offset=1)  # share: 10, 13, 16, …, 28
    share = list(range(10, 30, 3))
    assert list(c.pending()) == share
    for p in (16, 13, 22):
        c.mark(p)
    assert c.watermark == 10 and c.above == {13, 16, 22}
    c.mark(10)
    assert c.watermark == 19 and c.above == {22}
    c.mark(11)  # not in the share: ignored
    assert list(c.pending()) == [19, 25, 28]
    d = ConsumedPositions(10, 30, 3, 1)
    d.load(c.state())
    assert list(d.pending()) == [19, 25, 28] and d.n_resolved() == 4


def test_stats_summary_counts() -> None:
    s = LoaderStats()
    for w in (0.1, 0.3, 0.2):
        s.record_wait(w)
    s.record_sample(0)
    s.record_sample(4)
    s.record_skip(SkipRecord(3, "x", "deadline", "DeadlineExceeded", "", 1.0))
    s.record_skip(SkipRecord(5, "y", "error", "KeyError", "", 0.0))
    out = s.summary()
    assert out["steps"] == 3 and out["wait_max_s"] == 0.3 and abs(out["wait_mean_s"] - 0.2) < 1e-12
    assert out["reorder_depth_max"] == 4 and out["deadline_skips"] == 1 and out["failures"] == 1
