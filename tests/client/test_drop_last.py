"""``FeatureLoader(drop_last=True)`` in per-epoch mode: each pass is one whole epoch less the
partial batches torch's ``drop_last`` drops (each worker's last one). Dropped inside the worker,
their positions stayed unresolved: the epoch never ended and every later pass held only them,
fewer than a batch, and was empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from featurecache.client import FeatureDataset, FeatureLoader
from tests.client.conftest import FailAt

EPOCH = 12


def _dataset(store: Path, fail_at: int | None = None) -> FeatureDataset:
    # one pool worker, in order: each DataLoader worker computes its positions in increasing order
    return FeatureDataset(store, crop_size=64, samples_per_epoch=EPOCH, workers=1, window=0,
                          sample_hook=None if fail_at is None else FailAt(fail_at))  # fmt: skip


def _torch_drop_last(epoch: int, num_workers: int, batch_size: int, skip: int | None = None) -> list[int]:
    """Reference: what torch's drop_last keeps of an epoch. DataLoader worker ``w`` of ``K`` (one
    worker when ``K`` is 0) holds the positions ``p`` with ``p % K == w`` in increasing order
    (``skip`` left out); it batches them ``batch_size`` at a time and drops a last, partial batch."""
    kept: list[int] = []
    for w in range(max(num_workers, 1)):
        mine = [p for p in range(epoch * EPOCH, (epoch + 1) * EPOCH)
                if p % max(num_workers, 1) == w and p != skip]  # fmt: skip
        kept += mine[: len(mine) // batch_size * batch_size]
    return sorted(kept)


def _positions(batches: list[dict[str, Any]]) -> list[int]:
    return sorted(int(p) for b in batches for p in b["position"].tolist())


@pytest.mark.parametrize(
    ("num_workers", "batch_size", "persistent"),
    [(0, 5, False), (2, 5, False), (2, 4, True), (0, 3, False)],  # (0, 3): nothing to drop
)
def test_each_pass_is_the_next_epoch_less_its_partial_batches(
    sample_store: Path, num_workers: int, batch_size: int, persistent: bool
) -> None:
    ds = _dataset(sample_store)
    kw: dict[str, Any] = {"persistent_workers": True} if persistent else {}
    loader = FeatureLoader(ds, batch_size=batch_size, num_workers=num_workers, drop_last=True, **kw)
    try:
        received = 0
        for epoch in range(3):
            batches = list(loader)
            assert ds.epoch == epoch
            assert all(len(b["position"]) == batch_size for b in batches)
            assert _positions(batches) == _torch_drop_last(epoch, num_workers, batch_size)
            # the dropped positions are resolved: the epoch is over
            assert ds.state_dict()["consumed"] == {"watermark": (epoch + 1) * EPOCH, "resolved_above": []}
            received += len(_positions(batches))
            assert ds.stats.samples == received  # dropped samples are not counted as received
    finally:
        ds.close()


@pytest.mark.parametrize(
    ("fail_at", "batch_size"),
    # 10: its skip record rides on sample 11, alone in the dropped batch; 11: a trailing skip after
    # sample 10 (a batch of one sample, dropped); with batch size 4 the trailing skip report fills
    # the last batch up to 4 items of 3 samples (8 9 10), dropped all the same
    [(10, 5), (11, 5), (11, 4)],
)
def test_skips_in_a_dropped_batch_are_reported(sample_store: Path, fail_at: int, batch_size: int) -> None:
    ds = _dataset(sample_store, fail_at)
    loader = FeatureLoader(ds, batch_size=batch_size, num_workers=0, drop_last=True)
    try:
        first = list(loader)
        assert all(len(b["position"]) == batch_size for b in first)
        assert _positions(first) == _torch_drop_last(0, 0, batch_size, skip=fail_at)
        assert [(r.position, r.error_class) for r in ds.stats.skips] == [(fail_at, "RuntimeError")]
        assert ds.state_dict()["consumed"]["watermark"] == EPOCH
        second = list(loader)  # the next epoch, whole less its partial batch
        assert ds.epoch == 1
        assert _positions(second) == _torch_drop_last(1, 0, batch_size)
    finally:
        ds.close()
