"""``run_server()`` called in a caller's long-lived process leaves its logging and its environment
as they were (review R35b s49 #8): it configured logging with ``dictConfig``, after which
``featurecache`` and ``services`` logged on uvicorn's handler without propagation (a caller's root
handlers saw no featurecache line again), the existing children of those loggers lost their levels,
every handler of the process was closed (a ``FileHandler(mode="w")`` dropped every later record),
and ``FEATURECACHE_STORE_PATH`` / ``_FEATURECACHE_SERVE_HOST`` / the token stayed in ``os.environ``
(a later ``Settings()`` read that store). A real server on 127.0.0.1 over the sample store, stopped
by SIGINT as ``featurecache serve`` is (tests/services/test_serve_signals.py); and a run that fails
at its port check, after logging was configured and the token set."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from featurecache.errors import FeatureCacheError
from services.lookup.server import free_port, run_server, wait_ready

TOKEN = "r35b-s49-token-0123456789abcdef"
#: loggers run_server's logging configuration names
CONFIGURED = ("featurecache", "services", "uvicorn", "uvicorn.error")


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        #: (level, handlers, propagate, disabled) of the loggers run_server configures, before it ran
        #: (an earlier test of this worker process may have configured uvicorn's already)
        self.before: dict[str, tuple[int, list[logging.Handler], bool, bool]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.getMessage()}")


@pytest.fixture
def caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Lines, Path, dict[str, str]]]:
    """A caller's logging (a root handler, a FileHandler(mode="w"), a level on a featurecache child
    logger) and environment (a store path of its own; no token, no serve host); whatever the run
    leaves is put back afterwards, so that a failing test leaves the next ones alone."""
    for name in ("FEATURECACHE_AUTH_TOKEN", "FEATURECACHE_AUTH_TOKEN_FILE", "_FEATURECACHE_SERVE_HOST",
                 "PROMETHEUS_MULTIPROC_DIR", "_FEATURECACHE_WORKER_FAILURES"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FEATURECACHE_STORE_PATH", str(tmp_path / "the-callers-own-store"))
    environ = dict(os.environ)
    loggers = [
        logging.root,
        *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)),
    ]
    kept = {lg: (lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in loggers}
    lines, file_handler = Lines(), logging.FileHandler(tmp_path / "caller.log", mode="w")
    existing = logging.root.manager.loggerDict
    for name in CONFIGURED:
        lg = existing.get(name)
        lines.before[name] = (
            (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
            if isinstance(lg, logging.Logger)
            else (logging.NOTSET, [], True, False)
        )
    root = logging.getLogger()
    root.addHandler(lines)
    root.addHandler(file_handler)
    root.setLevel(logging.INFO)
    logging.getLogger("featurecache.store").setLevel(logging.DEBUG)
    try:
        yield lines, tmp_path / "caller.log", environ
    finally:
        file_handler.close()
        for lg in [logging.root, *logging.root.manager.loggerDict.values()]:
            if isinstance(lg, logging.Logger):
                level, handlers, propagate, disabled = kept.get(lg, (logging.NOTSET, [], True, False))
                lg.handlers, lg.propagate, lg.disabled = handlers, propagate, disabled
                lg.setLevel(level)
        os.environ.clear()
        os.environ.update(environ)


def assert_caller_state_intact(lines: Lines, log_file: Path, environ: dict[str, str]) -> None:
    logging.getLogger("featurecache.userprobe").warning("a featurecache line after run_server")
    logging.getLogger("services.lookup.userprobe").warning("a services line after run_server")
    assert "featurecache.userprobe a featurecache line after run_server" in lines.lines, lines.lines[-10:]
    assert "services.lookup.userprobe a services line after run_server" in lines.lines, lines.lines[-10:]
    text = log_file.read_text()  # the FileHandler was neither closed nor left off the loggers
    assert "a featurecache line after run_server" in text, text[-2000:]
    for name in CONFIGURED:
        lg = logging.getLogger(name)
        assert (lg.level, lg.handlers, lg.propagate, lg.disabled) == lines.before[name], name
    assert logging.getLogger("featurecache.store").level == logging.DEBUG
    changed = {k: (environ.get(k), os.environ.get(k)) for k in set(environ) | set(os.environ)
               if environ.get(k) != os.environ.get(k) and k != "PYTEST_CURRENT_TEST"}  # fmt: skip
    assert not changed, changed  # the caller's own FEATURECACHE_STORE_PATH back, no token, no host


def test_run_server_in_process_leaves_logging_and_environ(
    sample_store: Path, caller: tuple[Lines, Path, dict[str, str]]
) -> None:
    lines, log_file, environ = caller
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    seen: dict[str, object] = {}
    returned = threading.Event()

    def stop() -> None:  # Ctrl-C, as to `featurecache serve`, once it answers
        try:
            wait_ready(url, timeout=60, path="/v1/health")
            seen["health"] = httpx.get(f"{url}/v1/health", timeout=10).status_code
            seen["environ"] = os.environ.get("FEATURECACHE_STORE_PATH")
        except Exception as exc:  # pragma: no cover - reported below
            seen["error"] = repr(exc)
        if not returned.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    stopper = threading.Thread(target=stop, daemon=True)
    stopper.start()
    try:
        run_server(sample_store, host="127.0.0.1", port=port, token=TOKEN)  # returns on SIGINT
    finally:
        returned.set()
        stopper.join(timeout=70)
    assert seen.get("health") == 200, seen
    assert seen["environ"] == str(sample_store.resolve())  # what the server's Settings() read
    # while it served, its lines went to uvicorn's handler alone, as `featurecache serve`'s do
    assert not any("serving " in line for line in lines.lines), lines.lines[-10:]
    assert_caller_state_intact(lines, log_file, environ)


def test_run_server_failing_after_its_setup_leaves_logging_and_environ(
    sample_store: Path, caller: tuple[Lines, Path, dict[str, str]]
) -> None:
    lines, log_file, environ = caller
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(FeatureCacheError, match="address already in use"):
            run_server(sample_store, host="127.0.0.1", port=port, token=TOKEN)
    assert_caller_state_intact(lines, log_file, environ)
