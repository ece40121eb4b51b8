"""A lookup-service URL that has never answered the client fails at once, naming the URL, the reason
and what to check; a client that has been answered (and its copies in worker processes) still waits
out a restart (tests/client/test_service_restart.py). Real closed ports, a real ``featurecache
serve``, real other HTTP servers (Python's file server, a uvicorn app that is not the service)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from featurecache.client import FeatureDataset
from featurecache.client.http import TOKEN_ENV, LookupClient
from featurecache.errors import ServiceUnavailable
from services.lookup.server import free_port, wait_ready

#: how long a first contact may take here before the test calls it a wait for the restart budget
#: (30 s, 39 s to the error before): the client gives up after ~2 s, the margin is for a loaded machine
FIRST_CONTACT_DEADLINE_S = 15.0


def _raised_within(call: Callable[[], Any], deadline_s: float) -> BaseException:
    """What ``call()`` raised, run in a thread that must end within ``deadline_s``."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the test
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(deadline_s)
    assert not thread.is_alive(), f"still trying after {deadline_s:g} s (the whole retry budget?)"
    assert outcome[0] is not None, "no error"
    return outcome[0]


def test_a_closed_port_fails_the_dataset_at_once_naming_url_and_reason() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    error = _raised_within(lambda: FeatureDataset(url, token=""), FIRST_CONTACT_DEADLINE_S)
    message = str(error)
    assert isinstance(error, ServiceUnavailable), repr(error)
    assert f"cannot reach the lookup service at {url}: connection refused" in message, message
    assert "featurecache serve" in message and "\n" not in message, message


def test_a_host_name_that_does_not_resolve_says_so() -> None:
    url = "http://featurecache-first-contact.invalid:8000"  # .invalid never resolves (RFC 6761)
    # a resolver may itself take seconds to give up: a deadline that only a retry budget exceeds
    error = _raised_within(lambda: LookupClient(url, token="").ids, 25.0)
    message = str(error)
    assert isinstance(error, ServiceUnavailable), repr(error)
    assert "host name 'featurecache-first-contact.invalid' does not resolve" in message, message
    assert url in message and "featurecache serve" in message, message


@contextmanager
def _process(cmd: list[str], cwd: Path, url: str) -> Iterator[str]:
    """``cmd`` (a server) running in ``cwd`` until ``url`` answers; stopped on exit."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=1.0)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, f"{cmd} did not start"
                time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait()


OTHER_APP = """\
from fastapi import FastAPI

app = FastAPI()


@app.get("/")
def root() -> dict[str, str]:
    return {"hello": "not featurecache"}
"""


def test_another_http_server_at_the_url_is_named(tmp_path: Path) -> None:
    """Python's file server (HTML 404 pages; a file where the service has ``/v1/info``: a 200 that is
    no JSON) and a FastAPI app that is not the service (JSON 404s, as the service answers them)."""
    (tmp_path / "files" / "v1").mkdir(parents=True)
    (tmp_path / "files" / "v1" / "info").write_text("<html>a page, not the service</html>")
    (tmp_path / "other_app.py").write_text(OTHER_APP)
    port = free_port()
    files = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    with _process(files, tmp_path / "files", f"http://127.0.0.1:{port}") as url:
        error = _raised_within(lambda: FeatureDataset(url, token=""), FIRST_CONTACT_DEADLINE_S)
        message = str(error)
        assert isinstance(error, ServiceUnavailable), repr(error)
        assert f"{url} does not answer as a featurecache lookup service" in message, message
        assert "GET /v1/tables/entries → 404" in message and "GET /v1/health → 404" in message, message
        assert "<html" not in message.lower(), message
        error = _raised_within(lambda: LookupClient(url, token="").info(), FIRST_CONTACT_DEADLINE_S)
        assert isinstance(error, ServiceUnavailable), repr(error)  # before: a JSONDecodeError
        assert "GET /v1/info → 200 OK" in str(error) and "<html" not in str(error).lower(), str(error)
    port = free_port()
    app = [sys.executable, "-m", "uvicorn", "other_app:app", "--host", "127.0.0.1", "--port", str(port)]
    with _process(app, tmp_path, f"http://127.0.0.1:{port}") as url:
        error = _raised_within(lambda: FeatureDataset(url, token=""), FIRST_CONTACT_DEADLINE_S)
        message = str(error)
        assert isinstance(error, ServiceUnavailable), repr(error)  # before: NotFound 'Not Found (GET …)'
        assert f"{url} does not answer as a featurecache lookup service" in message, message
        assert "GET /v1/tables/entries → 404: Not Found" in message, message


def test_the_services_own_503_is_an_answer_a_first_call_waits_for(
    client_store: Path, client_reader: Any, tmp_path: Path
) -> None:
    """A real service whose store is not there yet answers 503 with ``retry-after``: that is the
    service answering, so a first call retries for the whole budget, past ``first_contact_s``,
    and reads the store once it appears (moved into place 2.5 s after the call began: 1.5 s past
    its first contact of 1 s)."""
    import shutil

    from services.lookup.server import ThreadedServer
    from services.lookup.settings import Settings

    store = tmp_path / "later"
    with ThreadedServer(Settings(store_path=store, auth_token=None, store_retry_seconds=0)) as url:
        answer = httpx.get(f"{url}/v1/tables/entries")
        assert answer.status_code == 503 and "retry-after" in answer.headers, answer.text  # the premise

        def appear() -> None:
            time.sleep(2.5)
            shutil.copytree(client_store, tmp_path / "copy")
            (tmp_path / "copy").rename(store)  # whole at once: never a half-copied store

        later = threading.Thread(target=appear, daemon=True)
        later.start()
        client = LookupClient(url, token="", first_contact_s=1.0, retry_budget_s=60)
        try:
            assert client.ids == client_reader.ids
        finally:
            later.join()
            client.close()


class Server:
    """``featurecache serve STORE --port PORT``, stopped and started again on its port."""

    def __init__(self, store: Path) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        port = self.url.rsplit(":", 1)[1]
        self.cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", port]
        self.proc: subprocess.Popen[bytes] | None = None
        self.starting = threading.Event()  # set when a start begins (the port may listen from then on)

    def start(self) -> None:
        self.starting.set()
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

    def restart_after(self, down_s: float) -> threading.Thread:
        """Stop now, start again ``down_s`` seconds later (in a thread: join it)."""
        self.stop()
        self.starting.clear()

        def later() -> None:
            time.sleep(down_s)
            self.start()

        thread = threading.Thread(target=later, daemon=True)
        thread.start()
        return thread


def test_workers_of_a_dataset_that_reached_the_service_wait_out_a_restart(client_store: Path) -> None:
    """The dataset reached the service when it was made: its process-pool workers, started while
    the service restarts, are not a first contact (they wait, no sample is skipped), while a new
    client of the same URL is one (it fails at once)."""
    server = Server(client_store)
    server.start()
    restarted = None
    try:
        ds = FeatureDataset(server.url, token="", pool="process", workers=1, window=2, crop_size=64,
                            samples_per_epoch=4, max_source_failures=1)  # fmt: skip
        assert ds.source.spec.settings["answered"] is True  # what each worker builds its client from
        restarted = server.restart_after(6.0)  # then ~4 s to listen again
        error = _raised_within(lambda: LookupClient(server.url, token="").ids, FIRST_CONTACT_DEADLINE_S)
        assert isinstance(error, ServiceUnavailable) and "connection refused" in str(error), repr(error)
        assert not server.starting.is_set()  # the workers below start while nothing listens
        try:
            positions = sorted(int(s["position"]) for s in ds)
        finally:
            ds.close()
        assert positions == [0, 1, 2, 3]
        assert ds.stats.failures == 0 and ds.stats.deadline_skips == 0
    finally:
        if restarted is not None:
            restarted.join()
        server.stop()


def train_cli_fatal_line(url: str, tmp_path: Path) -> str:
    """Run `featurecache train --url URL` for one step (no token in its environment); it must end with
    exit 3 (fatal: the service cannot be read), no traceback and one ``error:`` line, returned."""
    cmd = [sys.executable, "-m", "featurecache.cli", "train", "--url", url, "--steps", "1", "--device", "cpu",
           "--workers", "1", "--pool", "thread", "--log", str(tmp_path / "log.json")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert len(errors) == 1, done.stderr
    return errors[0]


def test_train_cli_with_a_closed_port_ends_with_one_line(tmp_path: Path) -> None:
    """`featurecache train --url` of a closed port: exit 3 (fatal: the service cannot be read) and one
    error line naming the URL, the reason and what to check; no traceback."""
    url = f"http://127.0.0.1:{free_port()}"
    errors = [train_cli_fatal_line(url, tmp_path)]
    want = f"error: cannot reach the lookup service at {url}: connection refused"
    assert errors[0].startswith(want), errors
    assert "Is `featurecache serve` running there" in errors[0], errors
