"""Reading a ``featurecache serve`` process's output while it runs: each line with the moment it was
read, and waits for lines (every worker's "Application startup complete.") instead of for a clock
(review R42a s52 #1, #3)."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from typing import IO

#: what uvicorn logs in a worker once its lifespan started: the worker then takes connections, and its
#: stop logs "Finished server process" (uvicorn logs that only for a server that started)
STARTED = "Application startup complete."


class ServeOutput:
    """The lines of ``proc``'s stdout (``text=True``, stderr merged into it), read by a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self._stream: IO[str] = proc.stdout
        self._lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._ended = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            with self._cond:
                self._lines.append((time.monotonic(), line))
                self._cond.notify_all()
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 90.0) -> list[tuple[float, str]]:
        """The first ``count`` lines matching ``pattern`` (a regex), waiting up to ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                hits = [(t, line) for t, line in self._lines if re.search(pattern, line)]
                if len(hits) >= count:
                    return hits[:count]
                left = deadline - time.monotonic()
                assert not self._ended and left > 0, f"{count} x {pattern!r} not seen:\n{self.text()[-3000:]}"
                self._cond.wait(left)

    def finish(self, timeout: float = 30.0) -> str:
        """All the output, once the process closed it."""
        self._thread.join(timeout)
        return self.text()

    def matching(self, pattern: str) -> list[tuple[float, str]]:
        with self._cond:
            return [(t, line) for t, line in self._lines if re.search(pattern, line)]

    def text(self) -> str:
        with self._cond:
            return "".join(line for _, line in self._lines)
