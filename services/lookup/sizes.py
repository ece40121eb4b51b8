"""The store's sizes for ``/v1/info``, counted in the background once per open store.

Summing the bytes of a store walks every part not sized before in this process
(:func:`featurecache.store.info.store_bytes`): 11–49 s on a 200k-entry store. ``/v1/info`` must not
wait for that: the service starts the count when it opens (or reopens) the store, and until the
count is done ``/v1/info`` answers with the index's counts at once and the sizes marked pending.

One walk at a time per process: a store reopened while the previous reader's count still runs
waits for it, then finds every part that count sized in the part cache instead of walking it again.
"""

from __future__ import annotations

import logging
import threading
import time

from featurecache.store.info import StoreSizes, store_bytes
from featurecache.store.reader import LocalStore

log = logging.getLogger(__name__)

#: held by the count that is walking the store (one at a time per process)
_walk_lock = threading.Lock()


class SizeCount:
    """One background count of a store's sizes (:func:`~featurecache.store.info.store_bytes`).

    ``done`` is set when the count has finished, with ``sizes`` set, or ``error`` when it raised.
    Tests (and anything else in the process) can wait on ``done`` to see the count end.
    """

    def __init__(self, reader: LocalStore) -> None:
        self.path = reader.path
        self.sizes: StoreSizes | None = None
        self.error: str | None = None
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="featurecache-sizes", daemon=True)

    def start(self) -> SizeCount:
        self._thread.start()
        return self

    @property
    def failed(self) -> bool:
        return self.done.is_set() and self.sizes is None

    def _run(self) -> None:
        try:
            with _walk_lock:
                t0 = time.perf_counter()
                self.sizes = store_bytes(self.path)
            log.info("store %s sizes counted: %d parts, %.1f MB (%.1f s)", self.path,
                     sum(self.sizes[1].values()), self.sizes[0]["total"] / 1e6, time.perf_counter() - t0)  # fmt: skip
        except Exception as exc:  # a bug, or the machine out of memory: /v1/info starts another count
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("counting the sizes of store %s failed: %s", self.path, self.error)
        finally:
            self.done.set()


#: reader -> its count, least recently asked first. Two are kept: one reader is served at a time;
#: the previous one, after the store is reopened, is dropped soon instead of being held here.
_counts: dict[LocalStore, SizeCount] = {}
_counts_lock = threading.Lock()
_KEPT = 2


def size_count(reader: LocalStore) -> SizeCount:
    """The count of ``reader``'s store sizes, started now if it has none yet (or its count failed)."""
    with _counts_lock:
        count = _counts.pop(reader, None)  # re-inserted last: the least recently asked goes first
        if count is None or count.failed:
            count = SizeCount(reader).start()
        _counts[reader] = count
        while len(_counts) > _KEPT:
            del _counts[next(iter(_counts))]
        return count
