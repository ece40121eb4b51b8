"""One progress bar per build stage (rich), so every long stage shows how far it is; log lines instead
when there is no bar to draw (``--no-progress``, or stderr not a terminal: a log file, a CI job)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

#: Without a bar, a stage logs ``label done/total`` when it starts and ends, and in between when it
#: has moved on by LOG_EVERY_FRACTION of its total *and* LOG_EVERY_S have passed since its last
#: line (the rarer of the two): at most 1 / LOG_EVERY_FRACTION lines between the first and last.
LOG_EVERY_FRACTION = 0.1
LOG_EVERY_S = 30.0


class _StageLog:
    """The log lines of one stage without a bar."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total = label, total
        self.done = 0
        self.t0 = self.last_t = time.monotonic()
        self.last_done = 0
        self.step = max(1, math.ceil(total * LOG_EVERY_FRACTION))
        self.finished = total <= 0  # an empty stage logs nothing
        if not self.finished:
            log.info("%s 0/%d", label, total)

    def advance(self, n: int = 1) -> None:
        if self.finished:
            return
        self.done += n
        now = time.monotonic()
        if self.done >= self.total:
            self.end()
        elif self.done - self.last_done >= self.step and now - self.last_t >= LOG_EVERY_S:
            log.info("%s %d/%d (%d%%, %.0f s)", self.label, self.done, self.total,
                     100 * self.done // self.total, now - self.t0)  # fmt: skip
            self.last_t, self.last_done = now, self.done

    def end(self) -> None:
        if not self.finished:
            self.finished = True
            log.info("%s %d/%d done in %.1f s", self.label, self.done, self.total, time.monotonic() - self.t0)


@contextmanager
def progress_stages(
    enabled: bool, log_lines: bool = False
) -> Iterator[Callable[[str, int], Callable[[int], None]]]:
    """``stage(label, total) -> advance(n)``: one rich bar per stage, on stderr (stdout keeps what a
    command reports); nothing when disabled (when stderr is not a terminal rich draws no live bar,
    only the final state). ``log_lines`` (the build's stages): when disabled, or when stderr is not
    a terminal, each stage logs ``label done/total`` lines instead of any bar
    (:data:`LOG_EVERY_FRACTION`, :data:`LOG_EVERY_S`): a stage's start, its end, and a few between."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    live = enabled and (console.is_terminal or console.is_jupyter or not log_lines)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
    logged: list[_StageLog] = []
    with Progress(*columns, console=console, disable=not live) as progress:

        def stage(label: str, total: int) -> Callable[[int], None]:
            if log_lines and not live:
                logged.append(_StageLog(label, total))
                return logged[-1].advance
            task = progress.add_task(label, total=total)

            def advance(n: int = 1) -> None:
                progress.advance(task, n)

            return advance

        yield stage
    for s in logged:  # a stage that ended short of its total (nothing raised): its last count
        s.end()


@contextmanager
def stage_bar(label: str, total: int, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A bar titled ``label`` over ``total`` items (a build stage); yields ``advance(n)``. Log lines
    instead of the bar when disabled or stderr is not a terminal (:func:`progress_stages`)."""
    with progress_stages(enabled, log_lines=True) as stage:
        yield stage(label, total)
