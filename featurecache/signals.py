"""SIGINT in helper processes: what the build's Dask workers and the client's process pool share.

Ctrl-C reaches every process of the terminal's foreground group. The parent decides what it means
(the build: one line, exit 130, the finished parts kept; ``featurecache train``: finish the step)
and shuts its helpers down; a helper that took it would die with a KeyboardInterrupt traceback of
its own. A helper can ignore SIGINT only once it runs its own code, seconds of imports after it
started, so it is started with SIGINT blocked (:func:`sigint_blocked`; the mask survives fork and
exec) and its first act is :func:`ignore_pending_sigint`, which discards one that came meanwhile
(POSIX: a pending signal whose action is set to ignore is discarded). Standard library only: the
build imports it without torch, the client without Dask.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def sigint_blocked(start_resource_tracker: bool = True) -> Iterator[None]:
    """SIGINT held back in the calling thread meanwhile (delivered when the block ends). Threads
    started meanwhile, and processes they start, start with it blocked. ``start_resource_tracker``:
    start multiprocessing's resource tracker first: CPython starts it with SIGINT blocked and then
    unblocks SIGINT in the starting thread (bpo-33613), which would reopen the window there."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX
        yield
        return
    if start_resource_tracker:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore_pending_sigint() -> None:
    """In a helper started inside :func:`sigint_blocked` (its main thread): ignore SIGINT from now
    on, then unblock it, which discards one that came while it started."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
