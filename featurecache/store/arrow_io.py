"""The lookup service's wire format: numpy arrays in an Arrow IPC stream, decoded without copies.

One format for everything the service returns as arrays (entries, batches of entries, MSA blocks):
an Arrow IPC *stream* (``application/vnd.apache.arrow.stream``) with one row per record:

* ``attrs``  string — JSON of the record's scalar attributes (entry id, index row, chains, ...);
* ``shapes`` string — JSON ``{array name: shape}`` of this row's arrays;
* one column per array, named like ``atoms/coords``, of type ``large_list<primitive>`` holding the
  array flattened in C order. The numpy dtype is in the field metadata (``numpy_dtype``); numpy
  ``bool`` travels as ``uint8`` (Arrow booleans are bit-packed and could not be viewed in place).

Every row of a stream has the same array names and dtypes (the schema); shapes vary per row. The
server writes one record batch per record, so a batch response streams. Decoding takes the flat
child values of each list column and views them as numpy (``zero_copy_only=True``): the arrays
point into the received buffer and are **read-only**; copy one before writing into it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from featurecache.const import NUM_RESTYPES
from featurecache.types import Entry, MSABlock

MEDIA_TYPE = "application/vnd.apache.arrow.stream"
DTYPE_KEY = b"numpy_dtype"
ATTRS = "attrs"
SHAPES = "shapes"

ENTRY_GROUP_NAMES = ("atoms", "tokens", "bonds", "interfaces")
#: MSA block arrays and their dtypes (types.MSABlock): residues uint8 [r, c], deletions int16 [r, c],
#: species int32 [r], source uint8 [r], profile float32 [c, 32], deletion_mean float32 [c]
MSA_DTYPES: dict[str, np.dtype] = {
    "residues": np.dtype(np.uint8), "deletions": np.dtype(np.int16), "species": np.dtype(np.int32),
    "source": np.dtype(np.uint8), "profile": np.dtype(np.float32), "deletion_mean": np.dtype(np.float32),
}  # fmt: skip
MSA_ARRAYS = tuple(MSA_DTYPES)
#: bytes of an MSA answer besides its arrays: the schema message, the record batch's metadata, the
#: attrs and shapes JSON and the buffers' padding (2.2 kB measured for a 20-character key; the key's
#: JSON, up to 6 bytes a character, is counted apart)
MSA_ANSWER_FIXED_BYTES = 4096
#: an MSA answer's bytes per cell (residues, deletions), per row (species, source) and per column
#: (profile × the residue classes, deletion_mean), as :data:`MSA_DTYPES` encode them
MSA_CELL_BYTES = sum(MSA_DTYPES[n].itemsize for n in ("residues", "deletions"))
MSA_ROW_BYTES = sum(MSA_DTYPES[n].itemsize for n in ("species", "source"))
MSA_COLUMN_BYTES = MSA_DTYPES["profile"].itemsize * NUM_RESTYPES + MSA_DTYPES["deletion_mean"].itemsize


def msa_answer_bytes(key: str, n_rows: int, n_cols: int) -> int:
    """An upper bound of the bytes of the Arrow answer (:func:`encode` of :func:`msa_record`) of ``n_rows`` ×
    ``n_cols`` of the MSA ``key``, known before anything is read: what the lookup service checks
    against ``max_response_bytes`` and ``LookupClient.msa`` tiles a selection by."""
    return (n_rows * n_cols * MSA_CELL_BYTES + n_rows * MSA_ROW_BYTES + n_cols * MSA_COLUMN_BYTES
            + MSA_ANSWER_FIXED_BYTES + 6 * len(key))  # fmt: skip


@dataclass(frozen=True)
class Record:
    """One row of the wire format: JSON-able ``attrs`` and named numpy ``arrays``."""

    attrs: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


# ------------------------------------------------------------------------------------ encoding
def _wire_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.uint8) if dtype == np.bool_ else dtype


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> str:
    """JSON with NaN/inf kept (the index has NaN resolutions) and numpy scalars unwrapped."""
    return json.dumps(value, default=_json_default, allow_nan=True, separators=(",", ":"))


def schema_for(arrays: Mapping[str, np.dtype]) -> pa.Schema:
    """The stream schema for records carrying ``arrays`` (name → numpy dtype)."""
    fields = [pa.field(ATTRS, pa.string()), pa.field(SHAPES, pa.string())]
    for name, dtype in arrays.items():
        dt = np.dtype(dtype)
        fields.append(
            pa.field(
                name,
                pa.large_list(pa.from_numpy_dtype(_wire_dtype(dt))),
                metadata={DTYPE_KEY: dt.str.encode()},
            )
        )
    return pa.schema(fields)


def record_batch(record: Record, schema: pa.Schema) -> pa.RecordBatch:
    """One record as a one-row batch of ``schema`` (array values are not copied)."""
    names = [f.name for f in schema][2:]
    if sorted(names) != sorted(record.arrays):
        raise TypeError(f"record arrays {sorted(record.arrays)} do not match the stream's {sorted(names)}")
    columns: list[pa.Array] = [
        pa.array([dumps(record.attrs)], pa.string()),
        pa.array([dumps({n: list(record.arrays[n].shape) for n in names})], pa.string()),
    ]
    for name in names:
        arr = np.ascontiguousarray(record.arrays[name])
        want = np.dtype(schema.field(name).metadata[DTYPE_KEY].decode())
        if arr.dtype != want:
            raise TypeError(f"array {name!r} has dtype {arr.dtype}, the stream carries {want}")
        flat = arr.reshape(-1)
        if flat.dtype == np.bool_:
            flat = flat.view(np.uint8)
        values = pa.array(flat)  # zero-copy for contiguous primitive arrays
        offsets = pa.array([0, flat.size], pa.int64())
        columns.append(pa.LargeListArray.from_arrays(offsets, values))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # IPC end-of-stream marker (continuation, length 0)


def encode_stream(records: Iterable[Record], arrays: Mapping[str, np.dtype]) -> Iterator[bytes]:
    """Yield an IPC stream piece by piece: the schema message, one message per record, then EOS.

    (A stream is exactly these encapsulated messages back to back; no dictionaries are used.)
    """
    schema = schema_for(arrays)
    yield schema.serialize().to_pybytes()
    for rec in records:
        yield record_batch(rec, schema).serialize().to_pybytes()
    yield _EOS


def encode(records: Iterable[Record], arrays: Mapping[str, np.dtype]) -> bytes:
    return b"".join(encode_stream(records, arrays))


# ------------------------------------------------------------------------------------ decoding
def decode(data: bytes | bytearray | memoryview | pa.Buffer) -> list[Record]:
    """Records of a stream; arrays are read-only views into ``data`` (kept alive by them)."""
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    reader = ipc.open_stream(buf)
    schema = reader.schema
    names = [f.name for f in schema][2:]
    dtypes = {n: np.dtype(schema.field(n).metadata[DTYPE_KEY].decode()) for n in names}
    out: list[Record] = []
    for batch in reader:
        attrs_col = batch.column(0).to_pylist()
        shapes_col = batch.column(1).to_pylist()
        for i in range(batch.num_rows):
            shapes = json.loads(shapes_col[i])
            arrays: dict[str, np.ndarray] = {}
            for j, name in enumerate(names, start=2):
                lst = batch.column(j)
                start, stop = lst.offsets[i].as_py(), lst.offsets[i + 1].as_py()
                values = lst.values.slice(start, stop - start)
                if len(values):
                    flat = values.to_numpy(zero_copy_only=True)
                else:  # pyarrow hands out no buffer for an empty slice
                    flat = np.zeros(0, _wire_dtype(dtypes[name]))
                    flat.flags.writeable = False
                if dtypes[name] == np.bool_:
                    flat = flat.view(np.bool_)
                arrays[name] = flat.reshape(shapes[name])
            out.append(Record(json.loads(attrs_col[i]), arrays))
    return out


def read_table(data: bytes | pa.Buffer) -> pa.Table:
    """A plain Arrow IPC stream (the service's ``/v1/tables/...``) as a table, without copies."""
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    return ipc.open_stream(buf).read_all()


def table_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


# ---------------------------------------------------------------------------- entries, MSAs
def entry_record(entry: Entry) -> Record:
    arrays = {f"{g}/{f}": a for g in ENTRY_GROUP_NAMES for f, a in getattr(entry, g).items()}
    return Record({"id": entry.id, "meta": entry.meta, "chains": entry.chains}, arrays)


def entry_dtypes(entry: Entry) -> dict[str, np.dtype]:
    return {name: a.dtype for name, a in entry_record(entry).arrays.items()}


def record_entry(rec: Record) -> Entry:
    groups: dict[str, dict[str, np.ndarray]] = {g: {} for g in ENTRY_GROUP_NAMES}
    for name, arr in rec.arrays.items():
        g, _, f = name.partition("/")
        groups[g][f] = arr
    return Entry(
        id=rec.attrs["id"], atoms=groups["atoms"], tokens=groups["tokens"], bonds=groups["bonds"],
        interfaces=groups["interfaces"], meta=rec.attrs["meta"], chains=rec.attrs["chains"],
    )  # fmt: skip


def msa_record(block: MSABlock) -> Record:
    arrays = {name: np.asarray(getattr(block, name), dtype=dt) for name, dt in MSA_DTYPES.items()}
    return Record({"key": block.key, "depth": int(block.depth), "length": int(block.length)}, arrays)


def record_msa(rec: Record) -> MSABlock:
    return MSABlock(
        key=rec.attrs["key"], depth=int(rec.attrs["depth"]), length=int(rec.attrs["length"]),
        **{name: rec.arrays[name] for name in MSA_ARRAYS},
    )  # fmt: skip
