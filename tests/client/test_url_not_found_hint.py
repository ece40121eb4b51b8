"""A lookup-service URL with extra path (``http://host:port/notthere``) reaches a real ``featurecache
serve``, whose answer to the client's first call is a 404 from no route (review R23 #6): the client
fails with one line naming the URL, that there is no lookup service at this path and what to check
(the base URL, where ``GET /v1/health`` answers), as a wrong host or port does
(tests/client/test_first_contact.py); ``featurecache train --url`` exits 3. Before, it said only
``Not Found (GET …/notthere/v1/tables/entries)``. A 404 the service means (no such entry) on a
client's first call at the right URL stays :class:`NotFound`. Real server, real store, no mocks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from featurecache.client.http import TOKEN_ENV, LookupClient
from featurecache.errors import NotFound, ServiceUnavailable
from services.lookup.server import free_port, wait_ready
from tests.client.test_first_contact import train_cli_fatal_line


@pytest.fixture(scope="module")
def served(sample_store: Path) -> Iterator[str]:
    """``featurecache serve`` of the sample store on a free port of 127.0.0.1, without a token."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(sample_store), "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, timeout=60)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _assert_hint(message: str, url: str, base: str) -> None:
    assert "\n" not in message, message
    assert f"{url}: no featurecache lookup service at this path" in message, message
    assert "GET /v1/tables/entries → 404" in message and "GET /v1/health → 404" in message, message
    assert "without extra path" in message, message
    assert f"GET {base}/v1/health answers" in message, message  # what to use instead


@pytest.mark.parametrize("extra", ["/notthere", "/v1"])
def test_a_url_with_extra_path_names_the_path_and_the_base_url(served: str, extra: str) -> None:
    url = served + extra
    client = LookupClient(url, token="")
    try:
        with pytest.raises(ServiceUnavailable) as caught:
            client.ids  # noqa: B018 (the first call: GET /v1/tables/entries)
    finally:
        client.close()
    _assert_hint(str(caught.value), url, served)


def test_a_404_the_service_means_on_a_first_call_stays_not_found(served: str) -> None:
    client = LookupClient(served, token="")
    try:
        with pytest.raises(NotFound) as caught:
            client.request("GET", "/v1/entries/no-such-entry")
    finally:
        client.close()
    assert "no featurecache lookup service" not in str(caught.value), str(caught.value)


def test_train_cli_with_extra_path_ends_with_the_hint_and_exit_3(served: str, tmp_path: Path) -> None:
    url = served + "/notthere"
    _assert_hint(train_cli_fatal_line(url, tmp_path), url, served)
