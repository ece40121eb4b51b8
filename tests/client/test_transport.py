"""The training client over a real lookup service (uvicorn on 127.0.0.1): a client's settings reach
every worker process."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.client import FeatureDataset
from featurecache.client.http import TOKEN_ENV, LookupClient
from featurecache.client.job import ServiceSpec
from services.lookup.server import background_server

TOKEN = "s3cret"
N = 6  # samples per epoch


@pytest.fixture(scope="module")
def token_server(client_store: Path) -> Iterator[str]:
    """``featurecache serve`` of the client store, requiring :data:`TOKEN`."""
    with background_server(client_store, token=TOKEN) as url:
        yield url


@pytest.fixture
def no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only an explicitly given token can authenticate (worker processes inherit this environment)."""
    monkeypatch.delenv(TOKEN_ENV, raising=False)


def _dataset(source: Any, **kw: Any) -> FeatureDataset:
    kw.setdefault("crop_size", 96)
    kw.setdefault("samples_per_epoch", N)
    kw.setdefault("max_consecutive_skips", 2)  # a 401 on every sample fails fast instead of skipping
    return FeatureDataset(source, **kw)


def _by_position(samples: Any) -> dict[int, dict[str, Any]]:
    return {int(s["position"]): s for s in samples}


# ------------------------------------------------------------------------------------ the token
@pytest.mark.usefixtures("no_env_token")
def test_explicit_token_reaches_process_pool_workers(client_store: Path, token_server: str) -> None:
    local = _dataset(client_store)
    want = _by_position(local)
    local.close()
    ds = _dataset(LookupClient(token_server, token=TOKEN), pool="process", workers=2)
    try:
        got = _by_position(ds)
    finally:
        ds.close()
    assert got.keys() == want.keys() == set(range(N))
    assert ds.stats.failures == 0
    for p, s in want.items():
        np.testing.assert_array_equal(got[p]["token_index"], s["token_index"])
        np.testing.assert_array_equal(got[p]["msa"], s["msa"])


@pytest.mark.usefixtures("no_env_token")
def test_explicit_token_reaches_dataloader_workers(token_server: str) -> None:
    ds = _dataset(LookupClient(token_server, token=TOKEN))
    positions = [int(p) for b in ds.loader(batch_size=2, num_workers=1) for p in b["position"].tolist()]
    assert sorted(positions) == list(range(N))


@pytest.mark.usefixtures("no_env_token")
def test_dataset_takes_a_token_for_a_url(token_server: str) -> None:
    ds = _dataset(token_server, token=TOKEN, pool="process", workers=1)
    try:
        assert sorted(_by_position(ds)) == list(range(N))
    finally:
        ds.close()
    with pytest.raises(ValueError, match="token"):
        _dataset("/nonexistent/store", token=TOKEN)


@pytest.mark.usefixtures("no_env_token")
def test_worker_client_has_the_settings_and_no_log_shows_the_token(token_server: str) -> None:
    client = LookupClient(token_server, token=TOKEN, timeout=7.5, retries=1, backoff=0.05)
    ds = _dataset(client)
    spec = ds.source.spec
    assert isinstance(spec, ServiceSpec)
    assert TOKEN not in repr(spec) and TOKEN not in str(spec) and TOKEN not in repr(client)
    other = pickle.loads(pickle.dumps(ds.source)).get()  # what a spawned worker opens
    assert other is not client
    assert (other.url, other.token, other.timeout, other.retries, other.backoff) == (
        token_server, TOKEN, 7.5, 1, 0.05,
    )  # fmt: skip
    assert len(other.entry(other.ids[0], ["tokens"]).tokens["restype"]) > 0
    ds.close()
