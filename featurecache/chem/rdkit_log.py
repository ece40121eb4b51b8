"""RDKit's log in the processes that compute conformers: routed to a watcher, once, on first use.

RDKit says that a SIGINT cut its work short only in a warning of its log ("Interrupted,
cancelling conformer generation", "Substructure search was interrupted, ..."; :mod:`featurecache.chem.conformer`'s
module doc). To see it, and to know *which thread's* embedding it was, RDKit's log must go to
Python's ``rdkit`` logger (:func:`rdkit.rdBase.LogToPythonLogger`: each record carries the thread
that logged it) with its warning log on, and the logger's records must reach a watcher.

That routing is process-wide in RDKit and has no getter to put it back from, so it is done in the
processes that compute conformers (a build's workers: the chem stage's tasks) at their first
conformer (:func:`watched`), and kept: RDKit's log goes to the ``rdkit`` logger, seen by the
watcher only (nothing printed: a conformer's failures are recorded in its ``reason``), every
``rdApp`` log off but info and warning. Importing featurecache, or driving a build from a program
(:func:`featurecache.build.run.run_build`), leaves RDKit's logging as the program set it: the
routing used to be done at import, so a program that imported ``featurecache.chem.conformer``,
``chem.library`` or ``chem.reference``, or called ``run_build``, lost its RDKit errors and its own
handlers on the ``rdkit`` logger (review R35b s49 #3). A program that calls the conformer
functions itself gets the routing for good, as a build's workers do.

(A routing held only while a conformer is computed and then put back was tried and dropped: RDKit
has no getter for its log destination, and finding it by sending a marker with file descriptor 2
on a pipe hung a process whose other threads wrote 64 KiB to stderr meanwhile and killed the
children they started then with SIGPIPE: review R36a s49 #1, #2.)
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from rdkit import rdBase

__all__ = ["RDKIT_INTERRUPTED", "interrupted", "route", "watched"]

#: words of RDKit's log records that say a SIGINT cut its work short (lower case)
RDKIT_INTERRUPTED = "interrupted"

P = ParamSpec("P")
R = TypeVar("R")


class _InterruptWatch(logging.Handler):
    """Notes the threads in which RDKit logged that a SIGINT cut its work short (module doc)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._threads: set[int] = set()
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if RDKIT_INTERRUPTED in record.getMessage().lower() and record.thread is not None:
            with self._guard:
                self._threads.add(record.thread)

    def take(self, thread: int) -> bool:
        """Whether RDKit said so in ``thread`` since the last call for it."""
        with self._guard:
            seen = thread in self._threads
            self._threads.discard(thread)
            return seen


_WATCH = _InterruptWatch()
_ROUTED = threading.Event()
_ROUTING = threading.Lock()


def route() -> None:
    """RDKit's log to Python's ``rdkit`` logger, seen by the watcher only (module doc); once per
    process, idempotent. Its info and warning logs stay on (RDKit writes its notes to them)."""
    if _ROUTED.is_set():
        return
    with _ROUTING:
        if _ROUTED.is_set():
            return
        rdBase.LogToPythonLogger()
        rdBase.DisableLog("rdApp.*")
        rdBase.EnableLog("rdApp.info")
        rdBase.EnableLog("rdApp.warning")
        rdkit_logger = logging.getLogger("rdkit")
        rdkit_logger.handlers = [_WATCH]
        rdkit_logger.propagate = False
        rdkit_logger.setLevel(logging.DEBUG)
        _ROUTED.set()


def watched(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with RDKit's log routed to the watcher first (:func:`route`)."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        route()
        return fn(*args, **kwargs)

    return run


def interrupted(thread: int) -> bool:
    """Whether RDKit logged in ``thread`` that a SIGINT cut its work short, since the last call."""
    return _WATCH.take(thread)
