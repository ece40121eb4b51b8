"""Worker-side setup of the embedded LocalCluster (imported only where distributed is installed)."""

from __future__ import annotations

import signal
import threading
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin


class IgnoreInterrupt(WorkerPlugin):
    """Ctrl-C reaches the whole process group, and every worker would print its own
    KeyboardInterrupt traceback; the workers ignore it and the driver shuts them down instead."""

    def setup(self, worker: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
