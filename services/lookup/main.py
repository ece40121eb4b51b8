"""Wires the lookup app: settings, the store, middleware, error handlers, routers.

``create_app()`` is what uvicorn runs (``services.lookup.main:create_app``, factory); settings come
from ``FEATURECACHE_*`` environment variables unless given.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

import featurecache
from services.lookup import handlers
from services.lookup.hosts import SERVE_HOST_ENV, HostCheck
from services.lookup.middleware import HEALTH_PATH, ServiceMiddleware
from services.lookup.routers import entries, health, metrics_route, msas, store
from services.lookup.settings import Settings
from services.lookup.state import StoreHolder

DESCRIPTION = """\
Read one featurecache store over HTTP. Arrays travel as Arrow IPC streams
(`application/vnd.apache.arrow.stream`; `featurecache.client.http.LookupClient` decodes them into
numpy without copies). When the service has a token, every route but `/v1/health` and these docs
(`/docs`, `/redoc`, `/openapi.json`) needs `Authorization: Bearer <token>` (here: **Authorize**),
`/metrics` included. Without a token, the data routes answer 400 to a `Host` that is a name with a
dot other than serve's `--host` or those of `FEATURECACHE_ALLOWED_HOSTS` (DNS rebinding). Limits
answer 413 naming the limit; malformed requests 422. A store being
rebuilt or extended under the service answers 503 with `retry-after` until it can be read again;
the new index is served without a restart. Data damaged in a store that is not changing (a shard
that fails its checksum, a missing file) answers 500 naming the entry or MSA as unreadable.
Every GET route answers HEAD too (the GET's status and headers, no body); `/v1/health` and
`/v1/ready` answer OPTIONS (204 with `allow`), for probes that send those. HEAD on
`/v1/entries/{entry_id}` answers from the index without reading the entry's arrays (its
`content-length` is the GET's all the same): a shard damaged in a store that is not changing shows
only on GET (500), not on HEAD. A 405 lists in `allow` every method the path answers.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    holder = StoreHolder(
        settings.store_path,
        retry_seconds=settings.store_retry_seconds,
        check_seconds=settings.store_check_seconds,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        holder.open()  # a failure leaves /v1/ready at 503; StoreHolder.get() tries again
        yield
        holder.close()

    app = FastAPI(
        title="featurecache lookup",
        version=featurecache.__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        # no route ends with "/": Starlette's redirect of "/v1/entries/" built its location from the
        # request's Host header (review R26d s44 #11); such a path is now a plain 404
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.store = holder
    token = settings.auth_token.get_secret_value() if settings.auth_token is not None else None
    # without a token, the data routes answer only the hosts a DNS-rebinding page cannot be on
    app.state.host_check = (
        HostCheck.of(settings.allowed_hosts, os.environ.get(SERVE_HOST_ENV)) if token is None else None
    )
    # A browser cannot send a bearer token with a page load: the docs are public (they describe
    # the API, not the store); everything they call still needs the token.
    docs = {app.docs_url, app.swagger_ui_oauth2_redirect_url, app.redoc_url, app.openapi_url}
    public = frozenset({HEALTH_PATH, *(p for p in docs if p)})
    app.add_middleware(
        ServiceMiddleware, token=token, max_body_bytes=settings.max_body_bytes, public_paths=public,
        index_id=lambda: holder.index_id,
    )  # fmt: skip
    handlers.install(app)
    for router in (health.router, store.router, entries.router, msas.router, metrics_route.router):
        app.include_router(router)
    if token is not None:
        _document_bearer_auth(app, public)
    return app


def _document_bearer_auth(app: FastAPI, public: frozenset[str]) -> None:
    """Declare the bearer token in the OpenAPI schema, so /docs offers **Authorize** and sends it."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
                "type": "http", "scheme": "bearer",
            }  # fmt: skip
            schema["security"] = [{"bearer": []}]
            for path, operations in schema.get("paths", {}).items():
                if path in public:
                    for op in operations.values():
                        op["security"] = []
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
