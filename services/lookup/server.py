"""``featurecache serve``: run the lookup app under uvicorn."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

from featurecache.errors import StoreError

log = logging.getLogger(__name__)

APP_FACTORY = "services.lookup.main:create_app"


def run_server(
    store: Path | str, host: str = "127.0.0.1", port: int = 8000, workers: int = 1, token: str | None = None
) -> None:
    """Serve ``store`` until interrupted.

    Settings reach every worker process through the environment (``FEATURECACHE_STORE_PATH``,
    ``FEATURECACHE_AUTH_TOKEN``; other limits as set by the caller's environment). The store is
    opened once here first, so a wrong path fails at once instead of serving 503s. With several
    workers, Prometheus metrics are aggregated through a temporary multiprocess directory.
    """
    import uvicorn

    from featurecache import open_store

    path = Path(store).resolve()
    try:
        n = len(open_store(path).ids)
    except OSError as exc:
        raise StoreError(f"cannot serve {path}: {exc}") from exc
    log.info("serving %s (%d entries) on http://%s:%d with %d worker(s)", path, n, host, port, workers)
    os.environ["FEATURECACHE_STORE_PATH"] = str(path)
    if token is not None:
        os.environ["FEATURECACHE_AUTH_TOKEN"] = token
    multiproc_dir = None
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiproc_dir = tempfile.mkdtemp(prefix="featurecache-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = multiproc_dir
    try:
        uvicorn.run(
            APP_FACTORY, factory=True, host=host, port=port, workers=workers,
            log_level="info", access_log=False, timeout_graceful_shutdown=10,
        )  # fmt: skip
    finally:
        if multiproc_dir is not None:
            shutil.rmtree(multiproc_dir, ignore_errors=True)
