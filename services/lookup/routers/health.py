"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from services.lookup.deps import HolderDep
from services.lookup.handlers import RETRY_AFTER
from services.lookup.state import StoreNotReadable, StoreUnavailable

router = APIRouter(prefix="/v1", tags=["health"])


@router.get(
    "/health",
    summary="Liveness: the process answers (never requires a token)",
    responses={
        503: {
            "description": "The served store directory was removed while a bind mount pins it: no store "
            "made in its place is ever seen; restart the server."
        }
    },
)
async def health(holder: HolderDep) -> Any:
    # on the event loop, as its dependency: a probe under load waited behind data requests for one
    # of the threadpool's 40 threads (4.8 s, past the Docker healthcheck's 4 s; review R28d s46 #7).
    # One stat (StoreHolder.removed)
    removed = holder.removed()
    if removed is not None:
        return JSONResponse({"status": "unhealthy", "detail": removed}, status_code=503)
    return {"status": "ok"}


@router.get(
    "/ready",
    summary="Readiness: the store (as it is now on disk) is open and its index loaded",
    responses={
        503: {
            "description": "The store is not open: not built yet, removed or being rebuilt, or of a "
            "format this server does not read (then without `retry-after`); the reason is in `detail`."
        }
    },
)
def ready(holder: HolderDep) -> Any:
    try:
        reader = holder.get()
    except StoreUnavailable as exc:
        return JSONResponse(
            {"status": "unavailable", "detail": str(exc)}, status_code=503, headers=RETRY_AFTER
        )
    except StoreNotReadable as exc:  # not ready, and waiting will not make it so
        return JSONResponse({"status": "unavailable", "detail": str(exc)}, status_code=503)
    return {"status": "ready", "entries": len(reader)}
