"""Prometheus metrics of the service (requests, latency, bytes out, errors, entries served).

With several uvicorn workers, ``server.run_server`` sets ``PROMETHEUS_MULTIPROC_DIR`` before the
workers start, and ``/metrics`` aggregates every worker's values (prometheus_client multiprocess
mode); with one worker the default registry is used.

In multiprocess mode each worker keeps its values in memory-mapped files in that directory. The space
of each part of a file is allocated (``posix_fallocate``) before the part is written through the map
(:class:`SpaceBackedDict`): prometheus_client only extends the file (``truncate``), and a write through
the map to a page the filesystem then has no room for is a SIGBUS that kills the worker: on a full
``/tmp`` every worker died, was restarted and died again, and nothing was served (review R42b s52 #3).
A value that finds no room now stays in the worker's memory and is written once there is room again
(at the next metric update of that worker); meanwhile the data routes answer as before, a warning is
logged once, and ``/metrics`` answers 503 naming the directory and the reason, as its counts are
incomplete (:func:`render`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import mmap_dict as _mmap_dict
from prometheus_client import values as _values

from services.lookup.server import NOT_RECORDED_PREFIX

log = logging.getLogger(__name__)

#: the size prometheus_client gives a new metric file (it maps the whole file)
_INITIAL_FILE_BYTES: int = getattr(_mmap_dict, "_INITIAL_MMAP_SIZE", 1 << 16)
#: the file's header: how many bytes are used (4) and padding (4)
_HEADER_BYTES = 8


class SpaceBackedDict(_mmap_dict.MmapedDict):  # type: ignore[misc]
    """prometheus_client's ``MmapedDict`` (one worker's file of one metric type) whose every write
    through the map lands on space allocated beforehand: the header's page when the file is made,
    each new value's bytes before they are written (:meth:`_init_value`). A value written before
    sits where it was allocated. An allocation that fails is an ``OSError`` (ENOSPC, EDQUOT; EROFS,
    ENOENT for a directory gone), caught by :meth:`read_value` and :meth:`write_value`, which keep
    the value (:func:`_not_recorded`) instead of raising into the request that counted it."""

    def __init__(self, filename: str, read_mode: bool = False) -> None:
        if read_mode:  # (prometheus_client's collector reads the files without this class)
            super().__init__(filename, read_mode=True)
            return
        self._fname = filename
        self._f: Any = None
        self._m: Any = None
        self._positions: dict[str, int] = {}
        self._used = _HEADER_BYTES
        self._capacity = 0
        try:
            self._attach()
        except OSError as exc:  # nothing written: every value of this file waits for room
            _note_failure(self, exc)

    def _attach(self) -> None:
        """Open and map the file (once): a new one is given prometheus_client's size as a hole,
        and its header's space before prometheus_client writes the header through the map."""
        if self._m is not None:
            return
        fd = os.open(self._fname, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            if os.fstat(fd).st_size == 0:
                # the size first (a hole: no space needed), so that the collector, which reads the
                # header of every file, never finds one shorter than its header
                os.ftruncate(fd, _INITIAL_FILE_BYTES)
            os.posix_fallocate(fd, 0, _HEADER_BYTES)
        finally:
            os.close(fd)
        try:
            super().__init__(self._fname)
        except BaseException:
            if self._f is not None:
                self._f.close()
            self._f = self._m = None
            raise

    def _init_value(self, key: str) -> None:
        """prometheus_client's, after allocating the bytes the new value takes (its key's length,
        the key padded to 8 bytes, the value and its timestamp): extending the file is not enough."""
        encoded = key.encode("utf-8")
        size = 4 + len(encoded) + (8 - (len(encoded) + 4) % 8) + 16
        os.posix_fallocate(self._f.fileno(), self._used, size)
        try:
            super()._init_value(key)
        except OSError:
            if self._m is not None and len(self._m) != self._capacity:  # grown, but not mapped
                self._capacity = len(self._m)
            raise

    def store(self, key: str, value: float, timestamp: float) -> None:
        """Write ``value`` in the file, or raise OSError."""
        self._attach()
        super().write_value(key, value, timestamp)

    def read_value(self, key: str) -> tuple[float, float]:
        try:
            self._attach()
            found: tuple[float, float] = super().read_value(key)
        except OSError as exc:
            kept = _waiting.get((self._fname, key))
            if kept is None:
                kept = (self, 0.0, 0.0)
                _not_recorded(self, key, 0.0, 0.0, exc)
            return kept[1], kept[2]
        _recorded(self, key)
        return found

    def write_value(self, key: str, value: float, timestamp: float) -> None:
        try:
            self.store(key, value, timestamp)
        except OSError as exc:
            _not_recorded(self, key, value, timestamp, exc)
            return
        _recorded(self, key)

    def close(self) -> None:
        if self._f is not None:
            super().close()


#: values that found no room in their file: (file, key) -> (its dict, value, timestamp). Read and
#: written under prometheus_client's lock (one for all the values of the process), as the files are
_waiting: dict[tuple[str, str], tuple[SpaceBackedDict, float, float]] = {}
#: the marker file that tells every worker's /metrics that this process has values waiting
_marker: str | None = None


def _note_failure(d: SpaceBackedDict, exc: OSError) -> None:
    """Log the first failure of this process, and mark the directory (an empty file, which a full
    tmpfs still takes) so that /metrics answers 503 whichever worker answers it."""
    global _marker
    if _marker is not None:
        return
    directory = os.path.dirname(d._fname)
    code = errno.errorcode.get(exc.errno or 0, "EIO")
    _marker = os.path.join(directory, f"{NOT_RECORDED_PREFIX}{os.getpid()}-{code}")
    reason = exc.strerror or str(exc)
    log.warning("server process [%d] cannot record its metrics in %s: %s; they are kept in memory and "
                "written once there is room, and /metrics answers 503 until then (the data routes are "
                "not affected)", os.getpid(), directory, reason)  # fmt: skip
    with contextlib.suppress(OSError):  # (if not: this process's /metrics still knows, from _marker)
        os.close(os.open(_marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))


def _not_recorded(d: SpaceBackedDict, key: str, value: float, timestamp: float, exc: OSError) -> None:
    _waiting[(d._fname, key)] = (d, value, timestamp)
    _note_failure(d, exc)


def _recorded(d: SpaceBackedDict, key: str) -> None:
    """``key`` is in its file: write the values still waiting, while there is room."""
    global _marker
    _waiting.pop((d._fname, key), None)
    for (_, waiting_key), (waiting_dict, value, timestamp) in list(_waiting.items()):
        try:
            waiting_dict.store(waiting_key, value, timestamp)
        except OSError:
            return
        del _waiting[(waiting_dict._fname, waiting_key)]
    if _marker is not None:
        with contextlib.suppress(OSError):
            os.unlink(_marker)
        log.info("server process [%d] records its metrics again in %s", os.getpid(), os.path.dirname(_marker))
        _marker = None


def _space_backed() -> bool:
    """Use :class:`SpaceBackedDict` for this process's metric files (multiprocess mode: the value
    class that prometheus_client chose on import reads the name ``MmapedDict`` of its module when it
    makes a file); whether multiprocess mode is on."""
    if not getattr(_values.ValueClass, "_multiprocess", False):
        return False
    known = (
        hasattr(_mmap_dict, "_INITIAL_MMAP_SIZE")
        and hasattr(_values, "MmapedDict")
        and all(
            callable(getattr(_mmap_dict.MmapedDict, name, None))
            for name in ("_init_value", "write_value", "read_value", "close")
        )
    )
    if not known:  # another prometheus_client than the ones tested: its own class, as before R42b #3
        log.warning("prometheus_client's multiprocess files are not laid out as this server knows (another "
                    "version): their space is not reserved before it is written, and a full metrics directory "
                    "kills the worker that writes (SIGBUS)")  # fmt: skip
        return True
    _values.MmapedDict = SpaceBackedDict  # type: ignore[misc]
    return True


MULTIPROCESS = _space_backed()

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
    """The exposition text and its content type, over every worker in multiprocess mode.

    There, a worker with values that found no room in its file (:class:`SpaceBackedDict`) makes the
    counts incomplete: HTTPException 503 naming the directory and the reason instead, until there is
    room again (this worker tries to write its own first)."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        from prometheus_client import multiprocess

        if MULTIPROCESS:
            ENTRIES.inc(0)  # an update under prometheus_client's lock: writes what waits, if it can now
        missing = _not_recorded_by(directory)
        if missing:
            from fastapi import HTTPException

            raise HTTPException(503, detail=f"metrics incomplete: {missing}")
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST


def _not_recorded_by(directory: str) -> str:
    """Which workers have values waiting for room in ``directory`` and why ("" when none)."""
    markers = [_marker] if _marker is not None else []
    with contextlib.suppress(OSError):
        markers += [
            os.path.join(directory, n) for n in os.listdir(directory) if n.startswith(NOT_RECORDED_PREFIX)
        ]
    waiting: dict[str, str] = {}  # pid -> reason
    lost: dict[str, str] = {}  # of a process that ended meanwhile
    for marker in markers:
        pid, _, code = os.path.basename(marker)[len(NOT_RECORDED_PREFIX) :].partition("-")
        reason = os.strerror(getattr(errno, code, errno.EIO))
        (waiting if _running(pid) else lost).setdefault(pid, reason)
    parts = []
    if waiting:
        parts.append(f"server process(es) [{'], ['.join(sorted(waiting))}] cannot record their metrics in "
                     f"{directory}: {'; '.join(sorted(set(waiting.values())))} (kept in memory and written "
                     "once there is room)")  # fmt: skip
    if lost:
        parts.append(f"server process(es) [{'], ['.join(sorted(lost))}] ended before they could record all "
                     f"their metrics in {directory} ({'; '.join(sorted(set(lost.values())))}): those are "
                     "lost; restart serve to count afresh")  # fmt: skip
    return "; ".join(parts)


def _running(pid: str) -> bool:
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: running
        pass
    return True
