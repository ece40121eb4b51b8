"""What the routes send: entries and MSA blocks as Arrow IPC (featurecache.store.arrow_io), index
tables as Arrow IPC streams; plus the size estimates the limits are checked against."""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from featurecache.const import NUM_RESTYPES
from featurecache.errors import InvalidRequest
from featurecache.store import arrow_io
from featurecache.store.info import info_document
from featurecache.store.layout import ENTRY_GROUPS, GROUP_OFFSETS, INDEX_DIR, TABLES, field_base_dtype
from featurecache.store.reader import LocalStore, merge_ranges
from featurecache.store.versions import store_versions
from featurecache.types import Entry, MSABlock
from services.lookup.sizes import SizeCount, size_count


def selected_fields(arrays: Sequence[str] | None) -> dict[str, list[str]]:
    """group → fields an ``arrays`` selection (already validated) asks for."""
    if arrays is None:
        return {g: list(dt.names or ()) for g, dt in ENTRY_GROUPS.items()}
    out: dict[str, list[str]] = {}
    for name in arrays:
        g, _, f = name.partition("/")
        fields = list(ENTRY_GROUPS[g].names or ()) if not f else [f]
        out[g] = list(dict.fromkeys([*out.get(g, []), *fields]))
    return {g: [f for f in (ENTRY_GROUPS[g].names or ()) if f in fs] for g, fs in out.items()}


def entry_dtypes(arrays: Sequence[str] | None) -> dict[str, np.dtype]:
    """Wire array name (``atoms/coords``) → dtype, in the order the reader returns them."""
    sel = selected_fields(arrays)
    return {
        f"{g}/{f}": field_base_dtype(ENTRY_GROUPS[g], f) for g in ENTRY_GROUPS if g in sel for f in sel[g]
    }


def estimate_entry_bytes(reader: LocalStore, entry_ids: Sequence[str], arrays: Sequence[str] | None) -> int:
    """Array bytes the entries will carry, from the index counts (raises NotFound for an unknown id)."""
    sel = selected_fields(arrays)
    entries = reader.entries
    total = 0
    rows = [reader.row_of(i) for i in entry_ids]
    if not rows:
        return 0
    take = pa.array(rows, pa.int64())
    for g, fields in sel.items():
        row_bytes = sum(_field_bytes(ENTRY_GROUPS[g], f) for f in fields)
        counts = entries.column(GROUP_OFFSETS[g][1]).take(take).to_numpy(zero_copy_only=False)
        total += int(np.asarray(counts, np.int64).sum()) * row_bytes
    return total


def _field_bytes(dtype: np.dtype, name: str) -> int:
    sub: np.dtype = dtype.fields[name][0]  # type: ignore[index]
    return int(sub.itemsize)


def entries_stream(
    reader: LocalStore, entry_ids: Sequence[str], arrays: Sequence[str] | None
) -> Iterator[bytes]:
    """The IPC stream of ``entry_ids`` (one record batch each), read lazily as it is sent."""
    records = (arrow_io.entry_record(reader.entry(i, arrays)) for i in entry_ids)
    return arrow_io.encode_stream(records, entry_dtypes(arrays))


def entry_bytes(reader: LocalStore, entry_id: str, arrays: Sequence[str] | None) -> bytes:
    return b"".join(entries_stream(reader, [entry_id], arrays))


def entry_bytes_length(reader: LocalStore, entry_id: str, arrays: Sequence[str] | None) -> int:
    """``len(entry_bytes(reader, entry_id, arrays))`` without reading any array (HEAD's
    content-length): the index gives the entry's row and chains (the record's attrs, exactly as
    the reader gives them to ``entry_bytes``) and each group's row count, hence each array's
    shape; Arrow IPC sizes its uncompressed buffers by shape and dtype alone, not by the values, so
    zero-filled arrays of those shapes (``np.zeros``: pages never touched) serialize to the same
    length, which is counted without a copy (``pa.MockOutputStream``). Raises NotFound as
    :func:`estimate_entry_bytes` does. Damage in the arrays' shards shows only when they are read."""
    row = reader.row_of(entry_id)
    sel = selected_fields(arrays)
    fields: dict[str, dict[str, np.ndarray]] = {g: {} for g in ENTRY_GROUPS}
    for g, names in sel.items():
        n = int(reader.entries.column(GROUP_OFFSETS[g][1])[row].as_py())
        for f in names:
            sub: np.dtype = ENTRY_GROUPS[g].fields[f][0]  # type: ignore[index]
            fields[g][f] = np.zeros((n, *sub.shape), sub.base)
    record = arrow_io.entry_record(
        Entry(
            id=entry_id, atoms=fields["atoms"], tokens=fields["tokens"], bonds=fields["bonds"],
            interfaces=fields["interfaces"], meta=reader.entry_meta(entry_id), chains=reader.entry_chains(entry_id),
        )
    )  # fmt: skip
    return _stream_length(record, entry_dtypes(arrays))


def _stream_length(record: arrow_io.Record, arrays: dict[str, np.dtype]) -> int:
    """``len(arrow_io.encode([record], arrays))``, counted without a copy of the arrays."""
    schema = arrow_io.schema_for(arrays)
    sink = pa.MockOutputStream()
    with ipc.new_stream(sink, schema) as writer:  # schema message, the record batch, end-of-stream
        writer.write_batch(arrow_io.record_batch(record, schema))
    return int(sink.size())


# ------------------------------------------------------------------------------ rows of an entry
#: what ``/v1/service`` advertises (``capabilities``) for ``POST /v1/entries/{entry_id}:rows``: a
#: client tells a service that reads some rows of an entry from one older than the route by it
ENTRY_ROWS = "entry_rows"
#: the wire name of the entry-local row numbers in a rows answer (the fields are ``group/field``)
ROWS_ARRAY = "rows"


def merge_row_ranges(ranges: Sequence[Sequence[int]], count: int, what: str) -> np.ndarray:
    """Entry-local half-open ``[start, stop)`` ``ranges`` of a group of ``count`` rows, checked and
    merged: int64 ``[R, 2]``, ascending, disjoint and not touching (ranges may come in any order and
    overlap; an empty one, start == stop, adds nothing). InvalidRequest naming the first range with
    start > stop or outside ``0..count``."""
    spans = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    bad = np.flatnonzero((spans[:, 0] > spans[:, 1]) | (spans[:, 0] < 0) | (spans[:, 1] > count))
    if bad.size:
        a, b = (int(v) for v in spans[bad[0]])
        why = "start > stop" if a > b else f"outside 0..{count}"
        raise InvalidRequest(f"{what}: range {bad[0]} [{a}, {b}) is {why}")
    return merge_ranges(spans)


def entry_rows(
    reader: LocalStore,
    settings: Any,
    entry_id: str,
    group: str,
    ranges: Sequence[Sequence[int]],
    fields: Sequence[str] | None,
) -> tuple[arrow_io.Record, dict[str, np.dtype]]:
    """Some rows of one entry's ``group``, for ``POST /v1/entries/{entry_id}:rows``: exactly the rows
    of ``ranges`` (:func:`merge_row_ranges`; ``LocalStore.read_rows`` reads whole inner chunks, the
    rows between ranges that share one are not sent) and ``fields`` of them (None: every field the
    entry's part stores; never one derived from others). Checks the group, the fields and the
    ranges (InvalidRequest), then ``max_response_bytes`` against the rows asked for (before
    anything is read). Returns the record (attrs: ``id``, ``group``, ``count`` the group's rows in
    the entry, ``part`` and ``stored_fields``, group → the fields the part stores; arrays: ``rows``
    int64 [n] ascending, ``group/field`` per field) and the stream's dtypes."""
    from services.lookup.params import check_limit

    dtype = ENTRY_GROUPS.get(group)
    if dtype is None:
        raise InvalidRequest(f"unknown group {group!r}: groups are {sorted(ENTRY_GROUPS)}")
    count = reader.row_count(entry_id, group)  # NotFound for an unknown id
    stored = {g: reader.stored_fields(entry_id, g) for g in ENTRY_GROUPS}  # array metadata only
    names = list(dtype.names or ())
    if fields is None:
        wanted = list(stored[group])
    else:
        unknown = [f for f in fields if f not in names]
        if unknown:
            raise InvalidRequest(f"{group} has no field(s) {unknown}: its fields are {names}")
        absent = [f for f in fields if f not in stored[group]]
        if absent:
            raise InvalidRequest(f"entry {entry_id}: its part stores no {', '.join(f'{group}/{f}' for f in absent)} "
                                 "(written by a featurizer older than the field)")  # fmt: skip
        wanted = [f for f in names if f in fields]
    spans = merge_row_ranges(ranges, count, f"entry {entry_id} {group} rows")
    n = int((spans[:, 1] - spans[:, 0]).sum())
    size = n * (8 + sum(_field_bytes(dtype, f) for f in wanted))
    check_limit("max_response_bytes", settings.max_response_bytes, size,
                f"rows of entry {entry_id} ({n} {group} rows, {size} array bytes)")  # fmt: skip
    rows = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans]) if n else np.zeros(0, np.int64)
    arrays: dict[str, np.ndarray] = {ROWS_ARRAY: rows}
    if n:
        got, records = reader.read_rows(entry_id, group, spans)
        take = None if got.size == n else np.searchsorted(got, rows)  # drop the rows between ranges
        for f in wanted:
            column = records[f]
            arrays[f"{group}/{f}"] = np.ascontiguousarray(column if take is None else column[take])
    else:
        for f in wanted:
            sub: np.dtype = dtype.fields[f][0]  # type: ignore[index]
            arrays[f"{group}/{f}"] = np.zeros((0, *sub.shape), sub.base)
    part = str(reader.entries.column("part")[reader.row_of(entry_id)].as_py())
    attrs = {"id": entry_id, "group": group, "count": count, "part": part,
             "stored_fields": {g: list(f) for g, f in stored.items()}}  # fmt: skip
    dtypes = {ROWS_ARRAY: np.dtype(np.int64), **{f"{group}/{f}": field_base_dtype(dtype, f) for f in wanted}}
    return arrow_io.Record(attrs, arrays), dtypes


def entry_rows_bytes(record: arrow_io.Record, dtypes: dict[str, np.dtype]) -> bytes:
    return arrow_io.encode([record], dtypes)


def msa_bytes(block: Any) -> bytes:
    return arrow_io.encode([arrow_io.msa_record(block)], arrow_io.MSA_DTYPES)


# maxsize 2: one reader is served at a time; the previous one, after the store is reopened, is
# dropped from the cache (and freed) soon instead of being held here with its index.
@functools.lru_cache(maxsize=2)
def available_tables(reader: LocalStore) -> tuple[str, ...]:
    """The standard index tables plus any other ``index/*.arrow`` the store holds (e.g. ``plan``).

    Listed from the store's own index directory once; a requested name is only compared with this
    list, never joined into a path.
    """
    index_dir = reader.path / INDEX_DIR
    extra = (
        sorted(p.stem for p in index_dir.glob("*.arrow") if not p.name.startswith("."))
        if index_dir.is_dir()
        else []
    )
    return tuple(dict.fromkeys([*TABLES, *extra]))


# maxsize 2, as available_tables: the reader served (one per index generation) and the previous one
@functools.lru_cache(maxsize=2)
def _featurizer_versions(reader: LocalStore) -> dict[str, Any]:
    doc = store_versions(reader)
    doc.pop("entry_source_dirs", None)  # the server's paths are not the client's business
    return doc


_versions_lock = threading.Lock()


def featurizer_versions(reader: LocalStore) -> dict[str, Any]:
    """The featurizer versions of the entries and MSAs of ``reader``'s index
    (:func:`featurecache.store.versions.store_versions` less ``entry_source_dirs``, the server's
    directories the entries were built from; one ``part.json`` per part), counted once
    per reader, i.e. once per index generation (a changed store is a new reader): what
    ``/v1/service?featurizer_versions=true`` sends, so a client's check costs a request nothing
    more than a cache lookup. Concurrent first requests wait for one count. Returns a copy."""
    with _versions_lock:
        return copy.deepcopy(_featurizer_versions(reader))


# maxsize 4: the document without and with the sizes, of the reader served and of the previous one
@functools.lru_cache(maxsize=4)
def _info(reader: LocalStore, counted: SizeCount | None) -> dict[str, Any]:
    return info_document(reader, counted.sizes if counted is not None else None)


def store_info(reader: LocalStore) -> dict[str, Any]:
    """What ``/v1/info`` answers for ``reader``, at once: the counts from the index, and the parts
    and bytes once the background count (:func:`services.lookup.sizes.size_count`, started when the
    store was opened) has them; until then ``parts`` and ``bytes`` are None and ``sizes_pending`` is
    True. Each document is computed once per reader (a changed store is a new reader), so clients
    polling ``/v1/info`` cost the count little. Returns a copy the caller may change."""
    count = size_count(reader)
    return copy.deepcopy(_info(reader, count if count.sizes is not None else None))


#: bytes of one record batch of a streamed index table
TABLE_CHUNK_BYTES = 4 << 20


class _Pieces:
    """A write-only file for ``ipc.new_stream`` that keeps what was written until taken."""

    closed = False

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.pos = 0

    def write(self, data: Any) -> int:
        piece = bytes(data)  # pyarrow may reuse its buffer after the call
        self.pieces.append(piece)
        self.pos += len(piece)
        return len(piece)

    def take(self) -> list[bytes]:
        out, self.pieces = self.pieces, []
        return out

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True


def table_stream(
    table: pa.Table, columns: Sequence[str] | None, chunk_bytes: int = TABLE_CHUNK_BYTES
) -> Iterator[bytes]:
    """The Arrow IPC stream of ``table`` (or its ``columns``) piece by piece, as the IPC writer
    writes it: the schema, record batches of about ``chunk_bytes``, the end-of-stream marker.

    The table is never held serialized whole (at most one record batch is): a 200k-entry store's
    entries table is 83 MB, and each request held it twice (the IPC buffer and a ``bytes`` copy)."""
    if columns:
        table = table.select(list(columns))
    rows = max(1, chunk_bytes * table.num_rows // max(1, table.nbytes))
    sink = _Pieces()
    writer = ipc.new_stream(sink, table.schema)
    try:
        yield from sink.take()
        for batch in table.to_batches(max_chunksize=rows):
            writer.write_batch(batch)
            yield from sink.take()
    finally:
        writer.close()
    yield from sink.take()


# ------------------------------------------------------------------------------------- MSAs
_MSA_KEY_COLUMNS = ("key", "msa_key", "sequence_hash", "hash")
_MSA_LENGTH_COLUMNS = ("length", "n_cols", "query_length")


@functools.lru_cache(maxsize=2)
def msa_shapes(reader: LocalStore) -> dict[str, tuple[int, int]]:
    """key → (depth, length) of every stored MSA, from the ``msas`` index (built once per reader)."""
    t = reader.msas
    shapes: dict[str, tuple[int, int]] = {}
    cols = set(t.column_names)
    key_col = next((c for c in _MSA_KEY_COLUMNS if c in cols), None)
    len_col = next((c for c in _MSA_LENGTH_COLUMNS if c in cols), None)
    if t.num_rows and key_col and len_col and "depth" in cols:
        keys = t.column(key_col).to_pylist()
        depth = t.column("depth").to_pylist()
        length = t.column(len_col).to_pylist()
        shapes = {str(k): (int(d), int(n)) for k, d, n in zip(keys, depth, length, strict=True)}
    return shapes


_MSA_PROFILE_WIDTH = NUM_RESTYPES  # profile is float32 [c, 32]


def msa_slice(
    reader: LocalStore,
    settings: Any,
    key: str,
    rows: slice | Sequence[int] | None,
    cols: slice | Sequence[int] | None,
) -> Any:
    """Check the selection against the MSA's shape and the limits (:func:`_msa_selection`), then
    read the block."""
    r, c, _ = _msa_selection(reader, settings, key, rows, cols)
    # a damaged shard: the reader's StoreError "MSA KEY: unreadable (…)" (PartArrays.read_many)
    return reader.msa(key, cast(Sequence[int], r), cast(Sequence[int], c))


def msa_bytes_length(
    reader: LocalStore,
    settings: Any,
    key: str,
    rows: slice | Sequence[int] | None,
    cols: slice | Sequence[int] | None,
) -> int:
    """``len(msa_bytes(msa_slice(...)))`` with the same checks and without reading the MSA (HEAD's
    content-length; review R28d s46: it read and encoded the whole slice for the middleware to drop
    it): the ``msas`` index gives the MSA's shape, the selection the block's, and Arrow IPC sizes
    its buffers by shape and dtype alone (:func:`entry_bytes_length`). Damage in the MSA's shards
    shows only when they are read."""
    r, c, (depth, length) = _msa_selection(reader, settings, key, rows, cols)
    dt = arrow_io.MSA_DTYPES
    block = MSABlock(
        key=key, depth=depth, length=length,
        residues=np.zeros((r.size, c.size), dt["residues"]), deletions=np.zeros((r.size, c.size), dt["deletions"]),
        species=np.zeros(r.size, dt["species"]), source=np.zeros(r.size, dt["source"]),
        profile=np.zeros((c.size, _MSA_PROFILE_WIDTH), dt["profile"]), deletion_mean=np.zeros(c.size, dt["deletion_mean"]),
    )  # fmt: skip
    return _stream_length(arrow_io.msa_record(block), dt)


def _msa_selection(
    reader: LocalStore,
    settings: Any,
    key: str,
    rows: slice | Sequence[int] | None,
    cols: slice | Sequence[int] | None,
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """The rows and columns (int64 indices) of the MSA ``key`` a selection asks for, and the MSA's
    (depth, length), checked against that shape and the limits, ``max_response_bytes`` against
    :func:`arrow_io.msa_answer_bytes` among them (repeated indices make 101 MB of a 42 kB request: review
    R28d s46 #2). NotFound for an unknown key, InvalidRequest or LimitExceeded for a selection."""
    from featurecache.errors import NotFound
    from services.lookup.params import check_limit, resolve_indices

    shape = msa_shapes(reader).get(key)
    if shape is None:
        raise NotFound(f"no MSA {key!r} in this store")
    depth, length = shape
    r = resolve_indices(rows, depth, f"MSA {key}: rows")
    c = resolve_indices(cols, length, f"MSA {key}: cols")
    check_limit("max_msa_rows", settings.max_msa_rows, r.size, f"MSA {key} rows")
    check_limit("max_msa_cols", settings.max_msa_cols, c.size, f"MSA {key} columns")
    check_limit(
        "max_msa_cells", settings.max_msa_cells, r.size * c.size, f"MSA {key} cells ({r.size}x{c.size})"
    )
    size = arrow_io.msa_answer_bytes(key, r.size, c.size)
    check_limit("max_response_bytes", settings.max_response_bytes, size,
                f"MSA {key} slice ({r.size}x{c.size}, {size} bytes)")  # fmt: skip
    return r, c, shape
