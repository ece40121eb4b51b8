"""Variables set in ``os.environ`` for a while, each put back afterwards where it still holds the
value set (another thread's change since stands): how a setting reaches processes started meanwhile
(the lookup server's workers, the build's fork server) without staying in a caller's environment
(review R35b s49 #6, #8)."""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["EnvironSet"]


class EnvironSet:
    """A block of variables set in ``os.environ`` (``environ[key] = value``, :meth:`update`): on
    leaving it, each is put back as it was before its first setting, where it still holds the
    value set last."""

    def __init__(self) -> None:
        self._before: dict[str, str | None] = {}
        self._set: dict[str, str] = {}

    def __setitem__(self, key: str, value: str) -> None:
        self._before.setdefault(key, os.environ.get(key))
        self._set[key] = value
        os.environ[key] = value

    def update(self, values: Mapping[str, str]) -> None:
        for key, value in values.items():
            self[key] = value

    def __enter__(self) -> EnvironSet:
        return self

    def __exit__(self, *exc: object) -> None:
        for key, value in self._set.items():
            if os.environ.get(key) != value:  # changed since: not ours to put back
                continue
            before = self._before[key]
            if before is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = before
