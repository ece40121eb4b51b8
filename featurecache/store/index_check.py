"""``featurecache verify``'s checks of the Arrow index itself (review R28c s46 #3).

Arrow IPC files carry no checksum, so a flipped bit in ``STORE/index/*.arrow`` read back as other
data (a resolution of 1.7775 for 1.84) and verify, which compared the index with the parts only by
which entries they hold, said "ok". Two checks:

- :func:`index_differences`: the index files against the tables a rebuild from the parts' own
  ``_index/`` gives (``index.index_tables``: the build's code, nothing written), column by column,
  NaN equal to NaN. A difference is damage of the index file (or a change made to it):
  ``verify --repair`` rewrites the index from the parts.
- :func:`chain_hash_problems`: each chain row's ``sequence_hash`` is the hash of its ``sequence``
  and ``mol_type`` (``featurize.seqhash.sequence_hash``, the MSA join key), which catches damage
  to a sequence in a part's own ``_index/chains.arrow``, where the first check cannot see it (the
  rebuilt index copies it).

Which copy is damaged: a part written since session 46 records the sha256 of its ``_index/`` files
in ``part.json``, so a difference in its rows is damage of the index file. A part written before
records none: for a difference in its rows the store alone cannot tell which copy changed
(:attr:`IndexDifference.rows` names the rows, ``verify`` the parts; review R29b s46 #1).

An index written before 7a7debb (session 18) kept the run records in ``entries`` and
``components`` (a ``seconds`` column) and had no ``timings`` / ``component_timings`` files: that
layout of an older featurecache is no damage (:data:`LEGACY_SECONDS`; review R29b s46 #2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from featurecache.errors import FeatureCacheError
from featurecache.featurize.seqhash import sequence_hash
from featurecache.store.index import RUN_RECORD_TABLES, read_table
from featurecache.store.layout import INDEX_DIR, TABLES

#: the column naming a row of each table in a difference's words (the first that a table has)
_ROW_NAMES = ("id", "entry_id", "key", "path")


#: the run-record column an index written before 7a7debb kept in ``entries`` and ``components``
#: (each entry's featurization and each component's conformer wall time), which today's index keeps
#: in ``timings`` and ``component_timings`` (:data:`index.RUN_RECORD_TABLES`)
LEGACY_SECONDS = "seconds"
#: the tables that held :data:`LEGACY_SECONDS` in that layout
LEGACY_SECONDS_TABLES = ("entries", "components")


@dataclass(frozen=True)
class IndexDifference:
    """How one ``STORE/index/<name>.arrow`` differs from the parts' own index."""

    why: str
    #: the rows that only one side holds, the index file's and the parts' (each a dict of the
    #: table's columns, ``part`` among them): what a difference of values is of. None: the file is
    #: missing or unreadable (``index_only``), or its columns differ (rows cannot be compared)
    rows: list[dict[str, Any]] | None = None
    #: the file is missing or does not read: the parts' own index is the one copy there is
    index_only: bool = False


def index_differences(
    root: Path, derived: dict[str, pa.Table]
) -> tuple[dict[str, IndexDifference], list[str]]:
    """(Table name → how ``STORE/index/<name>.arrow`` differs from ``derived`` (``index.index_tables``
    of the parts the published index is of: complete, own index readable, not held back), for each
    table that differs; notes). A table the rebuild gives no rows and that has no file (a build
    writes those only with rows) is no difference; schema metadata (the generation) is not
    compared. An index of the layout before 7a7debb (:data:`LEGACY_SECONDS` in entries and
    components, no run-record files) is compared without those and named in a note."""
    root = Path(root)
    out: dict[str, IndexDifference] = {}
    legacy = _legacy_layout(root)
    for name, want in sorted(derived.items()):
        f = root / INDEX_DIR / f"{name}.arrow"
        if not f.is_file():
            if want.num_rows and name not in TABLES and not (legacy and name in RUN_RECORD_TABLES):
                # (a missing one of TABLES: the open refuses)
                out[name] = IndexDifference(f"the file is missing; the parts hold {want.num_rows} row(s) of it",
                                            index_only=True)  # fmt: skip
            continue
        try:
            got = read_table(f, memory_map=False)
        except FeatureCacheError as exc:
            out[name] = IndexDifference(f"unreadable ({exc.__cause__ or exc})", index_only=True)
            continue
        legacy_column = LEGACY_SECONDS in got.column_names and LEGACY_SECONDS not in want.column_names
        if legacy and name in LEGACY_SECONDS_TABLES and legacy_column:
            got = got.drop_columns([LEGACY_SECONDS])
        why = table_difference(got, want)
        if why is not None:
            same_columns = set(got.column_names) == set(want.column_names)
            out[name] = IndexDifference(why, one_sided_rows(got, want) if same_columns else None)
    notes = []
    if legacy:
        notes.append(f"{root / INDEX_DIR} is of an older featurecache's layout (the wall times in a `seconds` "
                     "column of entries.arrow and components.arrow, no timings.arrow or component_timings.arrow): "
                     "not damage; the next build, or `featurecache verify --repair`, rewrites it in today's layout")  # fmt: skip
    return out, notes


def _legacy_layout(root: Path) -> bool:
    """Whether ``STORE/index/`` is of the layout before 7a7debb: ``entries.arrow`` has the
    :data:`LEGACY_SECONDS` column (a build since writes it without one)."""
    try:
        return LEGACY_SECONDS in read_table(root / INDEX_DIR / "entries.arrow", memory_map=False).column_names
    except FeatureCacheError:
        return False


def one_sided_rows(got: pa.Table, want: pa.Table) -> list[dict[str, Any]]:
    """The rows of ``got`` that ``want`` lacks and those of ``want`` that ``got`` lacks (as many
    times as one side has them more), comparing whole rows over ``want``'s columns (NaN equal to
    NaN): which rows a difference of two tables of the same columns is in, whatever their order."""
    columns = want.column_names
    g, w = got.select(columns).to_pylist(), want.to_pylist()
    count: dict[Any, int] = {}
    for r in w:
        k = _row_key(r)
        count[k] = count.get(k, 0) + 1
    out = []
    for r in g:
        k = _row_key(r)
        if count.get(k, 0):
            count[k] -= 1
        else:
            out.append(r)
    left = dict(count)
    for r in w:
        k = _row_key(r)
        if left.get(k, 0):
            left[k] -= 1
            out.append(r)
    return out


def _row_key(value: Any) -> Any:
    """``value`` as a hashable key, NaN equal to NaN."""
    if isinstance(value, float) and math.isnan(value):
        return ("NaN",)
    if isinstance(value, list):
        return tuple(_row_key(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _row_key(v)) for k, v in value.items())
    return value


def table_difference(got: pa.Table, want: pa.Table) -> str | None:
    """How ``got`` differs from ``want`` (None: the same columns, in any order, with equal values
    row by row; NaN equals NaN, null equals null), in words naming the first differing row."""
    if set(got.column_names) != set(want.column_names):
        extra, lacking = (
            set(got.column_names) - set(want.column_names),
            set(want.column_names) - set(got.column_names),
        )
        return f"columns differ (extra: {', '.join(sorted(extra)) or 'none'}; lacking: {', '.join(sorted(lacking)) or 'none'})"
    if got.num_rows != want.num_rows:
        return f"{got.num_rows} rows, the parts give {want.num_rows}"
    for column in want.column_names:
        a, b = got.column(column), want.column(column)
        if a.type != b.type:
            return f"column {column} is {a.type}, the parts give {b.type}"
        rows = _differing_rows(a.combine_chunks(), b.combine_chunks())
        if rows:
            named = next((c for c in _ROW_NAMES if c in want.column_names), None)
            first = rows[0]
            which = f" ({named} {want.column(named)[first].as_py()})" if named is not None else ""
            return (f"column {column} differs in {len(rows)} row(s), first row {first}{which}: "
                    f"{_shown(a[first].as_py())}, the parts give {_shown(b[first].as_py())}")  # fmt: skip
    return None


def _differing_rows(a: pa.Array, b: pa.Array) -> list[int]:
    if a.equals(b):
        return []
    if pa.types.is_floating(a.type):
        same = pc.equal(a, b)
        both_nan = pc.and_(pc.is_nan(a), pc.is_nan(b))
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        ok = pc.fill_null(pc.or_(pc.fill_null(pc.or_(same, both_nan), False), both_null), False)
        return pc.indices_nonzero(pc.invert(ok)).to_pylist()  # type: ignore[no-any-return]
    # other types whose values can hold a NaN (a list of floats) or not: value by value
    return [k for k, (x, y) in enumerate(zip(a.to_pylist(), b.to_pylist(), strict=True)) if not _same(x, y)]


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return x == y or (math.isnan(x) and math.isnan(y))
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(p, q) for p, q in zip(x, y, strict=True))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    return bool(x == y)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def chain_hash_problems(chains: pa.Table) -> dict[str, str]:
    """Entry id → the first of its chain rows whose ``sequence_hash`` is not the hash of its
    ``sequence`` and ``mol_type`` (as words), for each entry that has one."""
    needed = ["entry_id", "label_id", "mol_type", "sequence", "sequence_hash"]
    if not chains.num_rows or not set(needed) <= set(chains.column_names):
        return {}
    out: dict[str, str] = {}
    for row in chains.select(needed).to_pylist():
        if row["entry_id"] in out:
            continue
        try:
            want = sequence_hash(row["sequence"] or "", int(row["mol_type"]))
        except (KeyError, TypeError, ValueError):
            want = None
        if want != row["sequence_hash"]:
            out[row["entry_id"]] = (f"chain {row['label_id']}: its sequence_hash {row['sequence_hash']} is not the hash "
                                    f"of its sequence and mol_type ({want}): its chain row is damaged")  # fmt: skip
    return out
