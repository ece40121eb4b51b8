"""RDKit's log while featurecache computes a conformer: routed, watched, then put back as it was.

RDKit says that a SIGINT cut its work short only in a warning of its log ("Interrupted, cancelling
conformer generation", "Substructure search was interrupted, ..."; :mod:`featurecache.chem.conformer`'s
module doc). To see it, and to know *which thread's* embedding it was, RDKit's log must go to
Python's ``rdkit`` logger (:func:`rdkit.rdBase.LogToPythonLogger`: each record carries the thread
that logged it) with its warning log on.

That routing is process-wide in RDKit, so it is held only while some thread is inside
:func:`watched` (the conformer functions, whose RDKit work it covers), and undone when the last
one leaves: RDKit's log destination (C++ streams, Python's stderr or Python's logger: RDKit has no
getter for it, so it is found out by sending one marker record with every destination intercepted,
nothing of it printed), which of its logs are on (``rdApp.*``), and the ``rdkit`` logger's level
and ``disabled`` flag. The logger's handlers and ``propagate`` are never touched: a filter is added
to the logger for the time and removed after (review R35b s49 #3: the routing used to be done
once at import, for good, replacing the logger's handlers, so a program that imported
featurecache lost RDKit's errors).

While routed, a record of a thread inside :func:`watched` is noted (when it says "interrupted")
and dropped: that thread's chemistry failures are recorded in the conformer's ``reason``, not
printed. A record of any other thread goes on to the logger's handlers as the program's own
settings would have let it out (its log on, at or above the logger's level, the logger enabled).
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

from rdkit import rdBase

__all__ = ["RDKIT_INTERRUPTED", "interrupted", "watched", "watching"]

#: words of RDKit's log records that say a SIGINT cut its work short (lower case)
RDKIT_INTERRUPTED = "interrupted"
#: RDKit's logs and the level its Python destination logs each at
CHANNELS = {"rdApp.debug": logging.DEBUG, "rdApp.info": logging.INFO,
            "rdApp.warning": logging.WARNING, "rdApp.error": logging.ERROR}  # fmt: skip
#: RDKit's logs a watched thread needs on (RDKit writes its interruption notes to them)
NEEDED = ("rdApp.info", "rdApp.warning")
_MARKER = "featurecache: where does RDKit's log go"

P = ParamSpec("P")
R = TypeVar("R")


class _Route(logging.Filter):
    """The process's one routing (module doc): a count of the threads' entries, the settings it
    replaced, and the filter it adds to the ``rdkit`` logger."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._inside: dict[int, int] = {}  # thread -> depth of watched() calls
        self._interrupted: set[int] = set()
        self._guard = threading.Lock()  # _interrupted, written from the logging threads
        self._saved: dict[str, Any] | None = None
        self._probe: str | None = None
        self._probe_seen = False

    # --- the filter on the rdkit logger --------------------------------------------------------

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self._probe is not None and self._probe in message:
            self._probe_seen = True
            return False
        thread = record.thread
        if thread is not None and thread in self._inside:
            if RDKIT_INTERRUPTED in message.lower():
                with self._guard:
                    self._interrupted.add(thread)
            return False
        saved = self._saved
        if saved is None:  # not routed (a record between two routings): as it is
            return True
        channel = next((c for c, level in CHANNELS.items() if level == record.levelno), None)
        if channel is not None and not saved["enabled"].get(channel, True):
            return False
        if saved["destination"] == "python_logger":
            return not saved["disabled"] and record.levelno >= saved["effective_level"]
        return True  # the program's RDKit printed it (to stderr): its logger's handlers print it now

    def take(self, thread: int) -> bool:
        """Whether RDKit said in ``thread`` that a SIGINT cut its work short, since the last call."""
        with self._guard:
            seen = thread in self._interrupted
            self._interrupted.discard(thread)
            return seen

    # --- entering and leaving ------------------------------------------------------------------

    def enter(self) -> None:
        thread = threading.get_ident()
        with self._lock:
            if not self._inside:
                self._route()
            self._inside[thread] = self._inside.get(thread, 0) + 1

    def leave(self) -> None:
        thread = threading.get_ident()
        with self._lock:
            depth = self._inside.get(thread, 0) - 1
            if depth > 0:
                self._inside[thread] = depth
                return
            self._inside.pop(thread, None)
            if not self._inside:
                self._restore()

    def _route(self) -> None:
        rdkit_logger = logging.getLogger("rdkit")
        enabled = _enabled()
        saved = {"enabled": enabled, "level": rdkit_logger.level, "disabled": rdkit_logger.disabled,
                 "effective_level": rdkit_logger.getEffectiveLevel(), "destination": "cpp_streams"}  # fmt: skip
        rdkit_logger.addFilter(self)
        rdkit_logger.setLevel(logging.DEBUG)
        rdkit_logger.disabled = False
        try:
            saved["destination"] = self._destination(enabled)
            rdBase.LogToPythonLogger()  # turns every log on: set each as the routing needs it
            for channel in CHANNELS:
                on = channel in NEEDED or enabled.get(channel, True)
                (rdBase.EnableLog if on else rdBase.DisableLog)(channel)
        except BaseException:
            self._saved = saved
            self._restore()
            raise
        self._saved = saved

    def _restore(self) -> None:
        saved, self._saved = self._saved, None
        if saved is None:
            return
        {"python_logger": rdBase.LogToPythonLogger, "python_stderr": rdBase.LogToPythonStderr,
         "cpp_streams": rdBase.LogToCppStreams}[saved["destination"]]()  # fmt: skip
        for channel, on in saved["enabled"].items():
            (rdBase.EnableLog if on else rdBase.DisableLog)(channel)
        rdkit_logger = logging.getLogger("rdkit")
        rdkit_logger.removeFilter(self)
        rdkit_logger.setLevel(saved["level"])
        rdkit_logger.disabled = saved["disabled"]
        with self._guard:
            self._interrupted.clear()

    def _destination(self, enabled: dict[str, bool]) -> str:
        """Where RDKit's log goes now: one marker record on its error log, with the ``rdkit``
        logger (this filter), ``sys.stderr`` and file descriptor 2 intercepted; what else was
        written to the last two meanwhile (another thread's) is passed on."""
        self._probe, self._probe_seen = f"{_MARKER} {os.getpid()}:{threading.get_ident()}", False
        if not enabled.get("rdApp.error", True):
            rdBase.EnableLog("rdApp.error")
        captured = io.StringIO()
        fd_text = b""
        try:
            with _stderr_to(captured), _fd2_read() as fd2:
                rdBase.LogMessage("rdApp.error", self._probe)
            fd_text = fd2.getvalue()
        finally:
            if not enabled.get("rdApp.error", True):
                rdBase.DisableLog("rdApp.error")
            probe, self._probe = self._probe, None
        marker = probe.encode()
        if self._probe_seen:
            found = "python_logger"
        elif probe in captured.getvalue():
            found = "python_stderr"
        else:
            found = "cpp_streams"  # on fd 2, or nowhere this could see: RDKit's default
        _pass_on(captured.getvalue(), probe, fd_text, marker)
        return found


def _enabled() -> dict[str, bool]:
    """Which of RDKit's logs are on (``rdBase.LogStatus``: ``rdApp.debug:disabled`` lines)."""
    status = dict(line.split(":", 1) for line in rdBase.LogStatus().splitlines() if ":" in line)
    return {channel: status.get(channel, "enabled") == "enabled" for channel in CHANNELS}


@contextlib.contextmanager
def _stderr_to(buffer: io.StringIO) -> Iterator[None]:
    previous = sys.stderr
    sys.stderr = buffer
    try:
        yield
    finally:
        sys.stderr = previous


class _Bytes:
    def __init__(self) -> None:
        self.data = b""

    def getvalue(self) -> bytes:
        return self.data


@contextlib.contextmanager
def _fd2_read() -> Iterator[_Bytes]:
    """File descriptor 2 onto a pipe for the time (C++'s ``std::cerr``); what came is in the result."""
    out = _Bytes()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing RDKit writes there is seen by anyone
        yield out
        return
    read, write = os.pipe()
    try:
        os.dup2(write, 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(write)
            os.set_blocking(read, False)
            chunks = []
            with contextlib.suppress(BlockingIOError):
                while chunk := os.read(read, 65536):
                    chunks.append(chunk)
            out.data = b"".join(chunks)
    finally:
        os.close(read)
        os.close(saved)


def _pass_on(text: str, probe: str, fd_bytes: bytes, marker: bytes) -> None:
    """Another thread's writes to stderr caught with the probe, written where they were going."""
    rest = "".join(line for line in text.splitlines(keepends=True) if probe not in line)
    if rest:
        sys.stderr.write(rest)
    rest_b = b"".join(line for line in fd_bytes.splitlines(keepends=True) if marker not in line)
    if rest_b:
        with contextlib.suppress(OSError):
            os.write(2, rest_b)


_ROUTE = _Route()


@contextlib.contextmanager
def watching() -> Iterator[None]:
    """RDKit's log routed and this thread watched for the time (module doc); nests, and several
    threads may be inside at once: the settings are put back when the last one leaves."""
    _ROUTE.enter()
    try:
        yield
    finally:
        _ROUTE.leave()


def watched(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run inside :func:`watching`."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with watching():
            return fn(*args, **kwargs)

    return run


def interrupted(thread: int) -> bool:
    """Whether RDKit logged in ``thread`` that a SIGINT cut its work short, since the last call
    (inside :func:`watching`)."""
    return _ROUTE.take(thread)
