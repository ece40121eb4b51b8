"""``max_response_bytes`` bounds MSA slices too (review R28d s46 #2: repeated indices made a 101 MB
answer of a 42 kB request whatever the limit said): the service checks its estimate of the answer
before reading anything, 413 naming the limit, and ``LookupClient.msa`` splits a selection the
service refuses so, as it splits a batch of entries: the MSA read over a service with a low limit
is the path reader's, byte for byte."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from lookup_helpers import raw_request

from featurecache.client.http import LookupClient
from featurecache.store import arrow_io
from featurecache.store.arrow_io import MSA_ANSWER_FIXED_BYTES, msa_answer_bytes
from featurecache.store.reader import LocalStore
from services.lookup.payloads import msa_bytes, msa_shapes
from services.lookup.server import background_server

LIMIT = 200_000


def _deepest(reference: LocalStore) -> tuple[str, int, int]:
    key, (depth, length) = max(msa_shapes(reference).items(), key=lambda kv: kv[1][0] * kv[1][1])
    return key, depth, length


@pytest.fixture(scope="module")
def low_limit(sample_store: Path) -> Iterator[str]:
    with background_server(sample_store, env={"FEATURECACHE_MAX_RESPONSE_BYTES": str(LIMIT)}) as url:
        yield url


def test_the_estimate_is_never_below_the_answer(reference: LocalStore) -> None:
    rng = np.random.default_rng(28)
    shapes = msa_shapes(reference)
    assert max(d for d, _ in shapes.values()) > 1000  # deep MSAs among them
    for key, (depth, length) in shapes.items():
        none = np.zeros(0, np.int64)
        selections = [
            (np.arange(depth), np.arange(length)), (none, none), (np.arange(1), np.arange(length)),
            (np.arange(depth), none), (none, np.arange(length)),
            (rng.integers(0, depth, 3 * depth), rng.integers(0, length, 7)),  # repeats, any order
        ]  # fmt: skip
        for rows, cols in selections:
            real = len(msa_bytes(reference.msa(key, rows, cols)))
            estimate = msa_answer_bytes(key, rows.size, cols.size)
            assert real <= estimate <= real + MSA_ANSWER_FIXED_BYTES + 6 * len(key), (
                key,
                rows.size,
                cols.size,
            )


def test_a_slice_over_max_response_bytes_answers_413(low_limit: str, reference: LocalStore) -> None:
    key = _deepest(reference)[0]
    body = json.dumps({"rows": [0] * 16384, "cols": [0] * 2048}).encode()  # the review's 2^25 cells
    status, payload = raw_request(low_limit, "POST", f"/v1/msas/{key}:slice", body,
                                  headers={"Content-Type": "application/json"})  # fmt: skip
    doc = json.loads(payload)
    assert status == 413, doc
    assert doc["limit"] == "max_response_bytes" and doc["max"] == LIMIT
    assert doc["got"] == msa_answer_bytes(key, 16384, 2048)
    assert f"max_response_bytes={LIMIT}" in doc["detail"]
    status, payload = raw_request(low_limit, "GET", f"/v1/msas/{key}")  # the whole MSA
    assert status == 413 and json.loads(payload)["limit"] == "max_response_bytes"


def _same(a: object, b: object) -> None:
    for name in arrow_io.MSA_ARRAYS:
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
    assert (a.key, a.depth, a.length) == (b.key, b.depth, b.length)  # type: ignore[attr-defined]


def test_the_client_splits_what_the_limit_refuses(low_limit: str, reference: LocalStore) -> None:
    key, depth, length = _deepest(reference)
    assert msa_answer_bytes(key, depth, length) > 5 * LIMIT  # many requests' worth
    rng = np.random.default_rng(46)
    rows = rng.integers(0, depth, 2 * depth)  # repeats, any order
    cols = rng.permutation(length)[: length // 2]
    client = LookupClient(low_limit)
    try:
        _same(client.msa(key), reference.msa(key))
        _same(client.msa(key, rows, cols), reference.msa(key, rows, cols))
        _same(
            client.msa(key, slice(5, None), slice(None, 40)),
            reference.msa(key, slice(5, None), slice(None, 40)),
        )
    finally:
        client.close()
