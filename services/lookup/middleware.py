"""One pure-ASGI middleware in front of every route: bearer-token auth, request body limit, metrics,
and the ``x-featurecache-index`` header (:data:`services.lookup.state.INDEX_HEADER`) on every answer
but a 401: the id of the index that answered (the reader the route read, else the one open now; no
header while none is open), so that a client whose tables are of another index refreshes them; and
``cache-control: no-store`` on every answer (a store is rebuilt in place under the same URLs).

HEAD is answered on every route that answers GET, as GET would answer it less the body (probes such
as ``curl -I`` and uptime monitors use it; FastAPI routes would answer 405), and OPTIONS on the
probe paths (``/v1/health``, ``/v1/ready``: HAProxy's ``option httpchk`` sends it) with 204 and the
methods they take. The route of a HEAD sees a GET whose scope holds :data:`HEAD_KEY` (a route that
can answer the headers without computing the body looks at it: :func:`is_head`); a 405's ``allow``
lists what the path really answers, these two included (:func:`allowed_methods`).

The token is compared in constant time (``hmac.compare_digest``). A token from
``FEATURECACHE_AUTH_TOKEN_FILE`` (:class:`services.lookup.settings.FileToken`) is the one the file
holds now: the file is looked at (``os.stat``) on each request that needs the token and read again
when it changed, in every worker alike, so rotating the file needs no restart (review R42c s52 #5;
:class:`services.lookup.settings.TokenFile`).

Pure ASGI (not ``BaseHTTPMiddleware``) so streamed responses pass through untouched and the bytes
actually sent are counted.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable
from typing import Any

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.lookup import metrics
from services.lookup.settings import FileToken
from services.lookup.state import INDEX_HEADER

_INDEX_HEADER = INDEX_HEADER.encode()
_CACHE_CONTROL = b"cache-control"

HEALTH_PATH = "/v1/health"
READY_PATH = "/v1/ready"
PROBE_PATHS = frozenset({HEALTH_PATH, READY_PATH})  # OPTIONS answered (204) before any route
PROBE_ALLOW = "GET, HEAD, OPTIONS"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
#: set in the scope a HEAD request's route sees (as a GET): True
HEAD_KEY = "featurecache.head"
#: the order of the methods in an ``allow`` header
METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def is_head(scope: Scope) -> bool:
    """Whether the GET a route is answering is a HEAD request (its body will be dropped)."""
    return bool(scope.get(HEAD_KEY))


def allowed_methods(routes: list[BaseRoute], scope: Scope) -> str:
    """The ``allow`` header of a 405 on ``scope``'s path: every method some route answers there (the
    route the router picked names only its own: ``/v1/msas/K:slice`` is also ``/v1/msas/{key}``'s
    GET), HEAD wherever GET is (this middleware answers it), OPTIONS on the probe paths."""
    allowed = set()
    for method in METHOD_ORDER:
        # a copy without the framework's per-request state, which matching writes into
        probe = {k: v for k, v in scope.items() if k not in ("fastapi", "route", "endpoint", "path_params")}
        probe["method"] = method
        if any(route.matches(probe)[0] == Match.FULL for route in routes):
            allowed.add(method)
    if "GET" in allowed:
        allowed.add("HEAD")
    if scope["path"] in PROBE_PATHS:
        allowed.add("OPTIONS")
    return ", ".join(m for m in METHOD_ORDER if m in allowed)


class ServiceMiddleware:
    def __init__(
        self, app: ASGIApp, *, token: str | None, max_body_bytes: int,
        public_paths: frozenset[str] = frozenset({HEALTH_PATH}),
        index_id: Callable[[], str | None] | None = None,
    ) -> None:  # fmt: skip
        """``token``: None (no auth), or the token every route but ``public_paths`` requires; a
        :class:`~services.lookup.settings.FileToken` is followed in its file as it is rotated.
        ``public_paths``: exact paths answered without the token (liveness, the API docs);
        ``index_id``: the id of the index open now (for answers that read no store)."""
        self.app = app
        self.index_id = index_id
        # surrounding whitespace is not the token's: HTTP strips it from the header (RFC 7230 §3.2.4)
        self.token = token.strip().encode() if token and token.strip() else None
        self.token_file = token.file if isinstance(token, FileToken) and self.token is not None else None
        self.max_body_bytes = max_body_bytes
        self.public_paths = public_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state: dict[str, Any] = {"status": 500, "bytes": 0}
        head = scope["method"] == "HEAD"
        # the routes see a GET; `inner` is the scope they fill in (the route, request.state)
        inner = {**scope, "method": "GET", HEAD_KEY: True} if head else scope

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                message = _not_stored(message)
                if message["status"] != 401:
                    message = self._with_index_header(inner, message)
            elif message["type"] == "http.response.body":
                if head:  # the headers of a GET (content-length included), not its body
                    message = {**message, "body": b""}
                state["bytes"] += len(message.get("body", b""))
            await send(message)

        route = "unmatched"
        try:
            refusal = self._refuse_auth(scope)
            if refusal is not None:
                route = "auth"
                await _json_response(
                    counting_send, 401, refusal, {"www-authenticate": 'Bearer realm="featurecache"'}
                )
                return
            if scope["method"] == "OPTIONS" and scope["path"] in PROBE_PATHS:
                route = scope["path"]
                await counting_send({
                    "type": "http.response.start", "status": 204,
                    "headers": [(b"allow", PROBE_ALLOW.encode())],
                })  # fmt: skip
                await counting_send({"type": "http.response.body", "body": b""})
                return
            if scope["method"] in BODY_METHODS:
                body, too_large = await _read_body(receive, self.max_body_bytes, _content_length(scope))
                if too_large:
                    route = "body-limit"
                    await _json_response(counting_send, 413, {
                        "detail": f"request body exceeds the limit max_body_bytes={self.max_body_bytes}",
                        "limit": "max_body_bytes", "max": self.max_body_bytes,
                    })  # fmt: skip
                    return
                receive = _replay(body, receive)
            await self.app(inner, receive, counting_send)
        finally:
            r = inner.get("route")
            if r is not None and hasattr(r, "path"):
                route = r.path
            metrics.observe(
                scope["method"], route, int(state["status"]), time.perf_counter() - start, state["bytes"]
            )

    def _with_index_header(self, scope: Scope, message: Message) -> Message:
        """``message`` with the id of the index that answered: the one the route read
        (``request.state.index_id``, set by ``deps.get_reader``), else the one open now."""
        request_state = scope.get("state") or {}
        if "index_id" in request_state:
            index = request_state["index_id"]
        else:
            index = self.index_id() if self.index_id is not None else None
        if index is None:
            return message
        headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != _INDEX_HEADER]
        return {**message, "headers": [*headers, (_INDEX_HEADER, index.encode())]}

    def _refuse_auth(self, scope: Scope) -> dict[str, str] | None:
        if self.token is None or scope["path"] in self.public_paths:
            return None
        values = [v for k, v in scope["headers"] if k == b"authorization"]
        if not values:
            return {"detail": "missing bearer token: send 'Authorization: Bearer <token>'"}
        if len(values) > 1:
            # a singleton field: a proxy in front may judge the first one and forward both, where a
            # dict of the headers judged the last one here (review R28d s46 #4)
            return {"detail": f"{len(values)} Authorization headers: send exactly one"}
        header = values[0]
        scheme, _, given = header.partition(b" ")
        token = self.token_file.current() if self.token_file is not None else self.token
        if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), token):
            return {"detail": "invalid bearer token"}
        return None


def _not_stored(message: Message) -> Message:
    """``message`` (a response's start) with ``cache-control: no-store`` unless it says otherwise: a
    store is rebuilt or extended in place and served under the same URLs, so no cache (a reverse
    proxy's, a browser's) may answer from an earlier build (review R28d s46 #9)."""
    headers = list(message.get("headers", []))
    if any(k.lower() == _CACHE_CONTROL for k, _ in headers):
        return message
    return {**message, "headers": [*headers, (_CACHE_CONTROL, b"no-store")]}


def _content_length(scope: Scope) -> int | None:
    for k, v in scope["headers"]:
        if k == b"content-length":
            try:
                return int(v)
            except ValueError:
                return None
    return None


async def _read_body(receive: Receive, limit: int, declared: int | None) -> tuple[bytes, bool]:
    """The whole request body, or ``too_large`` as soon as it passes ``limit`` bytes."""
    if declared is not None and declared > limit:
        return b"", True
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", True
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks), False


def _replay(body: bytes, receive: Receive) -> Receive:
    """Hand the buffered body to the app, then pass through (a streamed response listens for the
    client's disconnect on ``receive``; answering "disconnect" early would cut it off)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _json_response(
    send: Send, status: int, doc: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    body = json.dumps(doc).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
