"""A user's plain ``DataLoader(ds, batch_size=B)`` without ``collate_fn`` batches the samples as
``collate`` does (torch's default collate failed on samples of different lengths), and a
per-epoch dataset has a length for ``len(loader)`` and per-epoch schedules (R5 #12). Real store,
real DataLoader workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from featurecache.client import collate
from tests.client.test_r5_epochs import _dataset


def _same_batches(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key, value in x.items():
            if isinstance(value, torch.Tensor):
                assert value.dtype == y[key].dtype and torch.equal(value, y[key]), key
            else:
                assert value == y[key], key


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_plain_dataloader_without_collate_fn_batches_as_collate_does(
    client_store: Path, num_workers: int
) -> None:
    kw: dict[str, Any] = {"multiprocessing_context": "fork"} if num_workers else {}
    ds = _dataset(client_store, crop_size=1000)  # whole entries: of different sizes
    plain = [b for b in DataLoader(ds, batch_size=2, num_workers=num_workers, **kw)]
    ds.close()
    ds = _dataset(client_store, crop_size=1000)
    ours = [b for b in DataLoader(ds, batch_size=2, num_workers=num_workers, collate_fn=collate, **kw)]
    ds.close()
    _same_batches(plain, ours)
    # the samples are of different sizes: a stack of their arrays cannot be what was returned
    sizes = {int(n) for b in ours for n in b["token_mask"].sum(dim=1)}
    assert len(sizes) > 1, sizes


@pytest.mark.parametrize(("world", "expected"), [(1, 6), (4, 2), (5, 2)])
def test_a_per_epoch_dataset_has_its_rank_share_as_length(
    client_store: Path, world: int, expected: int
) -> None:
    """ceil(6 / W) samples a rank, as DistributedSampler pads; each rank's pass yields that many."""
    lengths, yielded = [], []
    for rank in range(world):
        ds = _dataset(client_store, rank=rank, world_size=world)
        lengths.append(len(ds))
        yielded.append(sum(1 for _ in ds))
        ds.close()
    assert lengths == yielded == [expected] * world


@pytest.mark.parametrize(
    ("length", "batch_size", "num_workers", "drop_last", "expected"),
    [(6, 4, 0, False, 2), (7, 2, 2, False, 4), (7, 2, 2, True, 3), (5, 4, 2, False, 2)],
)
def test_a_loader_length_is_the_batches_a_whole_epoch_hands_out(
    client_store: Path, length: int, batch_size: int, num_workers: int, drop_last: bool, expected: int
) -> None:
    """Each worker batches its own share of the epoch: 7 samples, 2 workers, batches of 2 are
    4 + 3 samples, 2 + 2 batches (torch's estimate, ceil(7 / 2), says 4 too; with 5 samples in
    batches of 4 over 2 workers, 3 + 2 samples are 2 batches where torch's estimate says 1)."""
    kw: dict[str, Any] = {"multiprocessing_context": "fork"} if num_workers else {}
    ds = _dataset(client_store, samples_per_epoch=length)
    loader = ds.loader(batch_size=batch_size, num_workers=num_workers, drop_last=drop_last, **kw)
    assert len(loader) == expected
    assert sum(1 for _ in loader) == expected
    ds.close()


def test_an_infinite_dataset_has_no_length_and_says_why(client_store: Path) -> None:
    ds = _dataset(client_store, infinite=True)
    with pytest.raises(TypeError, match="infinite=True"):
        len(ds)
    with pytest.raises(TypeError, match="infinite=True"):
        len(DataLoader(ds, batch_size=2))
    ds.close()
