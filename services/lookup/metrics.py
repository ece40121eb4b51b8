"""Prometheus metrics of the service (requests, latency, bytes out, errors, entries served).

With several uvicorn workers, ``server.run_server`` sets ``PROMETHEUS_MULTIPROC_DIR`` before the
workers start, and ``/metrics`` aggregates every worker's values (prometheus_client multiprocess
mode); with one worker the default registry is used.
"""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

PREFIX = "featurecache_lookup"
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REQUESTS = Counter(f"{PREFIX}_requests_total", "HTTP requests answered.", ["method", "route", "status"])
LATENCY = Histogram(
    f"{PREFIX}_request_duration_seconds", "Time from request to the last body byte.", ["method", "route"],
    buckets=LATENCY_BUCKETS,
)  # fmt: skip
BYTES_OUT = Counter(f"{PREFIX}_response_bytes_total", "Response body bytes sent.", ["route"])
ERRORS = Counter(f"{PREFIX}_errors_total", "Responses with status >= 400.", ["route", "status"])
ENTRIES = Counter(f"{PREFIX}_entries_served_total", "Entries sent (single and batch).")
ENTRY_ROWS = Counter(
    f"{PREFIX}_entry_rows_served_total",
    "Rows of entries' groups sent by POST /v1/entries/{id}:rows.",
    ["group"],
)
MSA_CELLS = Counter(f"{PREFIX}_msa_cells_served_total", "MSA cells (rows x columns) sent.")


def observe(method: str, route: str, status: int, seconds: float, body_bytes: int) -> None:
    REQUESTS.labels(method, route, str(status)).inc()
    LATENCY.labels(method, route).observe(seconds)
    BYTES_OUT.labels(route).inc(body_bytes)
    if status >= 400:
        ERRORS.labels(route, str(status)).inc()


def render() -> tuple[bytes, str]:
    """The exposition text and its content type, over every worker in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
