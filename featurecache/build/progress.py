"""One progress bar per build stage (rich), so every long stage shows how far it is."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def stage_bar(label: str, total: int, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A bar titled ``label`` over ``total`` items; yields ``advance(n)``. Draws nothing when disabled."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, disable=not enabled, transient=False) as bar:
        task = bar.add_task(label, total=total)

        def advance(n: int = 1) -> None:
            bar.advance(task, n)

        yield advance
