"""One DataLoader worker much slower than the other (infinite mode, real store): the trainer's
exact-resume state — the positions resolved above its watermark — stays bounded by ``max_lag``
instead of growing with the run, stays exact, and a pass stopped while a worker waits ends."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from featurecache.client import FeatureDataset, FeatureLoader
from featurecache.client.sampler import SampleKey

MAX_LAG = 8


class SlowEven:
    """Sample hook: even positions — DataLoader worker 0's of 2 — take ``extra_s`` longer."""

    def __init__(self, extra_s: float) -> None:
        self.extra_s = extra_s

    def __call__(self, key: SampleKey) -> None:
        if key.position % 2 == 0:
            time.sleep(self.extra_s)


def _dataset(store: Path, hook: Any = None) -> FeatureDataset:
    return FeatureDataset(store, crop_size=32, infinite=True, workers=1, window=2, use_msa=False,
                          sample_hook=hook)  # fmt: skip


def _expected_state(received: set[int]) -> dict[str, Any]:
    """The state of these received positions, counted here: the first position not received, and
    the received ones above it."""
    watermark = 0
    while watermark in received:
        watermark += 1
    return {"watermark": watermark, "resolved_above": sorted(p for p in received if p > watermark)}


@pytest.mark.timeout(300)
def test_a_lagging_worker_keeps_the_resume_state_bounded_and_exact(sample_store: Path) -> None:
    ds = _dataset(sample_store, SlowEven(0.03))
    loader = FeatureLoader(ds, batch_size=1, num_workers=2, max_lag=MAX_LAG)
    received: set[int] = set()
    worst = 0
    try:
        for step, batch in enumerate(loader):
            received.update(int(p) for p in batch["position"].tolist())
            state = loader.state_dict()["consumed"]
            assert state == _expected_state(received), step
            worst = max(worst, len(state["resolved_above"]))
            if step + 1 == 150:
                break
    finally:
        ds.close()
    # Fast-worker positions above the watermark lie below it + MAX_LAG; the slow worker, while it
    # holds the watermark, may hand over its own up to its pool + window (3) of its positions ahead.
    assert worst <= MAX_LAG + 2 * 3, worst
    assert min(received) == 0 and len(received) == 150

    # the state resumes exactly: the positions not received come first, none received comes again
    resumed = _dataset(sample_store)
    resumed.load_state_dict(state_dict := loader.state_dict())
    missing = sorted(set(range(max(received))) - received)
    assert missing == [p for p in range(state_dict["consumed"]["watermark"], max(received))
                       if p not in state_dict["consumed"]["resolved_above"]]  # fmt: skip
    it = iter(resumed)
    again = [next(it)["position"] for _ in range(len(missing) + 3)]
    it.close()
    resumed.close()
    assert again[: len(missing)] == missing
    assert not set(again) & received


@pytest.mark.timeout(300)
def test_a_pass_stopped_while_a_worker_waits_ends_and_the_next_continues(sample_store: Path) -> None:
    ds = _dataset(sample_store, SlowEven(0.2))
    loader = FeatureLoader(ds, batch_size=1, num_workers=2, max_lag=2, persistent_workers=True)
    received: list[int] = []
    try:
        for _ in range(2):  # the second pass starts while the fast worker waits in the first
            for step, batch in enumerate(loader):
                received += [int(p) for p in batch["position"].tolist()]
                if step + 1 == 6:
                    break
        assert len(received) == len(set(received)) == 12
        assert loader.state_dict()["consumed"] == _expected_state(set(received))
    finally:
        ds.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("persistent", [True, False])
def test_an_old_pass_closed_late_does_not_end_the_running_one(sample_store: Path, persistent: bool) -> None:
    """A pass's generator kept alive (a caught exception's traceback holds its frame) and closed
    while a newer pass runs: the newer infinite stream goes on (before: closing the old generator
    republished the mirror, every worker took it for the end of its pass and the stream stopped)."""
    ds = _dataset(sample_store)
    loader = FeatureLoader(ds, batch_size=1, num_workers=2, persistent_workers=persistent)
    try:
        old = iter(loader)
        for _ in range(5):
            next(old)
        new = iter(loader)
        for _ in range(10):
            next(new)
        old.close()  # what the garbage collector does when the traceback goes
        more = [int(next(new)["position"][0]) for _ in range(40)]  # StopIteration before the fix
    finally:
        ds.close()
    assert len(set(more)) == 40
