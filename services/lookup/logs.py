"""Logging set up for the lookup service without leaving a caller's logging changed.

``featurecache serve`` and uvicorn configure logging with ``logging.config.dictConfig``, which
changes the whole process: it closes and forgets every handler there is (a caller's
``FileHandler(mode="w")`` then drops every later record, a ``MemoryHandler`` loses its target),
resets the existing children of the loggers it names (level, handlers, propagation), re-enables (or
disables) every other existing logger, and gives ``featurecache`` and ``services`` uvicorn's handler
without propagation, so a caller's root handlers no longer saw any featurecache line once
``run_server`` had run in its process (review R35b s49 #8). :func:`handlers_kept` keeps the
handlers out of dictConfig's reach; :func:`logging_kept` puts the loggers back afterwards.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

# logging's own registry of handlers (what dictConfig closes and forgets, what logging.shutdown
# flushes at exit) and the lock dictConfig holds: module internals, the same from 3.11 to 3.13
_logging: Any = logging


@contextmanager
def handlers_kept() -> Iterator[None]:
    """Run a ``dictConfig`` inside this block without it closing or forgetting the handlers that
    exist before it (those it makes are registered as usual, and closed by a later dictConfig as
    usual). Holds logging's lock throughout, as dictConfig does."""
    with _logging._lock:
        handler_refs, named = _logging._handlerList[:], dict(_logging._handlers)
        del _logging._handlerList[:]  # dictConfig's _clearExistingHandlers closes what is listed here
        _logging._handlers.clear()
        try:
            yield
        finally:
            _logging._handlerList[:0] = [ref for ref in handler_refs if ref() is not None]
            for name, handler in named.items():
                _logging._handlers.setdefault(name, handler)


def _loggers() -> list[logging.Logger]:
    """The root logger and every other logger there is (not logging's placeholders)."""
    others = logging.root.manager.loggerDict.values()
    return [logging.root, *(lg for lg in others if isinstance(lg, logging.Logger))]


def _under(name: str, names: Iterable[str]) -> bool:
    return any(name == n or name.startswith(n + ".") for n in names)


@contextmanager
def logging_kept(configured: Iterable[str], disables_existing: bool = False) -> Iterator[None]:
    """Put every logger back as it was before this block once it ends, however it ends: level,
    handlers, propagation and the disabled flag of each logger that existed (the root logger
    included); a logger made inside it at or under a name in ``configured`` (the names a dictConfig
    there configures) goes back to a new logger's defaults, and one made elsewhere is enabled
    again when ``disables_existing`` (the config's ``disable_existing_loggers``)."""
    configured = tuple(configured)
    with _logging._lock:
        kept = {lg: (lg.level, list(lg.handlers), lg.propagate, lg.disabled) for lg in _loggers()}
    try:
        yield
    finally:
        with _logging._lock:
            for lg in _loggers():
                if lg in kept:
                    level, handlers, propagate, disabled = kept[lg]
                elif _under(lg.name, configured):
                    level, handlers, propagate, disabled = logging.NOTSET, [], True, False
                else:
                    if disables_existing:
                        lg.disabled = False
                    continue
                lg.handlers = handlers
                lg.propagate, lg.disabled = propagate, disabled
                if lg.level != level:
                    lg.setLevel(level)  # (clears every logger's cache of effective levels)
            _logging.root.manager._clear_cache()  # a logger's cached "enabled for" may date from the block
