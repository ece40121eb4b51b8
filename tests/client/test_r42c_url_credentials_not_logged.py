"""Review R42c s52 #2: the credentials of a lookup-service URL stay out of request URLs, and so out
of httpx's INFO log lines.

``LookupClient('http://alice:PW@host:port')`` gave httpx a base URL with the userinfo, and httpx logs
every request's URL at INFO (``HTTP Request: GET http://alice:PW@...``), from every loader worker of
a script with ``logging.basicConfig(level=INFO)``. The client now gives httpx the URL without it and
the credentials as Basic auth: the server (here a real Basic-auth proxy in front of a real
``featurecache serve``, which records the ``Authorization`` header of every request) gets the same
header as before (percent-decoded user and password, as httpx decoded a URL's userinfo; the header
asserts passed before the fix too, the log ones failed). Real servers on 127.0.0.1, no mocks."""

from __future__ import annotations

import base64
import http.client
import http.server
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from featurecache.auth import TOKEN_FILE_ENV
from featurecache.client.http import TOKEN_ENV, LookupClient
from featurecache.errors import ServiceUnavailable
from services.lookup.server import free_port, wait_ready

#: hop-by-hop headers a proxy does not pass on (and those it sets again itself)
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer", "upgrade"}


def _serve(
    store: Path, host: str = "127.0.0.1", token: str | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port(host)
    url = f"http://{host}:{port}"
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--host", host, "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, TOKEN_FILE_ENV)}
    if token is not None:
        env[TOKEN_ENV] = token
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, timeout=60, token=token)
    except BaseException:
        _stop(proc)
        raise
    return proc, url


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def served(sample_store: Path) -> Iterator[str]:
    """``featurecache serve`` of the sample store on a free port of 127.0.0.1, without a token."""
    proc, url = _serve(sample_store)
    try:
        yield url
    finally:
        _stop(proc)


class BasicAuthProxy:
    """A real HTTP reverse proxy on 127.0.0.1 that asks for HTTP Basic auth (``user``/``password``)
    and passes what it lets through on to ``upstream``; ``seen`` records (method, request target,
    ``Authorization`` header) of every request it got."""

    def __init__(self, upstream: str, user: str, password: str) -> None:
        self.expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.seen: list[tuple[str, str, str | None]] = []
        host, _, port = upstream.removeprefix("http://").partition(":")
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _relay(self) -> None:
                auth = self.headers.get("authorization")
                proxy.seen.append((self.command, self.path, auth))
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if auth != proxy.expected:
                    self.send_response(401)
                    self.send_header("www-authenticate", 'Basic realm="lookup"')
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP | {"authorization"}}
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                    self.send_response(answer.status, answer.reason)
                    for k, v in answer.getheaders():
                        if k.lower() not in _HOP:
                            self.send_header(k, v)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_POST = do_HEAD = _relay

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


#: (user, password) as written in the URL: plain, and percent-encoded (@ : / % in them)
CREDENTIALS = [("alice", "HTTPXLOGPW"), ("al%40ice", "p%3Aw%2Fd%25HTTPXLOGPW")]


@pytest.fixture(params=CREDENTIALS, ids=["plain", "percent-encoded"])
def proxy(request: pytest.FixtureRequest, served: str) -> Iterator[tuple[BasicAuthProxy, str, str]]:
    user, password = request.param
    front = BasicAuthProxy(served, unquote(user), unquote(password))
    try:
        yield front, user, password
    finally:
        front.close()


def _no_secret_logged(records: list[logging.LogRecord], secrets: tuple[str, ...]) -> None:
    for record in records:
        text = record.getMessage()
        assert not any(s in text for s in secrets), f"{record.name}: {text}"


def test_url_credentials_go_as_basic_auth_and_never_into_httpx_log_lines(
    proxy: tuple[BasicAuthProxy, str, str], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    front, user, password = proxy
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    client = LookupClient(front.url.replace("http://", f"http://{user}:{password}@"))
    try:
        with caplog.at_level(logging.INFO, logger="httpx"):
            ids = client.ids
            entry = client.entry(ids[0], arrays=["bonds"])
    finally:
        client.close()
    assert ids and entry.id == ids[0]
    # the proxy got the Basic header the URL's userinfo means (percent-decoded) on every request, as
    # before the fix (these asserts passed then too)
    assert len(front.seen) >= 2
    assert all(auth == front.expected for _, _, auth in front.seen), front.seen
    httpx_lines = [r for r in caplog.records if r.name == "httpx"]
    assert len(httpx_lines) >= 2, caplog.text  # httpx did log each request, at INFO
    _no_secret_logged(caplog.records, (password, unquote(password), f"{user}:"))
    assert all(f"{front.url}/v1/" in r.getMessage() for r in httpx_lines), caplog.text


def test_the_health_check_at_the_servers_root_carries_the_credentials_not_in_its_url(
    proxy: tuple[BasicAuthProxy, str, str], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A URL with extra path: the client asks ``GET /v1/health`` at the server's root too (an
    absolute URL, built from the client's URL: it held the credentials)."""
    front, user, password = proxy
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    client = LookupClient(front.url.replace("http://", f"http://{user}:{password}@") + "/notthere")
    try:
        with caplog.at_level(logging.INFO, logger="httpx"), pytest.raises(ServiceUnavailable) as caught:
            client.ids  # noqa: B018 (the first call)
    finally:
        client.close()
    assert f"GET {front.url}/v1/health answers ok" in str(caught.value), str(caught.value)
    assert ("GET", "/v1/health", front.expected) in front.seen, front.seen  # the root's, with the header
    assert all(auth == front.expected for _, _, auth in front.seen), front.seen
    _no_secret_logged(caplog.records, (password, unquote(password), f"{user}:"))
    assert password not in str(caught.value)
