"""Single source of truth for the store's names, dtypes, chunk and shard shapes, and hashes.

STORE/
  zarr.json                      root group; attributes: format/schema/featurizer versions, config
  index/<table>.arrow            Arrow IPC, rebuilt from the parts' own index files
  parts/zarr.json                group
  parts/s-NNNNNN/                structure part: arrays ``atoms``, ``tokens``, ``bonds``,
                                 ``interfaces`` — flat tables over all entries of the part, stored
                                 as uint8 ``[rows, itemsize]`` records of the dtypes in types.py,
                                 whose ``descr`` each array's attribute ``record_dtype`` holds as
                                 text (``np.dtype(ast.literal_eval(...))``; docs/store.md "Reading a store
                                 without featurecache") (one shard per array, inner chunks of
                                 CHUNK_ROWS rows, zstd with a checksum: chunk_compressors; arrays
                                 whose zstd codec has no ``"checksum": true`` were written before
                                 it and read the same)
  parts/s-NNNNNN/_index/*.arrow  the part's own rows of entries/chains/interfaces/failures
  parts/m-NNNNNN/, c-NNNNNN/     MSA and component parts (see store/msa.py, store/components.py);
                                 their group attribute FILL_ONLY_SHARDS lists the shard files
                                 zarr did not write (every value the fill value): any other
                                 missing shard file is damage
  parts/.tmp-*                   parts being written (ignored by readers, removed on the next build);
                                 .tmp-pruned-*: parts a prune set aside to delete, .tmp-removing-*:
                                 ones being deleted (store/leftovers.py removes what a killed command left)
  .index-saved-*/                the index's files kept while a prune or verify --repair rewrites it
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.codecs import ZstdCodec

from featurecache.types import Atom, Bond, Interface, Token

INDEX_DIR = "index"
PARTS_DIR = "parts"
PART_INDEX_DIR = "_index"
PART_DONE_FILE = "part.json"  # written last inside the temp dir, before the rename
TMP_PREFIX = ".tmp-"
#: ``parts/.tmp-pruned-<part>-<hex>``: a part a prune has set aside to delete (outside every index)
PRUNED_PREFIX = f"{TMP_PREFIX}pruned-"
#: ``parts/.tmp-removing-<hex>``: a directory renamed out of the way to be deleted
REMOVING_PREFIX = f"{TMP_PREFIX}removing-"
#: ``STORE/.index-saved-<hex>/``: the index's files (hard links) while a prune or repair rewrites it
SAVED_INDEX_PREFIX = ".index-saved-"
#: Attribute of an MSA or component part's group: the shard files (paths relative to the part)
#: zarr left unwritten because they hold only the fill value (``write_empty_chunks`` is off). An
#: MSA strip or record array can legitimately be all zero, so without this list a deleted shard
#: file reads back as zeros; with it every other shard file must exist. Parts written before it
#: existed have no such attribute (their missing files cannot be told from empty shards).
FILL_ONLY_SHARDS = "fill_only_shards"

STRUCTURE_PART_PREFIX = "s-"
MSA_PART_PREFIX = "m-"
COMPONENT_PART_PREFIX = "c-"

#: Arrow index tables (STORE/index/<name>.arrow, and <part>/_index/<name>.arrow).
TABLES = ("entries", "chains", "interfaces", "failures", "msas", "components", "warnings")
#: the memory plan (STORE/index/plan.arrow), written by `featurecache plan`, not by a build: a build
#: keeps it, and a reader leaves an unreadable one out with a warning instead of refusing the store
PLAN_TABLE = "plan"
#: the name of every file a build, prune or `featurecache plan` writes in STORE/index/
#: (``<name>.arrow``): the tables a reader reads there. Any other ``index/*.arrow`` is not
#: featurecache's (a user's backup copy, an editor's file): readers leave it out and a build leaves
#: it in place, each with a warning (review R28c s46 #7, #8). A test checks that every table the
#: index rebuild derives and every file it writes is listed here, so a new table cannot be forgotten
#: (``tests/store/test_r29a_1_unknown_part_table.py``; a runtime refusal crashed builds over a part
#: table of a newer featurecache: review R29a s46 #1).
INDEX_FILES = frozenset(
    (*TABLES, "timings", "component_timings", "withdrawn", "removed", "msa_unmatched", "chem_warnings",
     "chem_scans", PLAN_TABLE)
)  # fmt: skip

#: group name -> structured dtype; each group is one flat zarr array of records.
#: Why records and not one array per field (DESIGN.md's first layout): an entry read touches 4
#: arrays instead of ~30, and each random slice cost ~1 ms of zarr overhead whatever its width
#: (benchmarks/store_layout.py measures both; read directly, ``store.shards``, a slice now costs
#: 0.15-0.25 ms: benchmarks/results/shard_reads.json).
ENTRY_GROUPS: dict[str, np.dtype] = {"atoms": Atom, "tokens": Token, "bonds": Bond, "interfaces": Interface}
#: group -> fields added to its records after stores were first written (-> the featurizer
#: version that added them): a part written before lacks them (``store.root.record_dtype``) and
#: its entries' content hashes leave them out (:func:`content_hash`)
LATER_FIELDS: dict[str, dict[str, str]] = {"tokens": {"centre_coords": "0.7.0"}}
#: group -> (start column, count column) in entries.arrow
GROUP_OFFSETS = {g: (f"{g[:-1]}_start", f"{g[:-1]}_count") for g in ENTRY_GROUPS}

CHUNK_ROWS = 4096  # inner chunk rows; DESIGN.md: 4k–16k rows
ZSTD_LEVEL = 3


def chunk_compressors() -> list[BytesBytesCodec]:
    """The bytes-to-bytes codecs of every inner chunk the writers create (structure, MSA and
    component parts): zstd with its content checksum (4 bytes a chunk, a hash of the decompressed
    bytes). The shard index has its own crc32c, but without a per-chunk checksum bit damage inside
    a chunk that still decompresses reads back as wrong values; with it the read fails (numcodecs:
    RuntimeError "Zstd decompression error: Restored data doesn't match checksum", or a corrupted
    block), which the reader turns into a StoreError naming the part, array and shard file, as it
    does for a truncated shard. Chosen over zarr's ``Crc32cCodec`` after zstd, which catches the
    same damage: within this machine's noise of it in benchmarks/chunk_checksums.py (real
    structure parts, CPU against no checksum over six runs: write 0.96-1.08x, read 0.90-1.21x;
    crc32c 0.99-1.25x, 1.03-1.28x; both 4 bytes a chunk) with one codec stage less per chunk and
    no codec entry in each array's metadata. Arrays written before carry no per-chunk
    checksum and still read (zarr takes the codecs from each array's own metadata)."""
    return [ZstdCodec(level=ZSTD_LEVEL, checksum=True)]


ENTRY_KEY_CHARS = 32


def part_name(prefix: str, number: int) -> str:
    return f"{prefix}{number:06d}"


def field_base_dtype(dtype: np.dtype, field: str) -> np.dtype:
    sub = dtype.fields[field][0]  # type: ignore[index]
    return sub.base


def array_names() -> list[str]:
    return [f"{g}/{f}" for g, dt in ENTRY_GROUPS.items() for f in dt.names]  # type: ignore[union-attr]


def content_hash(groups: Mapping[str, Mapping[str, np.ndarray]]) -> str:
    """sha256 over every array of an entry, in layout order (group, field), with dtype and shape.

    Computed from columns, so the build (structured arrays split into fields) and ``verify`` (columns
    read back from zarr) hash the same bytes.
    """
    h = hashlib.sha256()
    for g in ENTRY_GROUPS:
        _hash_group(h, g, groups[g])
    return h.hexdigest()


def group_hashes(groups: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, str]:
    """group -> sha256 over that group's arrays alone, each hashed as :func:`content_hash` hashes
    it: when an entry's content hash differs, these say which groups changed (``verify``)."""
    out = {}
    for g in ENTRY_GROUPS:
        h = hashlib.sha256()
        _hash_group(h, g, groups[g])
        out[g] = h.hexdigest()
    return out


def _hash_group(h: hashlib._Hash, g: str, cols: Mapping[str, np.ndarray]) -> None:
    dt = ENTRY_GROUPS[g]
    later = LATER_FIELDS.get(g, ())
    # an entry of a part written before a later field was added lacks it
    hash_fields(h, g, dt, cols, [f for f in dt.names if f in cols or f not in later])  # type: ignore[union-attr]


def hash_fields(
    h: hashlib._Hash,
    group: str,
    dtype: np.dtype,
    cols: Mapping[str, np.ndarray],
    names: Sequence[str] | None = None,
) -> None:
    """Feed ``h`` the columns ``cols`` of record type ``dtype`` (its fields ``names``, default all,
    in order), each as ``group/field:dtype:shape`` and its bytes in the field's base dtype: the rule
    of every content hash of a store (entries here, components' reference conformers too)."""
    for f in dtype.names if names is None else names:  # type: ignore[union-attr]
        a = np.ascontiguousarray(cols[f], dtype=field_base_dtype(dtype, f))
        h.update(f"{group}/{f}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())


def columns(arr: np.ndarray) -> dict[str, np.ndarray]:
    """Structured array → field name → contiguous column."""
    return {f: np.ascontiguousarray(arr[f]) for f in arr.dtype.names}  # type: ignore[union-attr]
