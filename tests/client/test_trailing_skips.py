"""A sample skipped at the end of a pass under :class:`FeatureLoader` (in a DataLoader worker, or
with ``num_workers=0``) is reported in that pass: no later sample of the pass could carry it, so it
was never reported, the epoch never finished, and every later per-epoch pass was empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from featurecache.client import FeatureDataset, FeatureLoader
from tests.client.conftest import FailAt

EPOCH = 12
FAIL_AT = 11  # the last position of the epoch: DataLoader worker 1 of 2 (p % 2), the last it computes


def _dataset(store: Path) -> FeatureDataset:
    # one pool worker, in order: each DataLoader worker's last outcome is its last position
    return FeatureDataset(store, crop_size=64, samples_per_epoch=EPOCH, workers=1, window=0,
                          sample_hook=FailAt(FAIL_AT))  # fmt: skip


def _positions(batches: list[dict[str, Any]]) -> list[int]:
    return sorted(int(p) for b in batches for p in b["position"].tolist())


@pytest.mark.parametrize(("num_workers", "batch_size"), [(2, 4), (2, 5), (0, 4), (0, 1)])
def test_a_skip_that_ends_a_pass_is_reported_in_it(
    sample_store: Path, num_workers: int, batch_size: int
) -> None:
    # (2, 5): worker 1's samples 1 3 5 7 9 fill a batch, its skip comes alone; (0, 1): so does it
    ds = _dataset(sample_store)
    loader = FeatureLoader(ds, batch_size=batch_size, num_workers=num_workers)
    try:
        first = list(loader)
        assert _positions(first) == [p for p in range(EPOCH) if p != FAIL_AT]
        assert [(r.position, r.error_class) for r in ds.stats.skips] == [(FAIL_AT, "RuntimeError")]
        assert ds.stats.failures == 1
        assert ds.stats.steps == len(first)  # a batch of skips alone is no step, never handed over
        assert all(len(b["position"]) > 0 for b in first)
        assert ds.state_dict()["consumed"] == {"watermark": EPOCH, "resolved_above": []}
        second = list(loader)  # the next epoch, whole
        assert _positions(second) == list(range(EPOCH, 2 * EPOCH))
        assert ds.epoch == 1
    finally:
        ds.close()


def _positions_only(samples: list[dict[str, Any]]) -> dict[str, Any]:
    assert all("restype" in s for s in samples), [sorted(s) for s in samples]  # samples only
    return {"position": torch.tensor([int(s["position"]) for s in samples]),
            "skipped": [r for s in samples for r in s["skipped"]]}  # fmt: skip


def test_a_given_collate_sees_samples_only(sample_store: Path) -> None:
    ds = _dataset(sample_store)
    loader = FeatureLoader(ds, batch_size=2, num_workers=2, collate_fn=_positions_only)
    try:
        batches = list(loader)
        assert _positions(batches) == [p for p in range(EPOCH) if p != FAIL_AT]
        assert [r.position for r in ds.stats.skips] == [FAIL_AT]
        assert ds.state_dict()["consumed"]["watermark"] == EPOCH
    finally:
        ds.close()
