"""The per-step path keeps what it reads of a large entry before the crop (tokens, bonds, interfaces,
meta and chains rows: ``client.job.TokenCache``) per process, by the reader's snapshot and the entry
id, within a bound; later samples of the entry read only its atom rows.

Oracles: the samples with the cache are those without it (``token_cache_bytes=0``), byte for byte;
the reads are counted by real reader subclasses (a ``LocalStore``, a ``LookupClient`` over a real
``featurecache serve``) that count the calls made to them; a store rebuilt under the service with
another structure under the same entry id gives the sample that the rebuilt store gives a process
that never saw the old one (a fresh local dataset), and its tokens are read again.

Real parts: real builds, real zarr stores, real uvicorn on 127.0.0.1."""

from __future__ import annotations

import logging
import pickle
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from featurecache.client import FeatureDataset
from featurecache.client.http import INDEX_HEADER, LookupClient
from featurecache.client.job import TOKEN_CACHE_BYTES, BeforeCrop, TokenCache
from featurecache.store.reader import LocalStore
from featurecache.types import Entry
from services.lookup.server import background_server
from tests.client.test_crop_first import _same
from tests.conftest import CCD, STRUCTURES, build_store


class CountingStore(LocalStore):
    """A real local store that counts, per entry, its pre-crop reads and its atom-row reads."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.group_reads: Counter[str] = Counter()
        self.atom_reads: Counter[str] = Counter()

    def read_groups(self, entry_id: str, groups: Sequence[str]) -> dict[str, np.ndarray]:
        self.group_reads[entry_id] += 1
        return super().read_groups(entry_id, groups)

    def read_rows(self, entry_id: str, group: str, ranges: Any, fields: Any = None) -> Any:
        self.atom_reads[entry_id] += 1
        return super().read_rows(entry_id, group, ranges, fields)


class CountingClient(LookupClient):
    """A real lookup client that counts, per entry, its pre-crop reads and its whole-entry reads."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group_reads: Counter[str] = Counter()
        self.whole_reads: Counter[str] = Counter()

    def read_groups(self, entry_id: str, groups: Sequence[str]) -> dict[str, np.ndarray]:
        self.group_reads[entry_id] += 1
        return super().read_groups(entry_id, groups)

    def entry(self, entry_id: str, arrays: Sequence[str] | None = None) -> Entry:
        self.whole_reads[entry_id] += 1
        return super().entry(entry_id, arrays)


def _dataset(source: Any, cache_bytes: int | None = None) -> FeatureDataset:
    """Crop first on every entry the crop cuts (the client store's entries are below the default
    threshold)."""
    ds = FeatureDataset(source, seed=11, weighting="uniform", samples_per_epoch=400, crop_size=48)
    ds.job.crop_first_atoms = 0
    if cache_bytes is not None:
        ds.job.token_cache_bytes = cache_bytes
    return ds


def _cache(ds: FeatureDataset) -> TokenCache:
    cache = ds.job.source.token_cache(ds.job.source.get())
    assert cache is not None
    return cache


N = 60


def test_cached_samples_are_the_uncached_samples(client_store: Path) -> None:
    """The same keys with the cache and without it: the same samples, byte for byte; with it the
    tokens of an entry are read once, without it once a sample cropped first."""
    cached_reader, plain_reader = CountingStore(client_store), CountingStore(client_store)
    cached, plain = _dataset(cached_reader), _dataset(plain_reader, cache_bytes=0)
    assert cached.job.token_cache_bytes == TOKEN_CACHE_BYTES  # the default is on
    assert cached.job.source.get() is cached_reader
    for p in range(N):
        got = cached.sample(p)
        _same(got, plain.sample(p), f"position {p}")
        # the cached arrays are read-only (shared by the entry's samples); a sample's are its own
        assert all(v.flags.writeable for v in got.values() if isinstance(v, np.ndarray)), p
    assert plain_reader.atom_reads == cached_reader.atom_reads  # the same samples were cropped first
    cropped = plain_reader.atom_reads
    assert sum(cropped.values()) > len(cropped) >= 4, cropped  # the premise: entries sampled again
    assert plain_reader.group_reads == cropped  # without the cache: one pre-crop read a sample
    assert cached_reader.group_reads == Counter(dict.fromkeys(cropped, 1))  # with it: one an entry
    assert len(_cache(cached)) == len(cropped) and not len(_cache(plain))
    # the samples of the cached entries once more (all hits), against a reader of their own
    fresh = _dataset(CountingStore(client_store))
    for p in range(N):
        _same(cached.sample(p), fresh.sample(p), f"position {p}, from the cache")
    assert cached_reader.group_reads == Counter(dict.fromkeys(cropped, 1))
    for ds in (cached, plain, fresh):
        ds.close()


def test_the_bound_holds(client_store: Path) -> None:
    """A bound that holds about two entries: never more bytes held than it, entries evicted and
    read again, the samples unchanged; an entry over the bound is never kept."""
    reader = CountingStore(client_store)
    sizes = {
        eid: BeforeCrop.of(
            reader.read_groups(eid, ["tokens", "bonds", "interfaces"]),
            reader.entry_meta(eid),
            reader.entry_chains(eid),
        ).nbytes
        for eid in reader.ids
    }
    # the count errs high: never under the bytes of the distinct arrays it holds
    for eid in reader.ids:
        before = BeforeCrop.of(reader.read_groups(eid, ["tokens", "bonds", "interfaces"]), {}, [])
        arrays = [*before.tokens.values(), *before.bonds.values(), *before.interfaces.values()]
        assert before.nbytes >= sum(a.nbytes for a in arrays) > 0, eid
    reader.group_reads.clear()
    bound = sorted(sizes.values())[-1] + sorted(sizes.values())[-2]  # any two entries fit, not all
    assert bound < sum(sizes.values())  # the premise: entries are evicted
    plain = _dataset(CountingStore(client_store), cache_bytes=0)
    small = _dataset(reader, cache_bytes=bound)
    cache = _cache(small)
    held_most = 0
    for p in range(N):
        _same(small.sample(p), plain.sample(p), f"position {p}")
        assert cache.nbytes <= bound, (p, cache.nbytes, bound)
        assert cache.nbytes == sum(sizes[eid] for eid in cache._items), p
        held_most = max(held_most, len(cache))
    assert held_most >= 2, held_most  # any two entries fit
    assert sum(reader.group_reads.values()) > len(reader.group_reads), (
        reader.group_reads
    )  # evicted, read again
    assert sum(reader.group_reads.values()) < sum(reader.atom_reads.values())  # and hits
    # a bound under every entry: nothing kept, every sample reads its tokens
    tiny_reader = CountingStore(client_store)
    tiny = _dataset(tiny_reader, cache_bytes=min(sizes.values()) - 1)
    for p in range(20):
        _same(tiny.sample(p), plain.sample(p), f"position {p}, tiny bound")
    assert len(_cache(tiny)) == 0 and _cache(tiny).nbytes == 0
    assert tiny_reader.group_reads == tiny_reader.atom_reads
    for ds in (plain, small, tiny):
        ds.close()


def test_the_cache_is_not_pickled_with_the_job(client_store: Path) -> None:
    """A worker's job (pickled to a process pool) starts with a cache of its own, empty."""
    ds = _dataset(client_store)
    empty = len(pickle.dumps(ds.job))
    for p in range(10):
        ds.sample(p)
    assert len(_cache(ds)) > 0
    assert len(pickle.dumps(ds.job)) == empty
    copy = pickle.loads(pickle.dumps(ds.job))
    reader = copy.source.get()
    assert reader is not ds.job.source.get() and len(copy.source.token_cache(reader)) == 0
    _same(copy(ds.sampler.key(3)), ds.job(ds.sampler.key(3)), "position 3 in a copy")
    ds.close()


def _index_of(url: str) -> str:
    """The index the service answers from now (not through a client: it would follow it)."""
    return httpx.get(f"{url}/v1/service", timeout=10).headers[INDEX_HEADER]


def _build_one(store: Path, root: Path, source: str) -> None:
    """A store of one entry, ``big``, from the real structure ``source``."""
    inputs = root / f"in-{source}"
    inputs.mkdir()
    shutil.copy(STRUCTURES / source, inputs / "big.pdb")
    summary = build_store(store, inputs, workers=1, ccd=CCD, part_size=1)
    assert summary.n_built == 1, summary.failures


def test_a_store_rebuilt_under_the_service_is_read_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The served store rebuilt from scratch with another structure under the same entry id: the
    client's next samples are the rebuilt store's (those of a fresh local dataset on it), with its
    tokens read again (once) and no whole-entry fallback."""
    served = tmp_path / "store"
    _build_one(served, tmp_path, "7pzb.pdb")
    with background_server(served, env={"FEATURECACHE_STORE_CHECK_SECONDS": "0"}) as url:
        client = CountingClient(url)
        ds = _dataset(client)
        here = _dataset(served)
        for p in range(6):
            _same(ds.sample(p), here.sample(p), f"before the rebuild, position {p}")
        assert client.group_reads == Counter({"big": 1}) and not client.whole_reads  # the premise: hits
        here.close()
        before = _index_of(url)
        shutil.rmtree(served)
        _build_one(served, tmp_path, "7DDO.pdb")  # the same id, other tokens
        for _ in range(100):
            if _index_of(url) == before:
                time.sleep(0.1)
                continue
            break
        else:
            raise AssertionError("the service never answered from the rebuilt store's index")
        caplog.set_level(logging.INFO, logger="featurecache")
        rebuilt = _dataset(served)
        assert rebuilt.job.source.get().row_count("big", "tokens") != client.row_count("big", "tokens")
        for p in range(6):
            _same(ds.sample(p), rebuilt.sample(p), f"after the rebuild, position {p}")
        assert client.group_reads == Counter({"big": 2}), client.group_reads  # read again, once
        assert not client.whole_reads, client.whole_reads
        assert len(_cache(ds)) == 1  # the old index's tokens dropped, the new one's kept
        assert not [r for r in caplog.records if "cut a residue" in r.getMessage()]
        ds.close()
        rebuilt.close()
