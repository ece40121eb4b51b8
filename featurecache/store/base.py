"""The reading interface every source implements: the local store and the HTTP lookup client.

A conformance suite (tests/conformance) runs the same tests against every implementation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from featurecache.types import Entry

#: index columns that describe storage, not the entry (left out of ``Entry.meta``)
ENTRY_META_SKIP = frozenset({"part", "key"})
#: entries whose index rows (meta, chains) a reader keeps as Python dicts, per index table: one
#: Arrow row to dicts costs ~0.13 ms, every sample of an entry read whole (review R27d s45 #8)
ROWS_KEPT = 4096


def row_ranges(ids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """``(start, count)`` of each run of equal ids in a column sorted by id (one pass)."""
    out: dict[str, tuple[int, int]] = {}
    start = 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[start]:
            out[ids[start]] = (start, i - start)
            start = i
    return out


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

    def row_of(self, entry_id: str) -> int:
        """Row of an entry in ``entries`` (NotFound if absent)."""
        from featurecache.errors import NotFound

        try:
            return self.ids.index(entry_id)
        except ValueError:
            raise NotFound(f"no entry {entry_id!r}") from None

    def entry_meta(self, entry_id: str) -> dict[str, Any]:
        """The entry's index row, without the storage columns (a fresh dict; the row is kept, for
        this ``entries`` table, as :meth:`_kept_rows` says)."""
        entries = self.entries
        kept = self._kept_rows("entries", entries)
        meta = kept.get(entry_id)
        if meta is None:
            row = self.row_of(entry_id)
            meta = {k: v for k, v in entries.slice(row, 1).to_pylist()[0].items() if k not in ENTRY_META_SKIP}
            kept[entry_id] = meta
        return dict(meta)

    def entry_chains(self, entry_id: str) -> list[dict[str, Any]]:
        """Chains index rows of one entry, by asym_id (the chains index is sorted by entry id). The
        row ranges are kept with the table object they index, so a reader whose tables can be
        fetched anew (``LookupClient.refresh``) never slices one snapshot with another's ranges."""
        chains = self.chains
        cached: tuple[Any, dict[str, tuple[int, int]]] | None = getattr(self, "_chain_ranges", None)
        if cached is None or cached[0] is not chains:
            cached = (chains, row_ranges(chains.column("entry_id").to_pylist() if chains.num_rows else []))
            self._chain_ranges = cached
        kept = self._kept_rows("chains", chains)
        rows = kept.get(entry_id)
        if rows is None:
            start, count = cached[1].get(entry_id, (0, 0))
            rows = kept[entry_id] = chains.slice(start, count).to_pylist() if count else []
        return [dict(r) for r in rows]

    def _kept_rows(self, name: str, table: pa.Table) -> dict[str, Any]:
        """Entry id → its rows of index table ``name`` as converted before, for ``table`` (a new
        table object, e.g. after ``LookupClient.refresh``, starts empty; so does a full one, past
        :data:`ROWS_KEPT`). Callers get copies: one sample's changes never reach the next."""
        kept: dict[str, tuple[pa.Table, dict[str, Any]]] | None = getattr(self, "_rows_kept", None)
        if kept is None:
            kept = {}
            self._rows_kept = kept
        got = kept.get(name)
        if got is None or got[0] is not table or len(got[1]) >= ROWS_KEPT:
            got = kept[name] = (table, {})
        return got[1]

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""

    def __enter__(self) -> FeatureReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
