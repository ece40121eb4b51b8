"""The HTTP client spells an MSA selection with a vectorised ``_index_spec`` and sends a long one
(a sample's random rows) as ``POST /v1/msas/{key}:slice`` instead of a GET query (review R27d s45
#3). The spec must be the string a plain run-by-run loop writes (the reference here), and samples
drawn over a real ``featurecache serve`` of the corpus store must equal, byte for byte, those
drawn with that reference spec sent as GET queries.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.client import FeatureDataset
from featurecache.client import http as http_mod
from featurecache.client.sampler import SampleKey
from featurecache.errors import InvalidRequest
from services.lookup.server import background_server

ENTRIES = ("7a4d-assembly1", "721p-assembly1", "7pzb", "1k1a", "5kc1", "102m")
_index_spec = http_mod._index_spec  # the code under test (the reference replaces it below)


def _reference_spec(sel: Any) -> str | None:
    """Indices as the service's spec, one run at a time: ``a`` alone, ``a:b+1`` for a run a … b."""
    if sel is None or isinstance(sel, slice):
        return _index_spec(sel)  # slices: unchanged code
    idx = [int(i) for i in np.asarray(sel).reshape(-1)]
    parts, i = [], 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        parts.append(str(idx[i]) if i == j else f"{idx[i]}:{idx[j] + 1}")
        i = j + 1
    return ",".join(parts)


EDGE_SELECTIONS: list[Any] = [
    [],
    [0],
    [7],
    [0, 1, 2, 3],
    [3, 3, 3],  # repeats: runs of one
    [5, 4, 3, 2],  # decreasing
    [0, 2, 3, 4, 9, 10, 12],
    np.array([2**40, 2**40 + 1, 5], np.int64),
    np.arange(16384, dtype=np.int32),
    np.array([[1, 2], [3, 9]]),  # any shape reads flat
    range(5, 9),
]


@pytest.mark.parametrize("sel", EDGE_SELECTIONS, ids=range(len(EDGE_SELECTIONS)))
def test_index_spec_equals_the_run_by_run_reference(sel: Any) -> None:
    assert _index_spec(sel) == _reference_spec(sel)


def test_index_spec_random_selections() -> None:
    rng = np.random.default_rng(0)
    for depth in (2, 17, 1000, 16384):
        for n in (1, 2, 16, 200, 1024):
            rows = np.r_[0, np.sort(rng.choice(np.arange(1, depth), size=min(n, depth - 1), replace=False))]
            assert _index_spec(rows) == _reference_spec(rows)
            shuffled = rng.permutation(rows)
            assert _index_spec(shuffled) == _reference_spec(shuffled)


def test_index_spec_refusals_unchanged() -> None:
    with pytest.raises(InvalidRequest):
        _index_spec([3, -1])
    with pytest.raises(InvalidRequest):
        _index_spec(slice(0, 10, 2))


@pytest.fixture(scope="module")
def url(corpus_store: Path) -> Iterator[str]:
    with background_server(corpus_store) as u:
        yield u


def _draw(url: str, keys: list[SampleKey]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    sent: list[tuple[str, str]] = []
    request = http_mod.LookupClient.request

    def recording(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        if path.startswith("/v1/msas/"):
            sent.append((method, path))
        return request(self, method, path, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(http_mod.LookupClient, "request", recording)
        ds = FeatureDataset(url, crop_size=384, weighting="uniform", seed=0, workers=1)
        samples = [ds.job(k) for k in keys]
    return samples, sent


def test_samples_over_http_equal_the_get_reference(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [SampleKey(i, 0, i, e, ()) for e in ENTRIES for i in range(3)]
    new, sent = _draw(url, keys)
    with monkeypatch.context() as m:
        m.setattr(http_mod, "_index_spec", _reference_spec)
        m.setattr(http_mod, "_MAX_QUERY_CHARS", 10**9)  # every selection a GET query, as before
        ref, sent_ref = _draw(url, keys)
    assert {m for m, _ in sent_ref} == {"GET"}
    # the rows of deep MSAs went by POST :slice; short selections (shape probes) stayed GETs
    assert any(m == "POST" and p.endswith(":slice") for m, p in sent)
    for k, a, b in zip(keys, new, ref, strict=True):
        arrays = [x for x in b if isinstance(b[x], np.ndarray)]
        assert arrays
        for x in arrays:
            assert (a[x].dtype, a[x].shape, a[x].tobytes()) == (b[x].dtype, b[x].shape, b[x].tobytes()), (
                k,
                x,
            )


def test_short_selections_stay_get(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A selection of at most :data:`_MAX_QUERY_CHARS` characters is a GET query; one longer, a POST."""
    client = http_mod.LookupClient(url, retries=1)
    try:
        key, (depth, _) = max(client.msa_shapes().items(), key=lambda kv: kv[1][0])
        sent: list[str] = []
        request = http_mod.LookupClient.request

        def recording(self: Any, method: str, path: str, **kwargs: Any) -> Any:
            sent.append(method)
            return request(self, method, path, **kwargs)

        monkeypatch.setattr(http_mod.LookupClient, "request", recording)
        short = np.arange(0, 40, 2)
        long = np.arange(0, min(depth, 400), 2)
        assert len(_index_spec(short)) <= http_mod._MAX_QUERY_CHARS < len(_index_spec(long))
        a = client.msa(key, short, slice(0, 5))
        b = client.msa(key, long, slice(0, 5))
        assert sent == ["GET", "POST"]
        np.testing.assert_array_equal(b.residues[: short.size], a.residues)
    finally:
        client.close()
