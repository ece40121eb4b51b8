"""``LookupClient.msa`` takes a row/column selection exactly as the local reader does.

README promises the HTTP client has the same interface as ``open_store()``: the same arguments
must give the same arrays (slices clamped to the axis, negative bounds and indices counted from
the end, steps, reversed slices, repeated indices) or the same error. Real ``featurecache serve``
processes over the real sample store; numpy indexing of the whole MSA is the reference for what a
selection means.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache import open_store
from featurecache.client.http import LookupClient
from featurecache.errors import InvalidRequest, NotFound
from featurecache.store.reader import LocalStore
from services.lookup.server import background_server

ARRAYS = ("residues", "deletions", "species", "source", "profile", "deletion_mean")

#: (rows, cols) in every form the local reader accepts; README's own example first
SELECTIONS: list[tuple[Any, Any]] = [
    ([0, 5, 9], slice(10, 394)),
    (None, slice(-10, None)),
    (slice(None, None, 2), None),
    ([-1], None),
    (slice(-3, None), slice(None, -100)),
    (slice(None, None, -1), slice(5, 2, -1)),
    (np.array([-1, 0, -1, 2]), [3, -2, 3]),
    (slice(2, -2, 3), slice(1, None, 7)),
    (range(4), slice(-1000, 1000)),
    (slice(100_000, None), None),
    ([], []),
    (slice(0, 2), np.zeros(0, np.int64)),
]


@pytest.fixture(scope="module")
def reference(sample_store: Path) -> Iterator[LocalStore]:
    store = open_store(sample_store)
    yield store
    store.close()


@pytest.fixture(scope="module")
def client(sample_store: Path) -> Iterator[LookupClient]:
    with background_server(sample_store) as url:
        c = LookupClient(url, retries=1)
        yield c
        c.close()


@pytest.fixture(scope="module")
def limited_client(sample_store: Path) -> Iterator[LookupClient]:
    """A service whose MSA slice limits force the client to split each selection."""
    env = {
        "FEATURECACHE_MAX_MSA_ROWS": "200",
        "FEATURECACHE_MAX_MSA_COLS": "60",
        "FEATURECACHE_MAX_MSA_CELLS": "6000",
    }
    with background_server(sample_store, env=env) as url:
        c = LookupClient(url, retries=1)
        yield c
        c.close()


def _keys(reference: LocalStore) -> list[str]:
    keys = [str(k) for k in reference.msas.column("key").to_pylist()]
    assert keys, "the sample store is built with samples/msas: it must hold MSAs"
    return keys


def _numpy_indices(sel: Any, size: int) -> np.ndarray:
    """What numpy selects from an axis of ``size`` (the meaning of a selection)."""
    axis = np.arange(size)
    if sel is None:
        return axis
    if isinstance(sel, slice):
        return axis[sel]
    return axis[np.asarray(list(sel), dtype=np.int64)]


def _assert_same(got: Any, want: Any, full: Any, rows: Any, cols: Any) -> None:
    what = f"rows={rows!r} cols={cols!r}"
    for name in ARRAYS:
        a, b = np.asarray(getattr(got, name)), np.asarray(getattr(want, name))
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.shape, b.shape, what)
        np.testing.assert_array_equal(a, b, err_msg=f"{name} {what}")
    assert (got.key, got.depth, got.length) == (want.key, want.depth, want.length)
    r = _numpy_indices(rows, full.residues.shape[0])
    c = _numpy_indices(cols, full.residues.shape[1])
    np.testing.assert_array_equal(got.residues, full.residues[np.ix_(r, c)], err_msg=what)
    np.testing.assert_array_equal(got.deletions, full.deletions[np.ix_(r, c)], err_msg=what)
    np.testing.assert_array_equal(got.species, full.species[r], err_msg=what)
    np.testing.assert_array_equal(got.profile, full.profile[c], err_msg=what)


def _check(client: LookupClient, reference: LocalStore, key: str, selections: list[tuple[Any, Any]]) -> int:
    """Each selection gives the local reader's block or the local reader's error; returns how many
    gave a block."""
    full = reference.msa(key)
    blocks = 0
    for rows, cols in selections:
        try:
            want = reference.msa(key, rows, cols)
        except InvalidRequest as local:  # e.g. row 9 of a one-row MSA
            with pytest.raises(InvalidRequest) as remote:
                client.msa(key, rows, cols)
            assert str(remote.value) == str(local), (rows, cols)
            continue
        _assert_same(client.msa(key, rows, cols), want, full, rows, cols)
        blocks += 1
    return blocks


def test_every_selection_form_gives_the_local_readers_arrays(
    client: LookupClient, reference: LocalStore
) -> None:
    blocks = sum(_check(client, reference, key, SELECTIONS) for key in _keys(reference))
    assert blocks > len(SELECTIONS)  # most forms select something from most MSAs


def test_readme_example_clamps_the_columns(client: LookupClient, reference: LocalStore) -> None:
    """``remote.msa(key, rows=[0, 5, 9], cols=slice(10, 394))`` on MSAs shorter than 394 columns."""
    shapes = {k: reference.msa(k, [], []) for k in _keys(reference)}
    short = [k for k, b in shapes.items() if b.depth >= 10 and b.length < 394]
    assert short, "the sample store has MSAs of 10 rows or more and fewer than 394 columns"
    for key in short:
        block = client.msa(key, rows=[0, 5, 9], cols=slice(10, 394))
        assert block.residues.shape == (3, shapes[key].length - 10)


def test_selections_are_split_to_fit_small_service_limits(
    limited_client: LookupClient, reference: LocalStore
) -> None:
    # deeper and wider than one limited request, shallow enough to stay a few dozen requests
    keys = [k for k in _keys(reference) if 200 < reference.msa(k, [], []).depth <= 1000]
    assert keys, "the sample store has an MSA of 200 to 1000 rows"
    extra: list[tuple[Any, Any]] = [
        (slice(None, None, -1), None),
        (slice(-300, None, 2), slice(None, None, -3)),
    ]
    for key in keys:
        assert _check(limited_client, reference, key, [*SELECTIONS, *extra]) == len(SELECTIONS) + len(extra)


def test_out_of_range_indices_are_refused_like_the_local_reader(
    client: LookupClient, reference: LocalStore
) -> None:
    key = _keys(reference)[0]
    depth, length = reference.msa(key).residues.shape
    for rows, cols in [([depth], None), ([-depth - 1], None), (None, [length]), ([0], [0, -length - 1])]:
        with pytest.raises(InvalidRequest) as local:
            reference.msa(key, rows, cols)
        with pytest.raises(InvalidRequest) as remote:
            client.msa(key, rows, cols)
        assert str(remote.value) == str(local.value)


def test_a_key_missing_from_the_cached_index_asks_the_service_for_its_shape(
    client: LookupClient, reference: LocalStore
) -> None:
    """A client whose MSA index does not name the key (e.g. fetched before the store grew) still
    resolves negative and open selections, and an unknown key is still NotFound."""
    fresh = LookupClient(client.url, retries=1)
    fresh._msa_shape = {}  # an index that names no MSA
    key = _keys(reference)[-1]
    full = reference.msa(key)
    forms: list[tuple[Any, Any]] = [([-1, 0], slice(-5, None)), (slice(None, None, 3), slice(10, 10_000))]
    for rows, cols in forms:
        _assert_same(fresh.msa(key, rows, cols), reference.msa(key, rows, cols), full, rows, cols)
    with pytest.raises(NotFound):
        fresh.msa("0000000000deadbeef00", [-1], slice(None, None, 2))
    fresh.close()
