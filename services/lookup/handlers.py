"""Library exceptions → HTTP answers. Client mistakes are 4xx with a message saying what was wrong;
only the server's own failures are 5xx."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from featurecache.errors import InvalidRequest, NotFound, StoreError
from services.lookup.params import LimitExceeded
from services.lookup.state import StoreUnavailable

log = logging.getLogger(__name__)


def install(app: FastAPI) -> None:
    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(LimitExceeded)
    async def limit_exceeded(request: Request, exc: LimitExceeded) -> JSONResponse:
        return JSONResponse(
            {"detail": str(exc), "limit": exc.limit, "max": exc.maximum, "got": exc.got}, status_code=413
        )

    @app.exception_handler(InvalidRequest)
    async def invalid(request: Request, exc: InvalidRequest) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.exception_handler(StoreUnavailable)
    async def unavailable(request: Request, exc: StoreUnavailable) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503, headers={"retry-after": "5"})

    @app.exception_handler(StoreError)
    async def store_error(request: Request, exc: StoreError) -> JSONResponse:
        log.error("store error on %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": f"store error: {exc}"}, status_code=500)
