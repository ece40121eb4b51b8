"""Prometheus exposition."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from services.lookup import metrics

router = APIRouter(tags=["metrics"])


@router.get("/metrics", summary="Prometheus metrics (requests, latency histogram, bytes out, errors)",
            response_class=Response)  # fmt: skip
def prometheus() -> Response:
    body, content_type = metrics.render()
    return Response(body, media_type=content_type)
