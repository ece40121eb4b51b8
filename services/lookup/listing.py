"""The paged, filtered listing of the entries index (GET /v1/entries)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featurecache.arrow_columns import column_array
from featurecache.const import MOL_TYPE_NAMES
from featurecache.errors import InvalidRequest

#: index column holding each molecule type's token count
MOL_TYPE_COLUMNS = {name: f"n_{name}_tokens" for name in MOL_TYPE_NAMES}

SUMMARY_COLUMNS = (
    "id", "token_count", "atom_count", "bond_count", "n_chains", "resolution", "release_date",
    "method", "structure_id",
)  # fmt: skip


@dataclass(frozen=True)
class EntryQuery:
    """Filters of the listing; every bound is inclusive, None = no bound.

    ``max_resolution`` drops entries without a stated resolution; ``released_after`` /
    ``released_before`` (ISO dates) drop undated entries; ``mol_types``: entries holding tokens of
    *every* listed type (``protein``, ``rna``, ``dna``, ``ligand``).
    """

    max_resolution: float | None = None
    released_after: str | None = None
    released_before: str | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    min_atoms: int | None = None
    max_atoms: int | None = None
    mol_types: tuple[str, ...] = ()

    def mask(self, entries: pa.Table) -> np.ndarray:
        """bool ``[n_entries]``: which rows pass."""
        n = entries.num_rows
        keep = np.ones(n, dtype=bool)
        if n == 0:
            return keep
        if self.max_resolution is not None:
            res = column_array(entries, "resolution", float)
            keep &= np.isfinite(res) & (res <= self.max_resolution)
        if self.released_after is not None or self.released_before is not None:
            keep &= _dated_between(entries.column("release_date"), self.released_after, self.released_before)
        for col, lo_b, hi_b in (
            ("token_count", self.min_tokens, self.max_tokens),
            ("atom_count", self.min_atoms, self.max_atoms),
        ):
            if lo_b is None and hi_b is None:
                continue
            v = np.asarray(entries.column(col).to_numpy(zero_copy_only=False), np.int64)
            if lo_b is not None:
                keep &= v >= lo_b
            if hi_b is not None:
                keep &= v <= hi_b
        for name in self.mol_types:
            v = np.asarray(
                pc.fill_null(entries.column(MOL_TYPE_COLUMNS[name]), 0).to_numpy(zero_copy_only=False)
            )
            keep &= v > 0
        return keep


def _dated_between(column: pa.ChunkedArray, lo: str | None, hi: str | None) -> np.ndarray:
    """bool ``[n]``: the date (first 10 characters, ``YYYY-MM-DD``) is stated and within
    ``[lo, hi]``; compared as strings, in Arrow (no Python object per row)."""
    dates = pc.utf8_slice_codeunits(pc.fill_null(column.cast(pa.string()), ""), 0, 10)
    ok = pc.not_equal(dates, "")
    if lo is not None:
        ok = pc.and_(ok, pc.greater_equal(dates, lo))
    if hi is not None:
        ok = pc.and_(ok, pc.less_equal(dates, hi))
    return np.asarray(ok.to_numpy(zero_copy_only=False), dtype=bool)


def make_query(
    *, max_resolution: float | None, released_after: str | None, released_before: str | None,
    min_tokens: int | None, max_tokens: int | None, min_atoms: int | None, max_atoms: int | None,
    mol_types: list[str] | None,
) -> EntryQuery:  # fmt: skip
    """Validate the listing's query parameters (dates ``YYYY-MM-DD``, known molecule types)."""
    for label, d in (("released_after", released_after), ("released_before", released_before)):
        if d is not None and not _is_iso_date(d):
            raise InvalidRequest(f"{label}: {d!r} is not a date of the form YYYY-MM-DD")
    names = [m.strip().lower() for v in mol_types or [] for m in v.split(",") if m.strip()]
    for m in names:
        if m not in MOL_TYPE_COLUMNS:
            raise InvalidRequest(f"mol_type: unknown {m!r}; known: {list(MOL_TYPE_COLUMNS)}")
    return EntryQuery(
        max_resolution=max_resolution, released_after=released_after, released_before=released_before,
        min_tokens=min_tokens, max_tokens=max_tokens, min_atoms=min_atoms, max_atoms=max_atoms,
        mol_types=tuple(dict.fromkeys(names)),
    )  # fmt: skip


def _is_iso_date(text: str) -> bool:
    import datetime

    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10


def list_entries(entries: pa.Table, query: EntryQuery, offset: int, limit: int) -> dict[str, Any]:
    """One page: ``{"total", "offset", "limit", "next_offset", "items": [summary rows]}``."""
    rows = np.flatnonzero(query.mask(entries))
    page = rows[offset : offset + limit]
    items: list[dict[str, Any]] = []
    if page.size:
        cols = [c for c in SUMMARY_COLUMNS if c in entries.column_names]
        t = entries.select(cols).take(pa.array(page, pa.int64()))
        mol = entries.select([c for c in MOL_TYPE_COLUMNS.values() if c in entries.column_names]).take(
            pa.array(page, pa.int64())
        )
        for row, counts in zip(t.to_pylist(), mol.to_pylist(), strict=True):
            res = row.get("resolution")
            if isinstance(res, float) and not np.isfinite(res):
                row["resolution"] = None  # JSON has no NaN
            row["mol_types"] = [m for m, c in MOL_TYPE_COLUMNS.items() if (counts.get(c) or 0) > 0]
            items.append(row)
    nxt = offset + limit
    return {
        "total": int(rows.size), "offset": offset, "limit": limit,
        "next_offset": nxt if nxt < rows.size else None, "items": items,
    }  # fmt: skip
