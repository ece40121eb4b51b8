"""A spawned DataLoader worker told to stop right after it put a batch (the trainer left early, the
loader deleted) must not abort at its exit: its queue's feeder thread was still pickling the batch
into shared memory when the interpreter finalized, and ended inside torch's C++ code
("terminate called without an active exception", SIGABRT; the trainer then reads "DataLoader
worker (pid N) is killed by signal: Aborted"). Real store, real spawned worker processes."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from featurecache.client import FeatureDataset, collate


def _big_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A large batch (as at a large crop with deep MSAs: 100s of MB): its copy into shared memory
    takes long enough that the worker's exit overlaps it."""
    batch = collate(samples)
    batch["extra"] = torch.ones(64 << 20)  # 256 MB
    return batch


def test_a_spawned_worker_stopped_while_sending_a_batch_exits_cleanly(
    client_store: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    got = []
    for _ in range(3):  # before the fix 3 of 4 such loaders aborted (8 of 8 exit cleanly after)
        ds = FeatureDataset(
            client_store, crop_size=32, samples_per_epoch=6, workers=1, window=0, infinite=True
        )
        loader = DataLoader(ds, batch_size=1, num_workers=1, collate_fn=_big_collate, prefetch_factor=1,
                            multiprocessing_context="spawn")  # fmt: skip
        it = iter(loader)
        got.append(int(next(it)["position"][0]))
        del it, loader  # the worker is told to stop while it sends the next batch
        gc.collect()
        ds.close()
    err = capfd.readouterr().err
    assert got == [0, 0, 0]
    assert "terminate called" not in err and "Aborted" not in err, err


def test_the_exit_wait_leaves_a_feeder_blocked_on_a_pipe_nobody_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch sent through the pipe itself (numpy arrays, raw samples: not tensors in shared
    memory) blocks the feeder once the trainer stops reading; the exit wait took its whole bound
    (10 s, past torch's 5 s join of a worker: the trainer stalled, review R6 M3). It waits only
    while a feeder pickles. Here the bound is 60 s: the wait must end long before."""
    import multiprocessing
    import threading

    from featurecache.client import dataset

    monkeypatch.setattr(dataset, "FEEDER_JOIN_S", 60.0)
    q: Any = multiprocessing.get_context("spawn").Queue()
    q.put(b"x" * (8 << 20))  # far more than a pipe holds: its feeder blocks in the write
    waiter = threading.Thread(target=dataset._join_queue_feeders, daemon=True)
    waiter.start()
    waiter.join(20)
    blocked = not waiter.is_alive()
    assert len(q.get(timeout=20)) == 8 << 20  # unblock the feeder
    q.close()
    q.join_thread()
    assert blocked, "the exit wait still waited for a feeder blocked on a pipe"
