"""The HTTP protocol every connection of ``featurecache serve`` runs: uvicorn's, with ``TCP_NODELAY``
and caps on what a client may send before its request reaches the app (and the token check there).

uvicorn's httptools protocol keeps every byte of a request's target and header lines until the
head is complete, with no cap: one connection that sends ``GET /`` and then 400 MiB without a
newline grew the server by 400 MiB (review R26d s44 #2). So the target's bytes are counted as the
parser hands them over (``on_url``) and the head's as they arrive (the parser keeps a header line
it has not finished inside itself, where no callback sees it); past a cap the client gets 414 or
431 and the connection is closed, holding at most the cap and one read of the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from dataclasses import dataclass
from typing import Any

from uvicorn.config import Config

from services.lookup.logs import handlers_kept

log = logging.getLogger(__name__)

try:  # uvicorn's fast parser when installed (uvicorn[standard]), else its pure-Python one
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _HTTPProtocol

    _HTTPTOOLS = True
except ImportError:  # pragma: no cover - depends on the installed extras
    from uvicorn.protocols.http.h11_impl import H11Protocol as _HTTPProtocol  # type: ignore[assignment]

    _HTTPTOOLS = False


@dataclass(frozen=True)
class ConnectionLimits:
    """What one connection may send before its request is handed to the app (the settings
    ``FEATURECACHE_MAX_URL_BYTES`` and ``FEATURECACHE_MAX_HEADER_BYTES``)."""

    max_url_bytes: int = 64 * 2**10
    max_header_bytes: int = 64 * 2**10
    #: ``FEATURECACHE_HEADER_TIMEOUT_SECONDS``: a connection with no complete head this long after
    #: it was made (or after a request's first byte) is closed: 500 silent connections were held
    #: open for good, and past the fd limit nobody could connect (review R26d s44 #3)
    header_timeout_s: float = 10.0

    @classmethod
    def from_settings(cls, settings: Any) -> ConnectionLimits:
        return cls(
            max_url_bytes=settings.max_url_bytes,
            max_header_bytes=settings.max_header_bytes,
            header_timeout_s=settings.header_timeout_seconds,
        )


class ServiceConfig(Config):
    """uvicorn's Config with the :class:`ConnectionLimits` its connections apply (it travels with
    the config to every worker process)."""

    def __init__(
        self, app: Any, *, connection_limits: ConnectionLimits | None = None, **options: Any
    ) -> None:
        self.connection_limits = connection_limits or ConnectionLimits()
        # no "server: uvicorn" banner on every answer (review R28d s46 #9)
        options.setdefault("server_header", False)
        if not _HTTPTOOLS:  # pragma: no cover - h11 has its own cap on an unfinished head
            options.setdefault(
                "h11_max_incomplete_event_size",
                self.connection_limits.max_url_bytes + self.connection_limits.max_header_bytes,
            )
        super().__init__(app, **options)

    def configure_logging(self) -> None:
        """uvicorn's, whose ``dictConfig`` leaves the process's handlers as they are: it closed them
        all, a caller's too when the server runs in its process (review R35b s49 #8)."""
        with handlers_kept():
            super().configure_logging()


class _Refused(Exception):
    """Raised in a parser callback: the request was over a cap (stops the parser at once)."""


class NoDelayHTTPProtocol(_HTTPProtocol):
    """uvicorn's HTTP protocol with ``TCP_NODELAY`` set on every connection, and a request's target
    and head capped (:class:`ConnectionLimits`: 414, 431, then the connection is closed).

    Why ``TCP_NODELAY``: with ``--workers N`` uvicorn binds the shared socket without
    ``IPPROTO_TCP``, so neither asyncio nor uvloop sets it on accepted connections. A response's
    headers and body then leave as two segments and Nagle's algorithm holds the body until the
    client's delayed ACK: every request took 40+ ms longer (measured: /v1/health 44 ms vs 1.3 ms).
    """

    def __init__(self, config: Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.limits: ConnectionLimits = getattr(config, "connection_limits", None) or ConnectionLimits()
        self._refused = False  # answered 414/431: the rest of what the client sends is dropped unread
        self._reading_head = True  # between requests or inside a head: what arrives is head bytes
        self._began = False  # a request began in the read being parsed
        self._head_bytes = 0  # bytes of the head being read (from the read after the one it began in)
        self._url_bytes = 0
        self._header_bytes = 0  # of the header lines the parser has handed over
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not _HTTPTOOLS:  # pragma: no cover - h11: its own cap (ServiceConfig)
            super().data_received(data)
            return
        in_head = self._reading_head
        self._began = False
        super().data_received(data)
        # a read that began a request is not counted (where its head starts in it is not known):
        # what is held stays below the cap plus one read of the socket
        if in_head and self._reading_head and not self._began and not self._refused:
            self._head_bytes += len(data)
            if self._head_bytes - self._url_bytes > self.limits.max_header_bytes:
                self._refuse(
                    431, "header lines", self.limits.max_header_bytes, "FEATURECACHE_MAX_HEADER_BYTES"
                )

    # ------------------------------------------------------------------ parser callbacks (httptools)
    def on_message_begin(self) -> None:
        self._reading_head, self._began = True, True
        self._head_bytes = self._url_bytes = self._header_bytes = 0
        self._arm_head_timer()  # a kept-alive connection: from the request's first byte
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._url_bytes += len(url)
        if self._url_bytes > self.limits.max_url_bytes:
            self._refuse(
                414,
                "request target (path and query)",
                self.limits.max_url_bytes,
                "FEATURECACHE_MAX_URL_BYTES",
            )
            raise _Refused
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4  # "name: value\r\n"
        if self._header_bytes > self.limits.max_header_bytes:
            self._refuse(431, "header lines", self.limits.max_header_bytes, "FEATURECACHE_MAX_HEADER_BYTES")
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._disarm_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._reading_head = True
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        if not self._refused:  # uvicorn's answer to a parser error, not to one :meth:`_refuse` answered
            super().send_400_response(msg)

    # ------------------------------------------------------------------ internals
    def _arm_head_timer(self) -> None:
        if _HTTPTOOLS and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._reading_head or self._refused or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:  # a pipelined request waits
            self._arm_head_timer()
            return
        log.debug("closed a connection from %s: no complete request head within %g s (FEATURECACHE_HEADER_TIMEOUT_"
                  "SECONDS)", self.client, self.limits.header_timeout_s)  # fmt: skip
        self.transport.close()

    def _refuse(self, status: int, what: str, cap: int, setting: str) -> None:
        """Answer ``status`` (text naming the cap) and close the connection."""
        self._refused = True
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        log.warning("refused a request from %s with %d: %s over %d bytes (%s); connection closed", client, status,
                    what, cap, setting)  # fmt: skip
        body = f"{what} over {cap} bytes (the server's limit)\n".encode()
        reason = {414: b"URI Too Long", 431: b"Request Header Fields Too Large"}[status]
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, reason, len(body), body)
        )
        self.transport.close()
