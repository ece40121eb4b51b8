"""One progress bar per build stage (rich), so every long stage shows how far it is."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_stages(enabled: bool) -> Iterator[Callable[[str, int], Callable[[int], None]]]:
    """``stage(label, total) -> advance(n)``: one rich bar per stage, on stderr (stdout keeps what a
    command reports); nothing when disabled (or when stderr is not a terminal: rich then draws no
    live bar, only the final state)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, console=Console(stderr=True), disable=not enabled) as progress:

        def stage(label: str, total: int) -> Callable[[int], None]:
            task = progress.add_task(label, total=total)

            def advance(n: int = 1) -> None:
                progress.advance(task, n)

            return advance

        yield stage


@contextmanager
def stage_bar(label: str, total: int, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A bar titled ``label`` over ``total`` items; yields ``advance(n)``. Draws nothing when disabled."""
    with progress_stages(enabled) as stage:
        yield stage(label, total)
