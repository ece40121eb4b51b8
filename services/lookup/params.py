"""Turning request parameters into library arguments, refusing malformed ones with 4xx.

Ids and keys are only ever looked up in the index (a dict), never joined into a path, so nothing
outside the store can be opened whatever they contain; the checks here make malformed values a
clear 422 instead of a 404.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from featurecache.errors import InvalidRequest
from featurecache.store.layout import ENTRY_GROUPS

#: an entry id is at most a relative path with ``/`` written ``__`` (``build.discover._id_forms``),
#: and a path is at most ``PATH_MAX`` (4096) bytes: 255 refused ids of nested inputs whose short
#: names collide (review R12 s39 M2)
MAX_NAME_CHARS = 8192


class LimitExceeded(InvalidRequest):
    """A request exceeds a configured limit; answered 413 with the limit's name and value."""

    def __init__(self, limit: str, maximum: int, got: int, what: str) -> None:
        super().__init__(f"{what}: {got} exceeds the limit {limit}={maximum}")
        self.limit = limit
        self.maximum = maximum
        self.got = got


def check_name(value: str, what: str) -> str:
    """An entry id or MSA key as the build gives them: what a file name or a relative path (``/``
    written ``__``) of a file that is not hidden can be, so no ``/``, no NUL, no leading ``.``.

    Every id the build can produce passes: a backslash, a tab or another control character are
    legal in a file name on Linux, and the service refused entries built from such files (review
    R12 s39 M2). Ids are only looked up in the index, never joined into a path."""
    if not value or len(value) > MAX_NAME_CHARS:
        raise InvalidRequest(f"malformed {what} {value!r}: must be 1..{MAX_NAME_CHARS} characters")
    if value.startswith(".") or "/" in value:
        raise InvalidRequest(f"malformed {what} {value!r}: no '/' or leading '.' allowed")
    if "\0" in value:
        raise InvalidRequest(f"malformed {what} {value!r}: NUL is not allowed")
    return value


def check_limit(limit: str, maximum: int, got: int, what: str) -> None:
    if got > maximum:
        raise LimitExceeded(limit, maximum, got, what)


def parse_arrays(values: Sequence[str] | None) -> list[str] | None:
    """``?arrays=atoms/coords,tokens&arrays=bonds`` → ``["atoms/coords", "tokens", "bonds"]``.

    None (parameter absent) means every array; an empty value (``?arrays=``) none (index row and
    chains only). Names: a group (``atoms``) or ``group/field``.
    """
    if values is None:
        return None
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if any(v.strip() and not v.strip(", ") for v in values):
        raise InvalidRequest(f"arrays: malformed selection {list(values)!r}")
    for name in names:
        group, _, fld = name.partition("/")
        dtype = ENTRY_GROUPS.get(group)
        if dtype is None:
            raise InvalidRequest(f"unknown array {name!r}: groups are {sorted(ENTRY_GROUPS)}")
        if fld and fld not in (dtype.names or ()):
            raise InvalidRequest(f"unknown array {name!r}: fields of {group} are {list(dtype.names or ())}")
    return list(dict.fromkeys(names))


#: the largest index or row number a request may carry: past any axis a store can hold, and inside
#: int64 (JSON numbers past it overflowed numpy: a 500 instead of a 422)
MAX_INDEX = 2**62


def parse_index_spec(
    spec: str | None, what: str, maximum: int | None = None, limit: str = ""
) -> slice | list[int] | None:
    """Row/column selection of an MSA slice from a query string.

    Absent → None (all); ``""`` → nothing; ``"a:b"`` (either end optional) → ``slice(a, b)``;
    ``"0,5,9:12"`` → ``[0, 5, 9, 10, 11]`` (closed ranges only inside a list). A list that would
    hold more than ``maximum`` indices is refused (413, naming ``limit``) before it is built, so a
    short spec such as ``0:16000000`` costs nothing.
    """
    if spec is None:
        return None
    spec = spec.strip()
    if not spec:
        return []
    try:
        if "," not in spec and ":" in spec:
            a, _, b = spec.partition(":")
            if ":" in b:
                raise ValueError("steps are not supported")
            start = _index(a) if a.strip() else None
            stop = _index(b) if b.strip() else None
            return slice(start, stop)
        bounds: list[tuple[int, int]] = []
        count = 0
        for item in spec.split(","):
            a, sep, b = item.partition(":")
            lo = _index(a)
            hi = _index(b) if sep else lo + 1
            if hi < lo:
                raise ValueError(f"bad range {item!r}")
            bounds.append((lo, hi))
            count += hi - lo
            if maximum is not None and count > maximum:
                raise LimitExceeded(limit, maximum, count, f"{what} selection")
            if count > 1 << 24:
                raise ValueError("too many indices")
        return [i for lo, hi in bounds for i in range(lo, hi)]
    except LimitExceeded:
        raise
    except ValueError as exc:
        raise InvalidRequest(f"malformed {what} selection {spec[:80]!r}: {exc}") from None


def _index(text: str) -> int:
    # ASCII digits only (spaces around them allowed, as "0, 5"): int() also reads "٣" (an Arabic-Indic
    # 3) and "1_000", so a typo was served as data instead of a 422 (review R26d s44 #7)
    text = text.strip(" ")
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"{text[:30]!r} is not an index (ASCII digits)")
    i = int(text)
    if i < 0:
        raise ValueError("negative indices are not supported")
    if i > MAX_INDEX:
        raise ValueError(f"index {text.strip()[:30]} is too large")
    return i


def resolve_indices(sel: slice | Sequence[int] | None, size: int, what: str) -> np.ndarray:
    """A selection against an axis of ``size``: int64 indices, each checked to be in range."""
    if sel is None:
        return np.arange(size, dtype=np.int64)
    if isinstance(sel, slice):
        start = 0 if sel.start is None else sel.start
        stop = size if sel.stop is None else sel.stop
        if start > stop:
            raise InvalidRequest(f"{what} {start}:{stop} is start > stop")
        if start > size or stop > size:
            raise InvalidRequest(f"{what} {start}:{stop} is outside 0:{size}")
        return np.arange(start, stop, dtype=np.int64)
    idx = np.asarray(list(sel) if not isinstance(sel, np.ndarray) else sel, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        bad = int(idx[(idx < 0) | (idx >= size)][0])
        raise InvalidRequest(f"{what} index {bad} is outside 0:{size}")
    return idx
