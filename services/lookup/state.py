"""The one store a service process serves: opened read-only once, reopened only after a failure."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from featurecache.errors import FeatureCacheError, StoreError
from featurecache.store.reader import LocalStore

log = logging.getLogger(__name__)


class StoreUnavailable(StoreError):
    """The store could not be opened (yet); the service answers 503 until it can."""


class StoreHolder:
    """Holds the reader. ``get()`` returns it or raises :class:`StoreUnavailable`.

    A store that failed to open (not built yet, mount missing) is tried again at most every
    ``retry_seconds``, so a server started before its store becomes ready without a restart.
    """

    def __init__(self, path: Path, retry_seconds: float = 5.0) -> None:
        self.path = path
        self.retry_seconds = retry_seconds
        self._reader: LocalStore | None = None
        self._error: str | None = None
        self._last_attempt = -float("inf")
        self._lock = threading.Lock()

    def open(self) -> None:
        """Try to open the store now (called at startup)."""
        with self._lock:
            self._open_locked()

    def _open_locked(self) -> None:
        from featurecache import open_store

        self._last_attempt = time.monotonic()
        try:
            self._reader = open_store(self.path)
            self._error = None
            log.info("store %s open: %d entries", self.path, len(self._reader.ids))
        except (FeatureCacheError, OSError) as exc:
            self._reader = None
            self._error = f"{type(exc).__name__}: {exc}"
            log.error("cannot open store %s: %s", self.path, self._error)

    def get(self) -> LocalStore:
        reader = self._reader
        if reader is not None:
            return reader
        with self._lock:
            if self._reader is None and time.monotonic() - self._last_attempt >= self.retry_seconds:
                self._open_locked()
            if self._reader is None:
                raise StoreUnavailable(f"store {self.path} is not open: {self._error}")
            return self._reader

    @property
    def error(self) -> str | None:
        return self._error

    def close(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.close()
            self._reader = None
