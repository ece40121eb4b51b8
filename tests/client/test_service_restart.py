"""The HTTP client rides out a restart of the lookup service: a real ``featurecache serve`` (uvicorn on
127.0.0.1) is stopped and started again on the same port a few seconds later, longer than the
service's own start (3.7 s with one worker), while a client and a training loop read from it."""

from __future__ import annotations

import os
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
from featurecache.client.http import TOKEN_ENV, LookupClient
from featurecache.errors import InvalidRequest, ServiceUnavailable
from services.lookup.server import free_port, wait_ready

#: seconds between stopping the server and starting it again (then it takes ~4 s to listen):
#: longer than the old client's whole retry window (0.2 + 0.4 + 0.8 + 1.6 s, ±50 % jitter)
DOWN_S = 5.0


class Server:
    """``featurecache serve STORE --port PORT`` that can be stopped and started again on its port."""

    def __init__(self, store: Path, port: int) -> None:
        self.cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port)]
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
        self.proc = subprocess.Popen(self.cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_ready(self.url, timeout=60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart_later(self) -> threading.Thread:
        """Stop now; start again :data:`DOWN_S` seconds later, in a thread (join it)."""
        self.stop()

        def start_later() -> None:
            time.sleep(DOWN_S)
            self.start()

        thread = threading.Thread(target=start_later, daemon=True)
        thread.start()
        return thread


@contextmanager
def server(store: Path) -> Iterator[Server]:
    s = Server(store, free_port())
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def running(client_store: Path) -> Iterator[Server]:
    """One server for the module's tests (each start takes seconds): a test that restarts it joins
    the restart, so the next test finds it serving again (:func:`serving`)."""
    with server(client_store) as s:
        yield s


@contextmanager
def serving(running: Server) -> Iterator[Server]:
    """The module's server, answering when the test starts, as a fresh one would (started again
    if an earlier test left it stopped)."""
    if running.proc is None or running.proc.poll() is not None:
        running.start()
    wait_ready(running.url, timeout=60)
    yield running


def test_a_call_made_while_the_service_restarts_waits_for_it(client_reader: Any, running: Server) -> None:
    entry_id = client_reader.ids[0]
    want = client_reader.entry(entry_id, ["tokens", "atoms/coords"])
    with serving(running) as s:
        client = LookupClient(s.url, token="")  # default retry settings
        assert client.ids == client_reader.ids  # connected: tables fetched
        restarted = s.restart_later()
        try:
            got = client.entry(entry_id, ["tokens", "atoms/coords"])  # refused for ~DOWN_S + 4 s
        finally:
            restarted.join()
            client.close()
    assert got.tokens.keys() == want.tokens.keys()
    for name, column in want.tokens.items():
        np.testing.assert_array_equal(got.tokens[name], column, err_msg=name)
    np.testing.assert_array_equal(got.atoms["coords"], want.atoms["coords"])


def test_training_over_a_restarting_service_skips_no_sample(client_store: Path, running: Server) -> None:
    kw: dict[str, Any] = dict(crop_size=64, seed=1, workers=2, window=4, samples_per_epoch=12)
    local = FeatureDataset(client_store, **kw)
    want = {int(s["position"]): s for s in local}
    local.close()
    with serving(running) as s:
        ds = FeatureDataset(s.url, token="", **kw)  # the default client, as the reviewer ran it
        it = iter(ds)
        got = {}
        restarted = None
        try:
            for sample in it:
                got[int(sample["position"])] = sample
                assert not sample["skipped"], sample["skipped"]
                if len(got) == 3:
                    restarted = s.restart_later()
        finally:
            ds.close()
            if restarted is not None:
                restarted.join()
    assert restarted is not None
    assert ds.stats.failures == 0 and ds.stats.deadline_skips == 0
    assert got.keys() == want.keys() == set(range(12))
    for p, sample in want.items():
        np.testing.assert_array_equal(got[p]["token_index"], sample["token_index"])
        np.testing.assert_array_equal(got[p]["msa"], sample["msa"])


def test_the_retry_budget_bounds_the_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    client = LookupClient(url, retry_budget_s=0.5, backoff=0.05)
    with pytest.raises(ServiceUnavailable, match="ConnectError") as info:
        client.info()
    attempts = int(str(info.value).split("after ")[1].split(" attempts")[0])
    assert attempts >= 2  # retried within the budget, then gave up
    with pytest.raises(ServiceUnavailable, match=r"after 1 attempts"):
        LookupClient(url, retries=0).info()  # retries still caps the count
    with pytest.raises(ServiceUnavailable, match=r"after 3 attempts"):
        LookupClient(url, retries=2, backoff=0.01).info()


def test_dataset_passes_client_options_to_its_client(client_store: Path, running: Server) -> None:
    with serving(running) as s:
        ds = FeatureDataset(s.url, token="t0k", client_options={"retry_budget_s": 12.5, "timeout": 7.0})
        settings = ds.source.spec.settings  # what each worker process builds its client from
        assert (settings["retry_budget_s"], settings["timeout"], settings["token"]) == (12.5, 7.0, "t0k")
        ds.close()
    with pytest.raises(InvalidRequest, match="retry_budget"):
        FeatureDataset("http://127.0.0.1:9", client_options={"retry_budget": 3})
    with pytest.raises(InvalidRequest, match="URL"):
        FeatureDataset(client_store, client_options={"retry_budget_s": 3})
