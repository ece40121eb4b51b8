"""Epochs as a user's own training loop drives them (review R5, session 35), on a real store:
``set_epoch`` in infinite mode, a plain ``DataLoader`` with workers across epochs, ``window=0``
through ``FeatureLoader`` workers, and per-epoch shares of several ranks."""

from __future__ import annotations

import logging
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from featurecache.client import FeatureDataset, collate
from tests.client.conftest import FailAt


def _dataset(store: Path, **kw: Any) -> FeatureDataset:
    kw.setdefault("crop_size", 64)
    kw.setdefault("samples_per_epoch", 6)
    kw.setdefault("workers", 1)
    kw.setdefault("window", 0)
    return FeatureDataset(store, **kw)


def _positions(batches: Any) -> list[int]:
    return [int(p) for b in batches for p in torch.as_tensor(b["position"]).reshape(-1).tolist()]


def _consumed_passes(ds: FeatureDataset, loader: DataLoader[Any], n: int) -> list[list[int]]:
    """``n`` passes of a plain DataLoader whose trainer consumes every batch: each pass's positions."""
    passes = []
    for _ in range(n):
        got = []
        for batch in loader:
            ds.consume(batch)
            got += _positions([batch])
        passes.append(sorted(got))
    return passes


def test_set_epoch_in_infinite_mode_does_not_start_the_stream_again(
    client_store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The DistributedSampler habit (``set_epoch(ep)`` every N steps) on an infinite stream: each
    "epoch" gets the next N positions, not the first N again."""
    ds = _dataset(client_store, infinite=True)
    loader = ds.loader(batch_size=1)
    got = []
    with caplog.at_level(logging.WARNING, logger="featurecache.client.dataset"):
        for ep in range(3):
            ds.set_epoch(ep)
            got.append(_positions(islice(loader, 4)))
    ds.close()
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    said = [r.getMessage() for r in caplog.records if "set_epoch" in r.getMessage()]
    assert len(said) == 1 and "does nothing" in said[0], said  # once, not every call


@pytest.mark.parametrize("persistent", [False, True])
def test_a_plain_dataloader_with_workers_follows_set_epoch_or_consume(
    client_store: Path, persistent: bool
) -> None:
    """A plain DataLoader's workers iterate a copy of the dataset, which does not learn what the
    trainer received: without set_epoch or consume every pass is the same epoch (as torch's
    DistributedSampler without set_epoch). With set_epoch before each pass, each pass is that
    epoch. With consume(batch) the passes move on as num_workers=0 does (they repeated epoch 1
    forever: the trainer's copy, at epoch 0 all resolved, dropped epoch 1's positions)."""
    ds = _dataset(client_store)
    loader = DataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate, persistent_workers=persistent)
    assert [sorted(_positions(loader)) for _ in range(2)] == [list(range(6))] * 2
    passes = []
    for epoch in (3, 4, 4):
        ds.set_epoch(epoch)
        passes.append(sorted(_positions(loader)))
    assert passes == [list(range(18, 24)), list(range(24, 30)), list(range(24, 30))]
    ds.close()

    ds = _dataset(client_store)
    loader = DataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate, persistent_workers=persistent)
    assert _consumed_passes(ds, loader, 3) == [list(range(0, 6)), list(range(6, 12)), list(range(12, 18))]
    assert ds.state_dict()["epoch"] == 2
    ds.close()


def test_a_plain_dataloader_pass_that_repeats_the_one_before_is_warned_once(
    client_store: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Spawned workers log to their stderr (no handler inherited): the warning names what to do."""
    ds = _dataset(client_store, infinite=True)
    loader = DataLoader(ds, batch_size=2, num_workers=1, collate_fn=collate, multiprocessing_context="spawn")
    got = [_positions(islice(loader, 2)) for _ in range(3)]
    ds.close()
    assert got == [[0, 1, 2, 3]] * 3  # infinite mode too: each pass starts the stream again
    err = capfd.readouterr().err
    assert err.count("repeats its samples") == 1, err
    assert "ds.set_epoch(epoch)" in err and "ds.consume(batch)" in err and "ds.loader(" in err, err


def test_window_0_through_loader_workers_keeps_the_stream_order(client_store: Path) -> None:
    """README: ``window=0`` hands samples over in the stream's order, the same on every run; through
    ``ds.loader(num_workers=2)`` the workers' batches were taken as they came."""
    ds = _dataset(client_store, samples_per_epoch=10)
    loader = ds.loader(batch_size=1, num_workers=2)
    assert loader.dataloader.in_order is True
    assert [_positions(loader) for _ in range(2)] == [list(range(10)), list(range(10, 20))]
    ds.close()


def test_ranks_take_as_many_samples_per_epoch(client_store: Path) -> None:
    """Per-epoch mode, 6 samples over 4 ranks: each rank takes ceil(6 / 4) = 2 (ranks that took
    1 or 2 hung a DDP job in its next collective); the two padding positions draw the epoch's first
    entries again, as torch's DistributedSampler pads, cropped and augmented afresh (review R41b
    s51 #1: they were byte-identical copies). The next epoch follows on every rank."""
    shares, next_shares, samples = [], [], {}
    for rank in range(4):
        ds = _dataset(client_store, rank=rank, world_size=4)
        got = list(ds)
        shares.append(sorted(s["position"] for s in got))
        samples.update({s["position"]: s for s in got})
        next_shares.append(sorted(s["position"] for s in ds))
        if rank == 2:  # a position names one sample: sample() recomputes the padded one too
            again = ds.sample(6)
            assert all(
                np.array_equal(again[k], v) for k, v in samples[6].items() if isinstance(v, np.ndarray)
            )
        ds.close()
    # an epoch spans 8 positions (6 padded to a multiple of 4): epoch 0 is 0..7, epoch 1 8..15
    assert shares == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert next_shares == [[8, 12], [9, 13], [10, 14], [11, 15]]
    for pad, drawn in ((6, 0), (7, 1)):
        a, b = samples[pad], samples[drawn]
        assert a["entry_id"] == b["entry_id"]
        arrays = [k for k, v in b.items() if isinstance(v, np.ndarray)]
        assert len(arrays) > 10 and not all(np.array_equal(a[k], b[k]) for k in arrays), pad


def test_resuming_over_another_sampling_stream_is_said(
    client_store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A state resumed where positions draw other samples (other entries, units or weights: a store
    rebuilt, or other sampler settings) was taken silently; seed and epoch length match here."""
    ds = _dataset(client_store, samples_per_epoch=10)
    it = iter(ds)
    [next(it) for _ in range(3)]
    state = ds.state_dict()
    it.close()
    ds.close()
    with caplog.at_level(logging.WARNING, logger="featurecache.client.dataset"):
        same = _dataset(client_store, samples_per_epoch=10)
        same.load_state_dict(state)
        assert not [r for r in caplog.records if "sampling stream" in r.getMessage()]
        other = _dataset(client_store, samples_per_epoch=10, weighting="af3")
        other.load_state_dict(state)
    said = [r.getMessage() for r in caplog.records if "sampling stream" in r.getMessage()]
    assert len(said) == 1 and "draw other samples" in said[0], said
    assert other.state_dict()["consumed"] == state["consumed"]  # resumed at the same positions all the same
    same.close()
    other.close()


def _take(ds: FeatureDataset, n: int) -> tuple[list[int], dict[str, Any]]:
    it = iter(ds)
    got = [next(it)["position"] for _ in range(n)]
    state = ds.state_dict()
    it.close()
    ds.close()
    return got, state


def test_an_infinite_run_resumes_on_another_number_of_ranks(client_store: Path) -> None:
    """A job of 2 ranks comes back on 3 (then on 1): the old ranks' states, resharded, make the new
    ranks draw every position the old ones had not resolved, once, and none they had (review R5:
    a resume on another world size was refused)."""
    from featurecache.client.dataset import reshard_states

    kw: dict[str, Any] = {"infinite": True, "workers": 2, "window": 4, "samples_per_epoch": 10}
    old = [_take(_dataset(client_store, rank=r, world_size=2, **kw), n) for r, n in ((0, 7), (1, 4))]
    drawn = [p for got, _ in old for p in got]
    new = reshard_states([st for _, st in old], 3)
    assert [(st["rank"], st["world_size"]) for st in new] == [(0, 3), (1, 3), (2, 3)]
    marks = []
    for rank, st in enumerate(new):
        ds = _dataset(client_store, rank=rank, world_size=3, **kw)
        ds.load_state_dict(st)
        got, after = _take(ds, 5)
        drawn += got
        marks.append(after["consumed"]["watermark"])
    assert len(drawn) == len(set(drawn)), sorted(drawn)  # nothing drawn twice
    covered = min(marks)  # below every new rank's watermark all is resolved: drawn by one of them
    assert covered >= 11 and set(range(covered)) <= set(drawn), (covered, sorted(drawn))
    # and back to one rank: it starts at the first position no rank drew
    (one,) = reshard_states([st for _, st in old], 1)
    assert one["consumed"]["watermark"] == min(
        set(range(max(drawn) + 2)) - {p for got, _ in old for p in got}
    )


def test_per_epoch_states_are_not_resharded(client_store: Path) -> None:
    from featurecache.client.dataset import reshard_states
    from featurecache.errors import InvalidRequest

    states = [_dataset(client_store, rank=r, world_size=2).state_dict() for r in (0, 1)]
    with pytest.raises(InvalidRequest, match="per-epoch states cannot be resharded"):
        reshard_states(states, 3)
    infinite = [_dataset(client_store, rank=r, world_size=2, infinite=True).state_dict() for r in (0, 1)]
    with pytest.raises(InvalidRequest, match="rank order"):
        reshard_states(infinite[::-1], 1)
    assert [st["consumed"]["watermark"] for st in reshard_states(infinite, 3)] == [0, 1, 2]
    infinite[1]["consumed"] = {"watermark": 4, "resolved_above": []}  # not a position of rank 1 of 2
    with pytest.raises(InvalidRequest, match="not a position of this share"):
        reshard_states(infinite, 3)


def test_a_per_epoch_state_of_unpadded_epochs_is_refused(client_store: Path) -> None:
    """A per-epoch state of 4 ranks over 6-sample epochs from before the padding numbered epoch 1
    from 6, now from 8: refused (naming why) instead of resumed on other positions."""
    from featurecache.errors import InvalidRequest

    ds = _dataset(client_store, rank=1, world_size=4)
    state = ds.state_dict()
    del state["span"]  # what a state of the earlier featurecache lacks
    with pytest.raises(InvalidRequest, match="did not pad the epoch"):
        ds.load_state_dict(state)
    ds.close()


def test_making_a_loader_leaves_the_dataset_as_it_was_for_other_uses(client_store: Path) -> None:
    """FeatureLoader set its settings (no tracking on yield, skip-only items, max_lag) on the
    dataset when made: iterated directly afterwards the dataset tracked nothing, and every
    iteration repeated epoch 0 (review R5c). They hold during its passes only."""
    ds = _dataset(client_store)
    ds.loader(batch_size=2, num_workers=2)
    assert [sorted(s["position"] for s in ds) for _ in range(2)] == [list(range(6)), list(range(6, 12))]
    ds.close()


def test_short_in_order_passes_deliver_every_workers_positions(client_store: Path) -> None:
    """Infinite mode, workers' batches taken in turn (window=0), one batch a pass: the round robin
    restarts at worker 0 every pass, so with a fixed assignment of positions to workers only worker
    0's were ever delivered (0, 2, 4, …) and the resume state grew without bound (review R5c)."""
    ds = _dataset(client_store, infinite=True, samples_per_epoch=10)
    loader = ds.loader(batch_size=2, num_workers=2)
    got = [p for _ in range(4) for p in _positions(islice(loader, 1))]
    ds.close()
    assert sorted(got) == list(range(8))
    assert ds.state_dict()["consumed"] == {"watermark": 8, "resolved_above": []}


def test_a_plain_dataloader_with_consume_moves_past_samples_that_keep_failing(client_store: Path) -> None:
    """A plain DataLoader does not report a worker's trailing skip to consume: the position stayed
    unresolved and every later pass held only it, failed it again and was empty, for good (review
    R5c). Once a whole pass delivered nothing of what is left, the next pass begins the next epoch."""
    ds = _dataset(client_store, sample_hook=FailAt(5))
    loader = DataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate)
    passes = _consumed_passes(ds, loader, 4)
    ds.close()
    assert passes == [[0, 1, 2, 3, 4], [], list(range(6, 12)), list(range(12, 18))]


def test_an_old_pass_closed_late_leaves_the_running_passs_settings(client_store: Path) -> None:
    """A loader pass's generator closed after a newer pass began (kept alive by a traceback) must
    not put the dataset back to its own settings under the running pass; the latest pass's end does."""
    ds = _dataset(client_store, samples_per_epoch=10)
    loader = ds.loader(batch_size=1)
    old = iter(loader)
    next(old)
    new = iter(loader)
    got = _positions([next(new)])
    old.close()
    assert ds._track_on_yield is False  # the running pass's: its samples are consumed by the loader
    got += _positions(new)
    assert ds._track_on_yield is True  # the latest pass ended: the dataset's own again
    assert got == list(range(1, 10)) and ds.state_dict()["epoch"] == 0
    assert sorted(s["position"] for s in ds) == list(range(10, 20))  # direct iteration tracks again
    ds.close()
