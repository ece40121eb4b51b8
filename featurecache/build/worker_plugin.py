"""Worker-side setup of the embedded LocalCluster (imported only where distributed is installed).

Ctrl-C reaches every process of the terminal's foreground group, the embedded cluster's worker
processes included: the driver decides what it means (one line, exit 130, the finished parts kept)
and shuts them down; a worker that took it would die with a KeyboardInterrupt traceback of its
own. The cluster is started inside :func:`featurecache.signals.sigint_blocked`: the threads it
starts (its IO loop, and from it each nanny's process-starting thread) inherit the blocked mask,
and so does each worker process they spawn (the mask survives fork and exec), also one a nanny
restarts later. It stays blocked in every thread of the worker: once :class:`IgnoreInterrupt`
runs in it (after seconds of imports), a thread of its own takes each SIGINT with ``sigwait``
and only silences the worker's Dask loggers, so that the driver's shutdown is quiet
(:func:`featurecache.signals.take_sigint_in_a_thread`); one that came meanwhile was pending and
is taken then. A handled (unblocked) SIGINT would not do: RDKit replaces the process's handler
while it embeds a molecule, and a SIGINT then cancels the embedding, which fell back to a worse
conformer that the store kept.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from featurecache.signals import quiet_loggers, take_sigint_in_a_thread


class IgnoreInterrupt(WorkerPlugin):
    """SIGINT in the worker process stays blocked and only silences its Dask/tornado/asyncio
    loggers (the driver's shutdown of an interrupted build is then quiet), taken by a thread of
    its own (see the module doc): one that came while the worker started does the same."""

    def setup(self, worker: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            take_sigint_in_a_thread()
            # SIGTERM to the whole group (``timeout``, Slurm) reaches the workers too: as for
            # Ctrl-C, the driver stops them (its nanny's stop, then SIGKILL); one that died of it
            # was logged by the nanny as killed by signal 15 while the driver shut down
            signal.signal(signal.SIGTERM, _quiet_on_sigterm)


def _quiet_on_sigterm(signum: int, frame: Any) -> None:
    quiet_loggers()
