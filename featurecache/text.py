"""Small helpers for the words of messages: one way to name the first few of a list."""

from __future__ import annotations

from collections.abc import Iterable


def first_named(items: Iterable[str], limit: int, sep: str = ", ", noun: str = "") -> str:
    """The first ``limit`` of ``items`` joined by ``sep``, then how many were left out:
    ``"a, b and 3 more"``; with ``sep="; "``, ``"a; b; and 3 more"`` (the clause keeps the list's
    punctuation). ``noun`` follows "more" (``"and 3 more residues"``). All items when they fit."""
    items = list(items)
    shown = sep.join(items[:limit])
    rest = len(items) - limit
    if rest <= 0:
        return shown
    joiner = "; and" if sep.strip() == ";" else " and"
    return f"{shown}{joiner} {rest} more" + (f" {noun}" if noun else "")
