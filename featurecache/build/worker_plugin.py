"""Worker-side setup of the embedded LocalCluster (imported only where distributed is installed).

Ctrl-C reaches every process of the terminal's foreground group, the embedded cluster's worker
processes included: the driver decides what it means (one line, exit 130, the finished parts kept)
and shuts them down; a worker that took it would die with a KeyboardInterrupt traceback of its
own. A worker handles SIGINT (it only silences its Dask loggers, so that the driver's shutdown
is quiet: :func:`featurecache.signals.quiet_pending_sigint`) once :class:`IgnoreInterrupt` runs in it, which is after seconds of
imports (distributed, then featurecache; longer under load). To close that window the cluster is
started inside :func:`featurecache.signals.sigint_blocked`: the threads it starts (its IO loop, and from it each
nanny's process-starting thread) inherit the blocked mask, and so does each worker process they
spawn (the mask survives fork and exec), also one a nanny restarts later. A SIGINT that comes
meanwhile stays pending in the worker until the plugin has set its handler and unblocks it.
"""

from __future__ import annotations

import threading
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from featurecache.signals import quiet_pending_sigint


class IgnoreInterrupt(WorkerPlugin):
    """SIGINT in the worker process only silences its Dask/tornado/asyncio loggers (the driver's
    shutdown of an interrupted build is then quiet), then it is unblocked (see the module doc):
    one that came while the worker started does the same."""

    def setup(self, worker: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            quiet_pending_sigint()
