"""``LookupClient.msa`` under a low ``max_response_bytes`` reads an MSA in about as few requests as
the limit allows (review R29a s46 #4). It halved rows on each 413 before it split any column, so an
MSA whose single full row is over the limit (a column costs 132 bytes of profile in every answer)
was read one row at a time, each row then split by columns: 838 × 154 at 6000 bytes took 21,379
requests and 76 s, and at 200,000 bytes the 15306 × 166 MSA took 161 requests where ~40 fit.

Now the client tiles the selection before it sends anything, by the service's advertised limit and
its byte count of an answer, the fewest tiles that fit. A real service (``featurecache serve`` of
the sample store) at low limits; every MSA read is byte-identical to the local reader's, and the
requests (each counted as httpx sends it) are the fewest a grid of equal tiles allows, and, where
the fixed bytes leave most of an answer, at most twice a lower bound of what any tiling needs,
plus 2."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from featurecache.client.http import LookupClient
from featurecache.store import arrow_io
from featurecache.store.arrow_io import MSA_ANSWER_FIXED_BYTES, msa_answer_bytes
from featurecache.store.reader import LocalStore
from services.lookup.payloads import msa_shapes
from services.lookup.server import background_server


def _fewest(key: str, n_rows: int, n_cols: int, limit: int) -> int:
    """The fewest requests a grid of equal tiles of ``n_rows`` × ``n_cols`` (each ≥ 1) takes under
    ``limit``, over every tile width with the tallest tile of that width that fits: the oracle,
    worked out here from the service's own count (``arrow_io.msa_answer_bytes``)."""
    best = math.inf
    for width in range(1, n_cols + 1):
        lo, hi = 0, n_rows  # the tallest tile of this width that fits, by bisection
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if msa_answer_bytes(key, mid, width) <= limit else (lo, mid - 1)
        if lo:
            best = min(best, math.ceil(n_rows / lo) * math.ceil(n_cols / width))
    return int(best)


def _bound(key: str, n_rows: int, n_cols: int, limit: int) -> int:
    """A lower bound of what any tiling takes: each answer holds the fixed bytes once and at most
    ``limit - fixed`` bytes of the rest."""
    fixed = MSA_ANSWER_FIXED_BYTES + 6 * len(key)
    return max(1, math.ceil((msa_answer_bytes(key, n_rows, n_cols) - fixed) / (limit - fixed)))


class Sends:
    """The MSA requests httpx sends (and their 413s); one past ``most`` fails at once, so the code
    before (thousands of requests) fails in seconds."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.requests = self.refused = 0
        self.most = math.inf
        send = httpx.Client.send

        def counted(client: httpx.Client, request: httpx.Request, **kwargs: object) -> httpx.Response:
            msa = request.url.path.startswith("/v1/msas/")
            if msa:
                self.requests += 1
                assert self.requests <= self.most, f"over {self.most} requests for one MSA"
            response = send(client, request, **kwargs)  # type: ignore[arg-type]
            self.refused += msa and response.status_code == 413
            return response

        monkeypatch.setattr(httpx.Client, "send", counted)

    def expect(self, most: float) -> None:
        self.requests = self.refused = 0
        self.most = most


def _same(a: object, b: object) -> None:
    for name in arrow_io.MSA_ARRAYS:
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
    assert (a.key, a.depth, a.length) == (b.key, b.depth, b.length)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def servers(sample_store: Path) -> Iterator[dict[int, str]]:
    with contextlib.ExitStack() as stack:
        yield {
            limit: stack.enter_context(background_server(sample_store, env={"FEATURECACHE_MAX_RESPONSE_BYTES": str(limit)}))
            for limit in (6000, 200_000)
        }  # fmt: skip


@pytest.mark.parametrize("limit", [6000, 200_000])
def test_an_msa_over_the_limit_takes_about_the_fewest_requests(
    servers: dict[int, str], reference: LocalStore, limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    shapes = msa_shapes(reference)
    deepest = max(shapes, key=lambda k: shapes[k][0] * shapes[k][1])
    # at 6000 bytes the deepest MSA (15306 x 166) needs thousands of requests whatever the tiling
    keys = [k for k in sorted(shapes) if limit > 6000 or k != deepest]
    if limit == 6000:  # MSAs whose single full row is over the limit
        assert any(msa_answer_bytes(k, 1, shapes[k][1]) > limit and shapes[k][0] > 1 for k in keys)
    sends = Sends(monkeypatch)
    client = LookupClient(servers[limit])

    def read(key: str, rows: np.ndarray | None = None, cols: np.ndarray | None = None) -> None:
        depth, length = shapes[key]
        n_rows, n_cols = (depth if rows is None else rows.size), (length if cols is None else cols.size)
        sends.expect(_fewest(key, n_rows, n_cols, limit))
        _same(client.msa(key, rows, cols), reference.msa(key, rows, cols))
        assert sends.refused == 0, key  # tiled by the advertised limit: nothing refused
        # within 2x of what any tiling takes, where the fixed bytes leave most of an answer (at
        # 6000 bytes they take 4.2 kB of each, and every tile's columns their 132 bytes again)
        if limit >= 4 * MSA_ANSWER_FIXED_BYTES:
            assert sends.requests <= 2 * _bound(key, n_rows, n_cols, limit) + 2, key

    try:
        client.msa_shapes()  # the index and the service's limits, fetched once
        for key in keys:
            read(key)
        if limit > 6000:  # a sample's rows: repeats, any order
            rng = np.random.default_rng(29)
            depth, length = shapes[deepest]
            read(deepest, rng.integers(0, depth, 3 * depth // 2), rng.permutation(length)[: length // 2])
    finally:
        client.close()


def test_a_service_that_does_not_advertise_the_limit_is_tiled_by_its_413(
    servers: dict[int, str], reference: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit learnt from the first 413 (its ``max`` and ``got``): one refusal, then the tiles."""
    shapes = msa_shapes(reference)
    key = max((k for k in shapes if shapes[k][0] < 1000), key=lambda k: shapes[k][0] * shapes[k][1])
    depth, length = shapes[key]
    sends = Sends(monkeypatch)
    client = LookupClient(servers[6000])
    try:
        client.msa_shapes()
        client.service_info["limits"].pop("max_response_bytes")  # as a service that does not say it
        sends.expect(_fewest(key, depth, length, 6000) + 1)
        _same(client.msa(key), reference.msa(key))
        assert sends.refused == 1
    finally:
        client.close()
