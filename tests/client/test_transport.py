"""The training client over a real lookup service (uvicorn on 127.0.0.1): a client's settings reach
every worker process; a service that goes away or hangs fails the loop promptly."""

from __future__ import annotations

import inspect
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.client import FeatureDataset
from featurecache.client.http import TIMEOUT_RETRIES, TOKEN_ENV, LookupClient, ServiceUnavailable
from featurecache.client.job import ServiceSpec, SourceRef
from featurecache.client.sampler import SampleKey
from featurecache.errors import LoaderError
from services.lookup.server import background_server, free_port, wait_ready

TOKEN = "s3cret"
N = 6  # samples per epoch
#: small MSA slice limits of the module's service (MSA slices over them are split)
MSA_LIMITS = {
    "FEATURECACHE_MAX_MSA_CELLS": "1000",
    "FEATURECACHE_MAX_MSA_ROWS": "50",
    "FEATURECACHE_MAX_MSA_COLS": "40",
}


@pytest.fixture(scope="module")
def token_server(client_store: Path) -> Iterator[str]:
    """``featurecache serve`` of the client store, requiring :data:`TOKEN`, with the small MSA slice
    limits :data:`MSA_LIMITS` (one server for the token's tests and the limits' tests: they only read)."""
    with background_server(client_store, token=TOKEN, env=MSA_LIMITS) as url:
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


# --------------------------------------------------------------------- a service that goes away
@contextmanager
def serve(store: Path, port: int | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``featurecache serve`` in a child process (one uvicorn process: its pid is the server's)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, timeout=60)
        yield url, proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            proc.kill()
        proc.wait(timeout=30)


class Attempts:
    """Sample hook: counts the samples a pool started (threads: the count is shared)."""

    def __init__(self) -> None:
        self.n = 0
        self._lock = threading.Lock()

    def __call__(self, key: SampleKey) -> None:
        with self._lock:
            self.n += 1


def _fail_after(ds: FeatureDataset, n_before: int, stop: Any, attempts: Attempts) -> tuple[LoaderError, int]:
    """Take ``n_before`` samples, call ``stop()``, iterate on: the LoaderError and the number of
    samples the pool started after ``stop``."""
    it = iter(ds)
    for _ in range(n_before):
        next(it)
    stop()
    started = attempts.n
    with pytest.raises(LoaderError) as info:
        for _ in it:
            pass
    return info.value, attempts.n - started


@pytest.mark.usefixtures("no_env_token")
def test_a_killed_service_fails_the_loop_after_a_few_samples(client_store: Path) -> None:
    """(Its server, before it is killed, also serves the MSA shapes of
    test_msas_stay_on_after_the_service_failed_once: one server start for both.)"""
    port = free_port()
    source = _msas_stay_on_before_the_service(port)
    attempts = Attempts()
    with serve(client_store, port) as (url, proc):
        _msas_stay_on_once_served(source, client_store)
        # default limits (the old loop skipped 256 samples, ~6 min, before failing); the client's
        # retry budget cut from 30 s to 1 s: each failed sample waits it out (the budget only bounds
        # retries after a failed attempt: the samples before the kill do not depend on it)
        ds = _dataset(
            url,
            infinite=True,
            workers=2,
            window=4,
            sample_hook=attempts,
            max_consecutive_skips=256,
            client_options={"retry_budget_s": 1.0},
        )
        t0 = time.monotonic()
        error, after = _fail_after(ds, 5, proc.kill, attempts)
        elapsed = time.monotonic() - t0
        ds.close()
    message = str(error)
    assert f"the lookup service at {url} failed 3 samples in a row" in message, message
    assert "ServiceUnavailable" in message and "ConnectError" in message, message
    assert ds.stats.failures == 3  # samples skipped before the error: exactly the limit
    assert after <= 3 + 2 + 4  # the failures, plus at most what the pool and window hold
    assert elapsed < 60, elapsed  # 1 s of client retries per sample, two samples at a time


@pytest.mark.usefixtures("no_env_token")
def test_a_stopped_service_is_detected_by_the_read_timeout(client_store: Path) -> None:
    attempts = Attempts()
    with serve(client_store) as (url, proc):
        client = LookupClient(url, timeout=1.0)  # the default (20 s) waits the same way, longer
        ds = _dataset(client, infinite=True, workers=2, window=4, sample_hook=attempts,
                      max_consecutive_skips=256, max_source_failures=2)  # fmt: skip
        t0 = time.monotonic()
        error, after = _fail_after(ds, 5, lambda: os.kill(proc.pid, signal.SIGSTOP), attempts)
        elapsed = time.monotonic() - t0
        ds.close()
    message = str(error)
    assert f"the lookup service at {url} failed 2 samples in a row" in message, message
    assert "ReadTimeout" in message and f"after {1 + TIMEOUT_RETRIES} attempts" in message, message
    assert ds.stats.failures == 2 and ds.stats.deadline_skips == 0
    assert after <= 2 + 2 + 4
    assert elapsed < 30, elapsed  # two attempts of 1 s per sample, not the 60 s sample deadline


def test_default_client_gives_up_on_a_hung_service_before_the_sample_deadline() -> None:
    client = LookupClient("http://127.0.0.1:9")
    default_deadline_s = inspect.signature(FeatureDataset).parameters["deadline_s"].default
    worst = (1 + TIMEOUT_RETRIES) * client.timeout + TIMEOUT_RETRIES * client.max_backoff * 1.5
    assert worst < default_deadline_s
    # no retry starts after the budget: the last attempt may then wait a whole read timeout
    assert client.retry_budget_s + client.timeout < default_deadline_s
    client.close()


def _msas_stay_on_before_the_service(port: int) -> SourceRef:
    """test_msas_stay_on_after_the_service_failed_once, before a service listens on ``port``: a
    source of it whose MSA shapes fail once."""
    source = SourceRef(LookupClient(f"http://127.0.0.1:{port}", retries=0))
    with pytest.raises(ServiceUnavailable):  # not "a store without MSAs" for the rest of the run
        source.msa_shapes()
    return source


def _msas_stay_on_once_served(source: SourceRef, client_store: Path) -> None:
    """test_msas_stay_on_after_the_service_failed_once, once the service listens: the shapes."""
    shapes = source.msa_shapes()
    assert shapes and shapes == SourceRef(client_store).msa_shapes()


# test_msas_stay_on_after_the_service_failed_once: in test_a_killed_service_fails_the_loop_after_a_few_samples
# (its server, before it is killed)


# ------------------------------------------------------------------------------ the MSA limits
def test_msa_slices_are_split_to_fit_the_service_limits(token_server: str, client_reader: Any) -> None:
    client = LookupClient(token_server, token=TOKEN)
    shapes = SourceRef(client_reader).msa_shapes()
    key = max(shapes, key=lambda k: shapes[k][0])
    depth, length = shapes[key]
    assert depth > 50 and length > 40 and depth * length > 1000
    with pytest.raises(ValueError, match="max_msa_") as info:  # one request would be refused
        client._msa_slice(key, None, None)
    assert getattr(info.value, "limit", None) in ("max_msa_rows", "max_msa_cols", "max_msa_cells")
    rng = np.random.default_rng(0)
    rows = np.concatenate([[0], np.sort(rng.choice(np.arange(1, depth), 300, replace=False))])
    cols = np.unique(rng.choice(length, 70))
    selections = [(None, None), (rows, cols), (slice(3, None), slice(10, length - 1)), (rows[::-1], [7, 7, 1]),
                  ([0], []), (slice(0, 120), None)]  # fmt: skip
    for r, c in selections:
        got, want = client.msa(key, r, c), client_reader.msa(key, r, c)
        for name in ("residues", "deletions", "species", "source", "profile", "deletion_mean"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"{name} {r} {c}")
        assert (got.key, got.depth, got.length) == (want.key, want.depth, want.length)
    client.close()


def test_training_over_a_service_with_small_msa_limits_skips_nothing(
    client_store: Path, token_server: str
) -> None:
    local = _dataset(client_store, samples_per_epoch=10)
    want = _by_position(local)
    local.close()
    ds = _dataset(token_server, token=TOKEN, samples_per_epoch=10, max_consecutive_skips=None)
    got = _by_position(ds)
    ds.close()
    assert ds.stats.failures == 0 and got.keys() == want.keys() == set(range(10))
    assert max(s["msa"].shape[0] for s in want.values()) > 50  # deeper than one request may be
    for p, s in want.items():
        for k in ("msa", "msa_deletions", "msa_mask", "profile", "deletion_mean"):
            np.testing.assert_array_equal(got[p][k], s[k], err_msg=f"{p} {k}")


def test_train_cli_passes_its_token_to_the_service(token_server: str, tmp_path: Path) -> None:
    """`featurecache train --url URL --token T` trains over a token-protected service; without the
    token (and none in the environment) it stops with the service's refusal, not a traceback."""
    from featurecache.model.config import ModelConfig

    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    cfg = tmp_path / "tiny.json"  # the token's path is checked, not the model: a tiny one trains fast
    ModelConfig(c_token=32, c_pair=16, n_blocks=1, n_heads=1, head_dim=16, n_heads_single=2, transition_n=2,
                distogram_bins=16).to_json(cfg)  # fmt: skip
    cmd = [sys.executable, "-m", "featurecache.cli", "train", "--url", token_server, "--steps", "2", "--crop", "32",
           "--device", "cpu", "--workers", "1", "--pool", "thread", "--model-config", str(cfg)]  # fmt: skip
    # the two runs are independent: they run at once (each is mostly a CLI start importing torch)
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for args in ([*cmd, "--token", TOKEN, "--log", str(tmp_path / "ok.json")],
                          [*cmd, "--log", str(tmp_path / "no.json")])]  # fmt: skip
    try:
        (_, ok_err), (_, refused_err) = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    ok, refused = procs
    assert ok.returncode == 0, ok_err
    assert refused.returncode == 3 and "Traceback" not in refused_err, refused_err
    assert "token" in refused_err.lower() and TOKEN not in refused_err


def test_a_url_that_is_not_a_lookup_service_says_so(tmp_path: Path) -> None:
    """Another HTTP server at the URL (here Python's file server): the error says the answer was not
    the lookup service's, instead of quoting that server's HTML page."""
    from featurecache.errors import FeatureCacheError

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 30
        while True:
            try:
                import httpx

                httpx.get(url, timeout=1.0)
                break
            except httpx.HTTPError:
                if time.time() > deadline:
                    raise
                time.sleep(0.1)
        with pytest.raises(FeatureCacheError) as caught:
            LookupClient(url, retries=0).info()
        message = str(caught.value)
        assert "not the lookup service's JSON" in message and "<html" not in message.lower(), message
    finally:
        proc.kill()
        proc.wait()
