"""Wires the lookup app: settings, the store, middleware, error handlers, routers.

``create_app()`` is what uvicorn runs (``services.lookup.main:create_app``, factory); settings come
from ``FEATURECACHE_*`` environment variables unless given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

import featurecache
from services.lookup import handlers
from services.lookup.middleware import ServiceMiddleware
from services.lookup.routers import entries, health, metrics_route, msas, store
from services.lookup.settings import Settings
from services.lookup.state import StoreHolder

DESCRIPTION = """\
Read one featurecache store over HTTP. Arrays travel as Arrow IPC streams
(`application/vnd.apache.arrow.stream`; `featurecache.client.http.LookupClient` decodes them into
numpy without copies). When the service has a token, every route but `/v1/health` needs
`Authorization: Bearer <token>`. Limits answer 413 naming the limit; malformed requests 422.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    holder = StoreHolder(settings.store_path, retry_seconds=settings.store_retry_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        holder.open()  # once; a failure leaves /v1/ready at 503 and is retried on use
        yield
        holder.close()

    app = FastAPI(
        title="featurecache lookup",
        version=featurecache.__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.store = holder
    token = settings.auth_token.get_secret_value() if settings.auth_token is not None else None
    app.add_middleware(ServiceMiddleware, token=token, max_body_bytes=settings.max_body_bytes)
    handlers.install(app)
    for router in (health.router, store.router, entries.router, msas.router, metrics_route.router):
        app.include_router(router)
    return app
