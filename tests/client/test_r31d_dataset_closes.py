"""FeatureDataset closes the reader it opened from a URL (review R31d s47 #3), against a real
``featurecache serve`` over the sample store.

Before, ``close()`` stopped only the sample pool: the :class:`LookupClient` made for a URL kept its
connections until the garbage collector found them (``ResourceWarning: unclosed <socket …>``); and
an argument refused after the reader had read the index tables (``rank`` without ``world_size``, a
skip limit, the pool settings, the sampler's) raised with that client still open.

A ResourceWarning is an error here; a finalizer's error goes to ``sys.unraisablehook``, which
:func:`_unclosed` collects, with a ``gc.collect()`` to run the finalizers.
"""

from __future__ import annotations

import gc
import pickle
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader, get_worker_info

from featurecache.client import FeatureDataset
from featurecache.errors import InvalidRequest


@pytest.fixture(scope="module")
def url(sample_store: Path) -> Iterator[str]:
    from services.lookup.server import background_server

    with background_server(sample_store) as served:
        yield served


@contextmanager
def _unclosed() -> Iterator[list[str]]:
    """The ResourceWarnings raised in the block and by the garbage it leaves (collected at its end)."""
    gc.collect()  # garbage of earlier tests is not this block's
    found: list[str] = []

    def hook(unraisable: Any) -> None:
        found.append(f"{unraisable.exc_type.__name__}: {unraisable.exc_value}")

    kept = sys.unraisablehook
    sys.unraisablehook = hook
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            yield found
            gc.collect()
    finally:
        sys.unraisablehook = kept


def _dataset(url: str, **kw: Any) -> FeatureDataset:
    return FeatureDataset(url, crop_size=32, workers=1, samples_per_epoch=2, seed=1, **kw)


def test_close_closes_the_client_made_for_a_url(url: str) -> None:
    with _unclosed() as found:
        ds = _dataset(url)
        assert len(list(ds)) == 2
        ds.close()
        assert len(list(ds)) == 2  # a closed dataset opens its reader again when iterated
        ds.close()
        del ds
    assert found == []


def test_a_with_block_closes_the_dataset(url: str) -> None:
    with _unclosed() as found:
        with _dataset(url) as ds:
            assert len(list(ds)) == 2
        del ds
    assert found == []


@pytest.mark.parametrize(
    "kw",
    [
        {"rank": 0},  # without world_size
        {"rank": 2, "world_size": 2},
        {"max_consecutive_skips": 0},
        {"window": -1},  # the pool settings
        {"weighting": "by-length"},  # refused by the sampler, after the index tables were read
    ],
    ids=lambda kw: ",".join(kw),
)
def test_a_refused_argument_leaves_no_connection_open(url: str, kw: dict[str, Any]) -> None:
    with _unclosed() as found, pytest.raises(InvalidRequest):
        _dataset(url, **kw)
    assert found == []


def test_copies_close_their_own_readers_only(url: str) -> None:
    """A copy (a spawned DataLoader worker's is pickled; a forked one's is the parent's memory)
    closes the reader it opened, never the trainer's; the trainer's close leaves a persistent
    worker serving samples from its own."""
    with _unclosed() as found:
        ds = _dataset(url)
        reader = ds.source.get()
        copy = pickle.loads(pickle.dumps(ds))
        assert len(list(copy)) == 2 and copy.source.get() is not reader
        copy.close()
        assert ds.source.get() is reader and reader.entry(reader.ids[0]).id == reader.ids[0]

        def close_the_copy(worker_id: int) -> None:
            info = get_worker_info()
            assert info is not None
            info.dataset.close()  # a forked copy: the trainer's reader is not this process's

        loader = DataLoader(ds, batch_size=None, num_workers=1, persistent_workers=True,
                            worker_init_fn=close_the_copy)  # fmt: skip
        assert len(list(loader)) == 2
        assert ds.source.get() is reader and reader.entry(reader.ids[0]).id == reader.ids[0]
        ds.close()
        ds.set_epoch(1)
        assert len(list(loader)) == 2  # the worker's own reader, untouched by the trainer's close
        del loader
        ds.close()
        del ds, copy, reader
    assert found == []
