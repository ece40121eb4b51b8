"""Library exceptions → HTTP answers. Client mistakes are 4xx with a message saying what was wrong.
A read that fails is judged by whether the store changed under the reader that failed
(:meth:`StoreHolder.unchanged`): if it did (rebuilt, extended, removed), a 503 the client retries
while the holder reopens the store; if it did not, the data itself is damaged (a shard that fails
its checksum, a missing file) and retrying cannot help: a 500 naming the entry or MSA and saying
it is unreadable. No answer names a path on the server (the library's messages do; they are
logged here, and redacted before they are sent)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError, ResponseValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from featurecache.errors import FeatureCacheError, InvalidRequest, NotFound, StoreError
from services.lookup import metrics
from services.lookup.hosts import ALLOWED_HOSTS_ENV, HostCheck
from services.lookup.middleware import allowed_methods
from services.lookup.params import LimitExceeded
from services.lookup.state import StoreHolder, StoreNotReadable, StoreUnavailable

log = logging.getLogger(__name__)

#: what a client reads when the store failed under its request (the cause is in the server's log)
STORE_READ_FAILED = "the store could not be read (it may be being rebuilt or extended); retry later"
RETRY_AFTER = {"retry-after": "5"}
#: what a 422 leaves out of each of pydantic's errors: the client's own value (``input``, up to a
#: whole body), the rule's parameters (``ctx``: its message already says them) and pydantic's docs link
VALIDATION_ERROR_KEYS_DROPPED = frozenset({"input", "ctx", "url"})


def _holder(request: Request) -> StoreHolder:
    holder: StoreHolder = request.app.state.store
    return holder


def install(app: FastAPI) -> None:
    @app.exception_handler(405)
    async def method_not_allowed(request: Request, exc: HTTPException) -> Response:
        """FastAPI's answer, with an ``allow`` that lists every method the path answers: the
        router's names only the methods of the one route it matched, without the HEAD (and OPTIONS
        on the probe paths) that the middleware answers (s24 closing note)."""
        response = await http_exception_handler(request, exc)
        response.headers["allow"] = allowed_methods(request.app.router.routes, request.scope)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 naming where and why, as FastAPI's handler, less what the client sent: FastAPI's
        echoed ``input``, and a JSON body holding ``NaN``, ``Infinity`` or ``1e400`` (Python's
        parser takes them; the value is ``inf``) made that 422 fail to render (a JSON answer allows
        no ``inf``): a 500 and two tracebacks in the log per request (review R28d s46 #1)."""
        dropped = VALIDATION_ERROR_KEYS_DROPPED
        errors = [{k: v for k, v in e.items() if k not in dropped} for e in exc.errors()]
        return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": _holder(request).redact(str(exc))}, status_code=404)

    @app.exception_handler(LimitExceeded)
    async def limit_exceeded(request: Request, exc: LimitExceeded) -> JSONResponse:
        return JSONResponse(
            {"detail": str(exc), "limit": exc.limit, "max": exc.maximum, "got": exc.got}, status_code=413
        )

    @app.exception_handler(InvalidRequest)
    async def invalid(request: Request, exc: InvalidRequest) -> JSONResponse:
        return JSONResponse({"detail": _holder(request).redact(str(exc))}, status_code=422)

    @app.exception_handler(StoreUnavailable)
    async def unavailable(request: Request, exc: StoreUnavailable) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503, headers=RETRY_AFTER)

    @app.exception_handler(StoreNotReadable)
    async def not_readable(request: Request, exc: StoreNotReadable) -> JSONResponse:
        """A store of a format this server does not read: 500 without ``retry-after``, which
        ``LookupClient`` raises at once (a 503 it retried until its deadline: review R28c s46 #10)."""
        return JSONResponse({"detail": str(exc)}, status_code=500)

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> JSONResponse:
        holder = _holder(request)
        if holder.unchanged(getattr(request.state, "reader", None)):
            log.error("damaged store data on %s %s: %s", request.method, request.url.path, exc)
            return JSONResponse({"detail": holder.redact(str(exc))}, status_code=500)
        # the store changed under the reader (rebuilt, extended, removed): look again before the next read
        holder.recheck()
        log.error("store error on %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": STORE_READ_FAILED}, status_code=503, headers=RETRY_AFTER)


class StoreRoute(APIRoute):
    """A route that reads the store. An exception that no handler knows, raised while it runs, is
    the store failing under the reader (after a rebuild zarr raises ``ValueError: cannot reshape``,
    a shard cut short fails to decode): it becomes a :class:`StoreError` naming the request, which
    the StoreError handler answers 503 (retryable; the holder looks at the store again) when the
    store changed under the reader, else 500. The traceback is logged. A service without a token
    answers 400 first to a ``Host`` a DNS-rebinding page could send (:mod:`services.lookup.hosts`).

    An answer read without an error is still not sent when the store changed while it was read
    (:meth:`StoreHolder.current`, one ``stat`` after the read): zarr reads a shard removed under it
    as zeros, and a store rebuilt or swapped in under the same part names gives another build's
    rows at the old index's offsets (review R12 s39 H1, H2). It is a 503 the client retries; a
    streamed answer checks before each entry it sends (:func:`current_only`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def read_store(request: Request) -> Response:
            host_check: HostCheck | None = getattr(request.app.state, "host_check", None)
            refusal = host_check.refusal(request.headers.get("host")) if host_check is not None else None
            if refusal is not None:
                return JSONResponse({"detail": refusal, "setting": ALLOWED_HOSTS_ENV}, status_code=400)
            try:
                response = await handler(request)
                if not isinstance(response, StreamingResponse):  # (a stream checks each entry it sends)
                    _require_current(request, "read")
                return response
            except (
                FeatureCacheError, HTTPException, RequestValidationError, ResponseValidationError,
                ClientDisconnect,
            ):  # fmt: skip
                raise
            except Exception as exc:
                log.exception("reading the store failed on %s %s", request.method, request.url.path)
                raise StoreError(
                    f"{request.method} {request.url.path}: the store could not be read "
                    f"({type(exc).__name__}: {exc})"
                ) from exc

        return read_store


def current_only(request: Request, pieces: Iterator[bytes]) -> Iterator[bytes]:
    """``pieces`` (each read from the store by the request's reader), each sent only while that reader
    is still the store's (:meth:`StoreHolder.current`, asked after the piece was read): a store
    removed, rebuilt or swapped during a streamed batch ends the stream there with an error (the
    connection is cut: ``LookupClient`` reads the batch's entries again one by one) instead of
    sending the new build's rows, or zeros, under the ids asked for (review R12 s39 H2)."""
    for piece in pieces:
        _require_current(request, "streamed")
        yield piece


def count_sent_entries(pieces: Iterator[bytes], n_entries: int) -> Iterator[bytes]:
    """The pieces of an entries stream (its schema, one piece per entry, its end-of-stream marker),
    each entry counted in ``entries_served_total`` once it was sent: when the next piece is asked
    for, which a streamed answer does only after the previous one went to the client. A client that
    goes away mid-batch counts the entries it was sent, not the batch (review R28d s46 #6)."""
    for i, piece in enumerate(pieces):
        yield piece
        if 1 <= i <= n_entries:
            metrics.ENTRIES.inc()


def _require_current(request: Request, what: str) -> None:
    """StoreUnavailable (503, retried) when the reader the request read with is no longer the
    store's (:meth:`StoreHolder.current`); the holder looks again before the next read. Nothing for a
    request that read no store."""
    reader = getattr(request.state, "reader", None)
    holder = _holder(request)
    if reader is not None and not holder.current(reader):
        holder.recheck()
        log.warning("the store changed while %s %s was %s", request.method, request.url.path, what)
        raise StoreUnavailable(f"{request.method} {request.url.path}: the store changed while it was {what}")


def guard_stream(request: Request, pieces: Iterator[bytes]) -> Iterator[bytes]:
    """The rest of a streamed answer whose status is already sent: a store failing now cuts the
    connection (the client sees an incomplete body: ``LookupClient`` then reads a batch's entries one
    by one, and a damaged one answers 500 naming it); the holder looks again first."""
    try:
        yield from pieces
    except Exception:
        _holder(request).recheck()
        log.exception("reading the store failed while streaming %s %s", request.method, request.url.path)
        raise
