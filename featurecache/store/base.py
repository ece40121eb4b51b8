"""The reading interface every source implements: the local store and the HTTP lookup client.

A conformance suite (tests/conformance) runs the same tests against every implementation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from featurecache.types import Entry


class FeatureReader(ABC):
    """Random access to a feature store.

    ``entries``/``chains``/``interfaces``/``failures``/``msas``/``components`` are Arrow tables
    (see store/index.py for their schemas); ``entry(id)`` returns one entry's arrays.
    """

    @property
    @abstractmethod
    def ids(self) -> list[str]:
        """Entry ids, sorted."""

    @property
    @abstractmethod
    def entries(self) -> pa.Table: ...

    @property
    @abstractmethod
    def chains(self) -> pa.Table: ...

    @property
    @abstractmethod
    def interfaces(self) -> pa.Table: ...

    @property
    @abstractmethod
    def failures(self) -> pa.Table: ...

    @property
    def msas(self) -> pa.Table:
        return pa.table({})

    @property
    def components(self) -> pa.Table:
        return pa.table({})

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """Versions, counts and sizes."""

    @abstractmethod
    def entry(self, entry_id: str, arrays: Sequence[str] | None = None) -> Entry:
        """One entry. ``arrays``: names like ``"atoms"`` (a whole group) or ``"atoms/coords"``
        (one field); None = everything. Raises :class:`~featurecache.errors.NotFound`."""

    def entries_batch(self, entry_ids: Sequence[str], arrays: Sequence[str] | None = None) -> list[Entry]:
        return [self.entry(i, arrays) for i in entry_ids]

    def msa(
        self, key: str, rows: Sequence[int] | slice | None = None, cols: Sequence[int] | slice | None = None
    ) -> Any:
        """A block of one stored MSA (see store/msa.py); NotFound when no MSA has this key."""
        from featurecache.errors import NotFound

        raise NotFound(f"no MSA {key!r}: this store has no MSAs")

    def entry_chains(self, entry_id: str) -> list[dict[str, Any]]:
        """Chains index rows of one entry, by asym_id."""
        t = self.chains
        if t.num_rows == 0:
            return []
        import pyarrow.compute as pc

        return t.filter(pc.equal(t.column("entry_id"), entry_id)).to_pylist()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    def __enter__(self) -> FeatureReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
