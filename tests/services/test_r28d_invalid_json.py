"""A JSON body holding ``NaN``, ``Infinity`` or ``1e400`` (Python's parser takes them, as ``inf``)
answers 422 on every POST route, logs no traceback, and no 422 echoes what the client sent
(review R28d s46 #1: 500 and two tracebacks a request, FastAPI's 422 could not render ``inf``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from lookup_helpers import raw_request

from featurecache.store.reader import LocalStore
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def server_log() -> Iterator[list[logging.LogRecord]]:
    """Every record the server logs meanwhile: the root's and uvicorn's (which does not propagate)."""
    handler = _Records()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield handler.records
    finally:
        for lg in loggers:
            lg.removeHandler(handler)


@pytest.fixture(scope="module")
def server(sample_store: Path) -> Iterator[str]:
    with ThreadedServer(Settings(store_path=sample_store, auth_token=None)) as url:
        yield url


def test_non_finite_numbers_answer_422_without_traceback(server: str, reference: LocalStore) -> None:
    key = str(reference.msas.column("key")[0].as_py())
    entry = reference.ids[0]
    requests = [  # the review's six
        (f"/v1/msas/{key}:slice", b'{"rows":[NaN]}'),
        (f"/v1/msas/{key}:slice", b'{"rows":[1e400]}'),
        ("/v1/msas/x:slice", b'{"cols":Infinity}'),
        (f"/v1/entries/{entry}:rows", b'{"group":"atoms","ranges":[[NaN,1]]}'),
        ("/v1/entries:batch", b'{"ids":[Infinity]}'),
        ("/v1/entries:batch", b'{"ids":["' + entry.encode() + b'"],"arrays":[-Infinity]}'),
    ]
    with server_log() as records:
        for target, body in requests:
            status, payload = raw_request(
                server, "POST", target, body, headers={"Content-Type": "application/json"}
            )
            assert status == 422, (target, body, status, payload[:300])
            detail = json.loads(payload)["detail"]
            assert detail and all({"loc", "msg", "type"} <= set(d) for d in detail), detail
            assert not any({"input", "ctx", "url"} & set(d) for d in detail), detail
    logged = [r for r in records if r.exc_info or r.levelno >= logging.ERROR]
    assert not logged, [r.getMessage() for r in logged]


def test_422_does_not_echo_the_body(server: str, reference: LocalStore) -> None:
    """A body of another content type: FastAPI's 422 held the whole body as ``input``."""
    key = str(reference.msas.column("key")[0].as_py())
    body = b"x" * 50_000
    status, payload = raw_request(server, "POST", f"/v1/msas/{key}:slice", body,
                                  headers={"Content-Type": "text/plain"})  # fmt: skip
    assert status == 422
    assert len(payload) < 1000 and b"xxxx" not in payload, payload[:300]
