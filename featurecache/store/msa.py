"""MSA parts: writing one part (one task), reading a rows × columns block of one MSA.

Layout of ``parts/m-NNNNNN/`` (a zarr v3 group; one writer, renamed into place like every part)::

  residues/<k>      uint8 [depth, L] of the part's k-th MSA: column strips of MSA_CHUNK in one
                    shard, zstd — a crop reads only the strips holding its columns
  rows              records [Σ depth] of MSA_ROW: species int32, source uint8, del_start int64
  cols              records [Σ L] of MSA_COL: profile float32[32], deletion_mean float32
  deletions         records [nnz] of MSA_DELETION: col int32, count int16 — the non-zero deletion
                    counts in row-major order (CSR: row i of MSA k owns cells
                    ``[rows.del_start[i], rows.del_start[i+1])``); most cells have no deletion
  _index/msas.arrow one row per MSA (MSAS_SCHEMA): key, part, array, row/col/deletion offsets,
                    depth, length, sources, the featurizer version and MSA stage that built it
  _index/failures.arrow  MSA files that could not be read (stage ``msa``)
  _verify/msa_hashes.arrow  one row per MSA (MSA_HASHES_SCHEMA): the sha256 of each of its arrays,
                    read only by ``verify`` when an MSA's content hash differs (parts written
                    by an older featurecache have no ``_verify/``: verify still finds a damaged MSA
                    by its content hash, but cannot say which of its arrays changed)

``index/msas.arrow`` is the concatenation of every part's rows (latest part wins per key, so a
rebuilt MSA supersedes the old one). ``join_msa_columns`` adds ``msa_key``/``msa_depth`` to the
chains table and ``msa_coverage`` to the entries table when the index is rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zarr

from featurecache.const import FEATURIZER_VERSION, NUM_RESTYPES, SCHEMA_VERSION, MolType
from featurecache.errors import InvalidRequest, NotFound, StoreError
from featurecache.store.index import differing_hashes, dir_bytes, table_from_rows, write_table
from featurecache.store.layout import PART_INDEX_DIR, PARTS_DIR, chunk_compressors
from featurecache.store.root import PartArrays, array_metadata, decode_records, record_fill_only_shards
from featurecache.store.writer import (
    SOURCE_DIR,
    commit_part,
    part_tmp_dir,
    write_record_array,
    write_removed,
)
from featurecache.types import EncodedMSA, MSABlock

log = logging.getLogger(__name__)

#: Inner chunk of the per-MSA residue arrays (rows, columns): full-height column strips. The
#: client samples rows across the whole depth, so row chunks save no reads; narrow column strips
#: let a crop read only its columns, and tall chunks compress ~2x better than 1024 x 128 tiles
#: (rows of one column are homologous). benchmarks/msa.py and its chunk sweep measure this.
MSA_CHUNK = (16384, 64)
#: Records per inner chunk of the flat rows / cols / deletions arrays.
MSA_RECORD_CHUNK = 4096

MSA_ROW = np.dtype([("species", np.int32), ("source", np.uint8), ("del_start", np.int64)])
MSA_COL = np.dtype([("profile", np.float32, (NUM_RESTYPES,)), ("deletion_mean", np.float32)])
MSA_DELETION = np.dtype([("col", np.int32), ("count", np.int16)])

MSAS_SCHEMA = pa.schema(
    [
        ("key", pa.string()),  # sequence hash (featurize.seqhash.sequence_hash) = chains.sequence_hash
        ("mol_type", pa.int8()),
        ("length", pa.int32()),  # columns = query residues
        ("depth", pa.int32()),  # stored rows (query = row 0), after dedup and the depth cap
        ("n_distinct", pa.int32()),  # distinct rows before the cap (profile: those of the main MSA)
        ("n_input_rows", pa.int64()),  # rows read from the files
        ("n_files", pa.int32()),  # alignments merged; 0 = single sequence
        ("sources", pa.list_(pa.string())),  # source i (1..) of ``rows.source``; 0 is the query
        ("source_dbs", pa.list_(pa.string())),  # database label of each source (featurize.msa)
        ("array", pa.string()),  # residues array inside the part
        ("row_start", pa.int64()),
        ("col_start", pa.int64()),
        ("del_start", pa.int64()),
        ("del_count", pa.int64()),
        ("inputs_key", pa.string()),  # hash of the inputs + settings: a re-run skips equal keys
        ("content_hash", pa.string()),  # msa_content_hash of the stored arrays (verify recomputes it)
        ("featurizer_version", pa.string()),
        ("part", pa.string()),
        # build.msa_stage.MSA_STAGE_VERSION of the build that wrote the MSA (store.versions.msa_stages);
        # last, so that parts written before it (null here after the index rebuild's permissive
        # concatenation: "3 or older": stage 3 is the first that records itself) keep the same column order
        ("msa_stage", pa.string()),
    ]
)


#: the arrays of one MSA, in the order :func:`msa_content_hash` hashes them, with their dtypes
MSA_ARRAYS: dict[str, np.dtype] = {
    "residues": np.dtype(np.uint8), "deletions": np.dtype(np.int16), "species": np.dtype(np.int32),
    "source": np.dtype(np.uint8), "profile": np.dtype(np.float32), "deletion_mean": np.dtype(np.float32),
}  # fmt: skip

#: ``<MSA part>/_verify/msa_hashes.arrow``: each MSA's per-array hashes (:func:`msa_hashes`: one
#: sha256 column per array of :data:`MSA_ARRAYS`), read only by ``verify`` when an MSA's content hash differs, to
#: say which arrays changed (as ``writer.GROUP_HASHES`` for entries). Outside ``_index/``, whose
#: every table the index rebuild reads. Parts written by an older featurecache have none.
MSA_HASHES = "_verify/msa_hashes.arrow"
MSA_HASHES_SCHEMA = pa.schema(
    [("key", pa.string()), *((a, pa.string()) for a in MSA_ARRAYS), ("part", pa.string())]
)


@dataclass
class MSAItem:
    """One MSA to write: the encoded arrays plus what the index row records."""

    key: str
    msa: EncodedMSA
    inputs_key: str
    source_dbs: tuple[str, ...] = ()


@dataclass
class MSAPartContents:
    items: list[MSAItem] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)  # FAILURES_SCHEMA rows without "part"
    #: the resolved ``--msa-dir`` its failures' paths are relative to (manifest ``source_dir``, as
    #: a structure part records its ``--pdb-dir``; "": not recorded, as in parts written before MSA
    #: parts recorded it, during session 19, or by a build without ``--msa-dir``): a later build from
    #: that directory withdraws the listed failure of a file no longer in it
    #: (``discover.withdraw_failures``)
    source_dir: str = ""
    #: :data:`~featurecache.store.index.REMOVED` rows (kind "msa", without "part") of ``featurecache
    #: prune --sources-gone``
    removed: list[dict[str, Any]] = field(default_factory=list)
    #: the ``MSA_STAGE_VERSION`` of the build stage that merged ``items`` (``build.msa_stage``; the
    #: store does not import the build), recorded in each MSA's index row (``msa_stage``) and in the
    #: manifest; "": not said (a part of failures or removals only, a benchmark), null in the rows
    msa_stage: str = ""
    #: the MSA stage's :data:`~featurecache.store.warnings.MSA_UNMATCHED` row (without "part"),
    #: when what it found unmatched in ``--msa-dir`` changed (written as ``_index/msa_unmatched.arrow``)
    unmatched: dict[str, Any] | None = None


def residues_array_name(k: int) -> str:
    return f"residues/{k:06d}"


def _write_residues(group: zarr.Group, name: str, residues: np.ndarray) -> zarr.Array:
    depth, length = residues.shape
    chunks = (max(1, min(MSA_CHUNK[0], depth)), max(1, min(MSA_CHUNK[1], length)))
    shards = (-(-depth // chunks[0]) * chunks[0], -(-length // chunks[1]) * chunks[1])
    arr = group.create_array(
        name, shape=(depth, length), dtype=np.uint8, chunks=chunks, shards=shards,
        compressors=chunk_compressors(), fill_value=0, dimension_names=("msa_row", "column"),
    )  # fmt: skip
    arr[...] = residues
    return arr


def write_msa_part(root: Path, name: str, contents: MSAPartContents) -> dict[str, Any]:
    """Write one MSA part (temp dir → rename); returns its manifest."""
    root = Path(root)
    with part_tmp_dir(root, name) as tmp:
        group = zarr.open_group(
            str(tmp), mode="w", attributes={"kind": "msas", "part": name, "schema_version": SCHEMA_VERSION}
        )
        written: list[tuple[str, zarr.Array]] = []
        rows_parts: list[np.ndarray] = []
        cols_parts: list[np.ndarray] = []
        del_parts: list[np.ndarray] = []
        index_rows: list[dict[str, Any]] = []
        hash_rows: list[dict[str, Any]] = []
        row_off = col_off = del_off = 0
        for k, item in enumerate(contents.items):
            m = item.msa
            array = residues_array_name(k)
            written.append((array, _write_residues(group, array, m.residues)))
            r, c = np.nonzero(m.deletions)  # row-major: CSR order
            cells = np.zeros(r.size, dtype=MSA_DELETION)
            cells["col"] = c
            cells["count"] = m.deletions[r, c]
            per_row = np.bincount(r, minlength=m.depth)
            rows = np.zeros(m.depth, dtype=MSA_ROW)
            rows["species"] = m.species
            rows["source"] = m.source
            rows["del_start"] = del_off + np.concatenate([[0], np.cumsum(per_row)[:-1]])
            cols = np.zeros(m.length, dtype=MSA_COL)
            cols["profile"] = m.profile
            cols["deletion_mean"] = m.deletion_mean
            rows_parts.append(rows)
            cols_parts.append(cols)
            del_parts.append(cells)
            arrays = (m.residues, m.deletions, m.species, m.source, m.profile, m.deletion_mean)
            content_hash, array_hashes = msa_hashes(*arrays)
            hash_rows.append({"key": item.key, **array_hashes, "part": name})
            index_rows.append(
                {
                    "key": item.key,
                    "mol_type": m.mol_type,
                    "length": m.length,
                    "depth": m.depth,
                    "n_distinct": m.n_distinct,
                    "n_input_rows": m.n_input_rows,
                    "n_files": len(m.sources) - 1,
                    "sources": list(m.sources[1:]),
                    "source_dbs": list(item.source_dbs),
                    "array": array,
                    "row_start": row_off,
                    "col_start": col_off,
                    "del_start": del_off,
                    "del_count": int(r.size),
                    "inputs_key": item.inputs_key,
                    "content_hash": content_hash,
                    "featurizer_version": FEATURIZER_VERSION,
                    "part": name,
                    "msa_stage": contents.msa_stage or None,
                }
            )
            row_off += m.depth
            col_off += m.length
            del_off += int(r.size)
        for array, parts, dtype in (
            ("rows", rows_parts, MSA_ROW), ("cols", cols_parts, MSA_COL), ("deletions", del_parts, MSA_DELETION),
        ):  # fmt: skip
            written.append((array, write_record_array(group, array, _concat(parts, dtype))))
        # a strip of one residue code 0 or an all-zero record array is a shard zarr leaves
        # unwritten: listed, so that a missing file of any other shard is an error when read
        record_fill_only_shards(group, tmp, written)
        idx = tmp / PART_INDEX_DIR
        write_table(idx / "msas.arrow", pa.Table.from_pylist(index_rows, schema=MSAS_SCHEMA))
        write_table(tmp / MSA_HASHES, pa.Table.from_pylist(hash_rows, schema=MSA_HASHES_SCHEMA))
        fails = [{**f, "part": name} for f in contents.failures]
        write_table(idx / "failures.arrow", table_from_rows("failures", fails))
        write_removed(idx, name, contents.removed)
        if contents.unmatched is not None:
            from featurecache.store.warnings import MSA_UNMATCHED, MSA_UNMATCHED_SCHEMA

            unmatched = pa.Table.from_pylist(
                [{**contents.unmatched, "part": name}], schema=MSA_UNMATCHED_SCHEMA
            )
            write_table(idx / f"{MSA_UNMATCHED}.arrow", unmatched)
        manifest = {
            "part": name, "kind": "msas", "featurizer_version": FEATURIZER_VERSION,
            "schema_version": SCHEMA_VERSION, "n_msas": len(index_rows), "n_failures": len(fails),
            "keys": sorted(r["inputs_key"] for r in index_rows), "rows": row_off, "cols": col_off,
            "deletion_cells": del_off, "bytes": dir_bytes(tmp),
        }  # fmt: skip
        if contents.source_dir:
            manifest[SOURCE_DIR] = contents.source_dir
        if contents.msa_stage:
            manifest["msa_stage"] = contents.msa_stage
        commit_part(tmp, root / PARTS_DIR / name, manifest)
        return manifest


def msa_content_hash(
    residues: np.ndarray,
    deletions: np.ndarray,
    species: np.ndarray,
    source: np.ndarray,
    profile: np.ndarray,
    deletion_mean: np.ndarray,
) -> str:
    """sha256 over one MSA's arrays (dtype, shape and bytes), as built and as read back."""
    return msa_hashes(residues, deletions, species, source, profile, deletion_mean, per_array=False)[0]


def msa_hashes(
    residues: np.ndarray,
    deletions: np.ndarray,
    species: np.ndarray,
    source: np.ndarray,
    profile: np.ndarray,
    deletion_mean: np.ndarray,
    per_array: bool = True,
) -> tuple[str, dict[str, str]]:
    """(:func:`msa_content_hash`, array name -> sha256 over that array alone, hashed the same way),
    each array read once: when an MSA's content hash differs, the per-array hashes its part
    recorded say which arrays changed (``verify``). ``per_array=False``: the content hash only."""
    whole, each = hashlib.sha256(), {}
    arrays = (residues, deletions, species, source, profile, deletion_mean)
    for name, a in zip(MSA_ARRAYS, arrays, strict=True):
        arr = np.ascontiguousarray(a, dtype=MSA_ARRAYS[name])
        head, data = f"{name}:{arr.dtype.str}:{arr.shape}".encode(), arr.tobytes()
        whole.update(head)
        whole.update(data)
        if per_array:
            one = hashlib.sha256(head)
            one.update(data)
            each[name] = one.hexdigest()
    return whole.hexdigest(), each


def verify_msas(
    store: Any,
    map_rows: Callable[[Callable[[dict[str, Any]], list[str]], list[dict[str, Any]]], Iterable[list[str]]]
    | None = None,
) -> list[str]:
    """``featurecache verify`` check: every MSA reads back to its content hash; chain keys resolve.

    ``map_rows(check, rows)``: how the per-MSA check runs over the index rows, results in row
    order (default: one after the other; verify passes a thread pool and a progress bar)."""
    problems: list[str] = []
    msas = store.msas
    if msas.num_rows and "key" in msas.column_names:

        def check(row: dict[str, Any]) -> list[str]:
            return _check_msa(store, row)

        from featurecache.store.verify import UNCHECKED

        rows = msas.select(["key", "content_hash", "depth", "length", "part", "array"]).to_pylist()
        for found in (map_rows or map)(check, rows):
            problems.extend(p.removeprefix(UNCHECKED) for p in found)
    # also when the msas index is empty: chains that name an MSA it does not list read single-sequence
    keys = set(msas.column("key").to_pylist()) if "key" in msas.column_names else set()
    chains = store.chains
    if chains.num_rows and "msa_key" in chains.column_names:
        for eid, k in zip(
            chains.column("entry_id").to_pylist(), chains.column("msa_key").to_pylist(), strict=True
        ):
            if k and k not in keys:
                problems.append(f"entry {eid}: chain MSA key {k} is not in the msas index")
    return problems


def _check_msa(store: Any, row: dict[str, Any]) -> list[str]:
    """One MSA's problems: it does not read, its shape or its content hash differs from the index
    (each line names the MSA's part; a content-hash line also the arrays that changed). A read that
    fails by an error that does not say the data is unreadable (``verify.unreadable_data``: a bug in
    the reader): one ``verify.unchecked_line`` after ``verify.UNCHECKED``, which is no damage
    (``--repair`` keeps the MSA; review R31d s47 #1)."""
    from featurecache.store.verify import CHECK_ERRORS, UNCHECKED, unchecked_line, unreadable_data

    try:
        b = store.msa(row["key"])
    except CHECK_ERRORS as exc:
        if not unreadable_data(exc):
            return [UNCHECKED + unchecked_line(f"MSA {row['key']}", exc)]
        msg = str(exc)
        # the reader says "MSA KEY: unreadable (…)" itself, naming the part and the array
        return [msg if msg.startswith(f"MSA {row['key']}: ") else f"MSA {row['key']}: unreadable ({msg})"]
    problems = []
    part = Path(store.path) / PARTS_DIR / row["part"]
    # the stored array's own shape (a read of depth x length cannot see an array larger than that)
    with contextlib.suppress(StoreError):  # unreadable metadata: the read below has failed already
        shape = tuple(array_metadata(part / row["array"]).shape)
        if shape != (row["depth"], row["length"]):
            problems.append(
                f"MSA {row['key']}: shape {shape}, index says {row['depth']} x {row['length']} "
                f"(part {row['part']}: array {row['array']})"
            )
    arrays = (b.residues, b.deletions, b.species, b.source, b.profile, b.deletion_mean)
    got = msa_content_hash(*arrays)
    if got != row["content_hash"]:
        problems.append(
            f"MSA {row['key']}: content hash {got[:16]}… != index {str(row['content_hash'])[:16]}… "
            f"(part {row['part']}: {_differing_arrays(part, row, msa_hashes(*arrays)[1])})"
        )
    return problems


def _differing_arrays(part: Path, row: dict[str, Any], now: dict[str, str]) -> str:
    """Which of the MSA's arrays hash differently from what its part recorded when it was written
    (:data:`MSA_HASHES`), as words for the mismatch line, each named by the part array holding it:
    ``residues/NNNNNN``; ``rows.species``, ``rows.source``; ``cols.profile``,
    ``cols.deletion_mean``; ``deletions`` (its cells, or the rows' ``del_start`` that place them).
    Read only on a mismatch."""
    where = {
        "residues": str(row["array"]), "deletions": "deletions", "species": "rows.species",
        "source": "rows.source", "profile": "cols.profile", "deletion_mean": "cols.deletion_mean",
    }  # fmt: skip
    return differing_hashes(part / MSA_HASHES, "key", row["key"], now, {a: where[a] for a in MSA_ARRAYS},
                            "array", "MSA")  # fmt: skip


def _concat(parts: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


#: the columns of an MSA's index row that say where its arrays lie in its part (:func:`msa_reads`)
MSA_READ_COLUMNS = ("array", "row_start", "depth", "col_start", "length", "del_start", "del_count")


def msa_reads(row: dict[str, Any]) -> dict[str, tuple[slice, ...]]:
    """What a read of the whole MSA of index row ``row`` (:data:`MSA_READ_COLUMNS`) reads of its
    part: array name -> the rows of it (one slice), as :class:`MSAReader` reads them: its own
    ``residues/NNNNNN`` whole, its ranges of the part's shared ``rows``, ``cols`` and ``deletions``."""
    return {
        str(row["array"]): (slice(None),),
        "rows": (slice(int(row["row_start"]), int(row["row_start"]) + int(row["depth"])),),
        "cols": (slice(int(row["col_start"]), int(row["col_start"]) + int(row["length"])),),
        "deletions": (slice(int(row["del_start"]), int(row["del_start"]) + int(row["del_count"])),),
    }


# --- index joins ----------------------------------------------------------------------------------


def latest_msas(msas: pa.Table) -> pa.Table:
    """One row per key: the one from the latest part (a rebuilt MSA supersedes the old one)."""
    if msas.num_rows == 0 or "key" not in msas.column_names:
        return msas
    order = pc.sort_indices(msas, sort_keys=[("key", "ascending"), ("part", "descending")])
    t = msas.take(order)
    keys = t.column("key")
    first = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))  # row i+1 starts a new key
    return t.filter(
        pa.concat_arrays(
            [
                pa.array([True]),
                pa.concat_arrays(first.chunks) if first.num_chunks else pa.array([], pa.bool_()),
            ]
        )
    )


def _drop_resolved_msa_failures(failures: pa.Table | None, msas: pa.Table) -> pa.Table | None:
    """An MSA file's failure row goes once a later MSA part used that file (it was fixed)."""
    if (
        failures is None
        or failures.num_rows == 0
        or msas.num_rows == 0
        or "stage" not in failures.column_names
    ):
        return failures
    used: dict[str, str] = {}
    for part, sources in zip(
        msas.column("part").to_pylist(), msas.column("sources").to_pylist(), strict=True
    ):
        for src in sources:
            path = src.split("#", 1)[0]
            used[path] = max(used.get(path, ""), part)
    keep = [
        not (stage == "msa" and used.get(path, "") > part)
        for stage, path, part in zip(
            failures.column("stage").to_pylist(),
            failures.column("path").to_pylist(),
            failures.column("part").to_pylist(),
            strict=True,
        )
    ]
    return failures.filter(pa.array(keep, type=pa.bool_()))


def join_msa_columns(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Index-rebuild hook: dedupe ``msas``, keep only those a live chain uses; add MSA columns to
    ``chains`` and ``entries``.

    msas: the latest row per key, of the keys some live polymer chain has as its sequence hash
    (an MSA whose sequence no entry has any more, after its input was replaced, is not listed).
    chains: ``msa_key`` (the sequence hash when an MSA is stored for it, else ``""``),
    ``msa_depth`` (0 when none) and ``msa_files`` (alignments merged; 0 = single sequence).
    entries: ``n_msa_chains`` (polymer chains whose MSA came from at least one file) and
    ``msa_coverage`` (that over polymer chains; NaN for entries without polymer chains).
    """
    msas = tables.get("msas")
    if msas is None or msas.num_rows == 0 or "key" not in msas.column_names:
        msas = MSAS_SCHEMA.empty_table()
    msas = latest_msas(msas)
    failures = _drop_resolved_msa_failures(tables.get("failures"), msas)
    if failures is not None:
        tables["failures"] = failures
    chains = tables.get("chains")
    if chains is None or chains.num_rows == 0 or "sequence_hash" not in chains.column_names:
        # no live chain (every entry gone or failed): no MSA is used; chains without sequence
        # hashes (an index of an old schema): nothing can be said, every MSA is kept
        tables["msas"] = msas if chains is not None and chains.num_rows else msas.slice(0, 0)
        return tables
    polymer = pc.not_equal(chains.column("mol_type"), pa.scalar(int(MolType.LIGAND), pa.int8()))
    used = pc.unique(chains.column("sequence_hash").filter(pc.fill_null(polymer, False)))
    msas = msas.filter(pc.fill_null(pc.is_in(msas.column("key"), value_set=used), False))
    tables["msas"] = msas
    for col in ("msa_key", "msa_depth", "msa_files"):
        if col in chains.column_names:
            chains = chains.drop_columns([col])
    hashes = chains.column("sequence_hash")
    idx = pc.index_in(hashes, value_set=msas.column("key"))
    has = pc.fill_null(pc.and_(polymer, pc.is_valid(idx)), False)
    depth = pc.fill_null(pc.take(msas.column("depth"), idx), 0)
    files = pc.fill_null(pc.take(msas.column("n_files"), idx), 0)
    chains = chains.append_column("msa_key", pc.if_else(has, hashes, pa.scalar("", pa.string())))
    chains = chains.append_column("msa_depth", pc.if_else(has, depth, 0).cast(pa.int32()))
    chains = chains.append_column("msa_files", pc.if_else(has, files, 0).cast(pa.int32()))
    tables["chains"] = chains
    entries = tables.get("entries")
    if entries is None or entries.num_rows == 0:
        return tables
    for col in ("n_msa_chains", "msa_coverage"):
        if col in entries.column_names:
            entries = entries.drop_columns([col])
    covered = pc.and_(has, pc.greater(chains.column("msa_files"), 0))
    per_entry = (
        pa.table(
            {
                "entry_id": chains.column("entry_id"),
                "polymer": polymer.cast(pa.int64()),
                "covered": covered.cast(pa.int64()),
            }
        )
        .group_by("entry_id")
        .aggregate([("polymer", "sum"), ("covered", "sum")])
    )
    at = pc.index_in(entries.column("id"), value_set=per_entry.column("entry_id"))
    n_polymer = pc.fill_null(pc.take(per_entry.column("polymer_sum"), at), 0)
    n_covered = pc.fill_null(pc.take(per_entry.column("covered_sum"), at), 0)
    coverage = pc.if_else(
        pc.greater(n_polymer, 0),
        pc.divide(n_covered.cast(pa.float64()), pc.max_element_wise(n_polymer, 1).cast(pa.float64())),
        pa.scalar(float("nan"), pa.float64()),
    )
    entries = entries.append_column("n_msa_chains", n_covered.cast(pa.int32()))
    tables["entries"] = entries.append_column("msa_coverage", coverage)
    return tables


# --- reading ----------------------------------------------------------------------------------------


def _selection(sel: Sequence[int] | slice | np.ndarray | None, n: int, what: str, key: str) -> np.ndarray:
    """Absolute int64 indices of a row/column selection (None = all, slice, or explicit indices) of
    the MSA ``key`` (named in the error: a batch job asking many MSAs sees which one)."""
    if sel is None:
        return np.arange(n, dtype=np.int64)
    if isinstance(sel, slice):
        return np.arange(n, dtype=np.int64)[sel]
    idx = np.asarray(sel, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise InvalidRequest(
            f"MSA {key}: {what} index out of range for its {n} {what}: {int(idx.min())}..{int(idx.max())}"
        )
    return np.where(idx < 0, idx + n, idx)


def _take2(a: np.ndarray, rr: np.ndarray, cc: np.ndarray) -> np.ndarray:
    """``a[rr][:, cc]`` with whole-row copies first (much faster than ``a[np.ix_(rr, cc)]``)."""
    rows = a if rr.size == a.shape[0] and np.array_equal(rr, np.arange(a.shape[0])) else a.take(rr, axis=0)
    if cc.size == a.shape[1] and np.array_equal(cc, np.arange(a.shape[1])):
        return np.ascontiguousarray(rows)
    return np.ascontiguousarray(rows.take(cc, axis=1))


def _scatter_deletions(
    out: np.ndarray,
    box: tuple[int, int],
    rr: np.ndarray,
    cc: np.ndarray,
    cell_row: np.ndarray,
    cells: np.ndarray,
) -> None:
    """Place CSR deletion cells into ``out`` [len(rr), len(cc)].

    ``box`` is the (rows, cols) range read, ``rr``/``cc`` the requested indices relative to it,
    ``cell_row`` each cell's row and ``cells["col"]`` its column (already relative to the box).
    """
    inside = (cells["col"] >= 0) & (cells["col"] < box[1])
    rows, cols, counts = cell_row[inside], cells["col"][inside], cells["count"][inside]
    if np.unique(rr).size != rr.size or np.unique(cc).size != cc.size:
        dense = np.zeros(box, dtype=np.int16)  # repeated indices: fill the range, then gather
        dense[rows, cols] = counts
        out[...] = dense.take(rr, axis=0).take(cc, axis=1)
        return
    row_pos = np.full(box[0], -1, dtype=np.int64)
    col_pos = np.full(box[1], -1, dtype=np.int64)
    row_pos[rr] = np.arange(rr.size)
    col_pos[cc] = np.arange(cc.size)
    pr, pcol = row_pos[rows], col_pos[cols]
    wanted = (pr >= 0) & (pcol >= 0)
    out[pr[wanted], pcol[wanted]] = counts[wanted]


#: :func:`read_all_deletions`: the deletion cells outside a row range (estimated) that reading
#: all of an MSA's cells with its residues may decode to save the second round trip: three inner
#: chunks (tuned when a round trip into zarr's event loop cost ~1 ms of CPU, each further 4096-cell
#: chunk decoded with the first trip ~0.35 ms). Since the store's own layout is read directly
#: (``store.shards``) the choice hardly matters: benchmarks/sample_cost.py ``--deletions`` (session
#: 42, 19 MSAs of the real corpus, CPU per msa() call, mean) 2.27 ms with this rule, 2.19 always
#: one trip, 2.21 always two, within the run's noise; the rule stays
READ_ALL_DELETIONS_EXTRA = 3 * MSA_RECORD_CHUNK


def read_all_deletions(span: int, depth: int, cells: int) -> bool:
    """Whether ``MSAReader.msa`` reads all ``cells`` deletion cells of an MSA of ``depth`` rows in
    the same round trip as its residues and row / column records, for a row range of ``span``
    rows; otherwise it reads the range's cells alone once the row records have said where they
    lie: a second round trip. Yes when the cells outside the range, estimated as the MSA's average
    per row, are at most :data:`READ_ALL_DELETIONS_EXTRA`. The client draws rows uniformly over the
    whole MSA and always takes the query (row 0), so n rows leave ~1/n of the depth below the
    range; the MSAs of the real corpus hold at most 29k cells (15k rows)."""
    return cells * (depth - span) <= READ_ALL_DELETIONS_EXTRA * depth


def _read_short(
    key: str, part: str, array: str, depth: int, length: int, got: tuple[int, ...], want: tuple[int, ...]
) -> StoreError:
    """The error of a read that zarr clipped: ``array`` of ``part`` is shorter than the index says."""
    return StoreError(
        f"MSA {key}: unreadable (part {part}: array {array} is smaller than the index's "
        f"{depth} x {length} MSA needs: read {got} where {want} was expected)"
    )


class MSAReader:
    """Random access to the MSAs of a store: ``msa(key, rows, cols)`` reads only that block.

    Reads the residue chunks covering the selected rows × columns (their inner chunks are
    full-depth column strips: every row of those columns is decoded), the rows' and columns'
    records, and the deletion cells of the selected row range, or of the whole MSA when the range
    spans most of it (:func:`read_all_deletions`).
    """

    def __init__(self, root: str | Path, msas: pa.Table) -> None:
        self.root = Path(root)
        self._table = msas
        if msas.num_rows and "key" in msas.column_names:
            cols = {c: msas.column(c).to_pylist() for c in ("key", "part", "array")}
            nums = {
                c: msas.column(c).to_numpy()
                for c in ("depth", "length", "row_start", "col_start", "del_start", "del_count")
            }
            self._row = {k: i for i, k in enumerate(cols["key"])}
            self._part, self._array = cols["part"], cols["array"]
            self._nums = nums
        else:
            self._row, self._part, self._array, self._nums = {}, [], [], {}
        self._part_arrays = PartArrays(self.root, "MSA array")

    def __contains__(self, key: object) -> bool:
        return key in self._row

    def shape(self, key: str) -> tuple[int, int]:
        i = self._index(key)
        return int(self._nums["depth"][i]), int(self._nums["length"][i])

    def _index(self, key: str) -> int:
        try:
            return self._row[key]
        except (KeyError, TypeError):
            raise NotFound(f"no MSA {key!r} in store {self.root}") from None

    def msa(
        self,
        key: str,
        rows: Sequence[int] | slice | np.ndarray | None = None,
        cols: Sequence[int] | slice | np.ndarray | None = None,
    ) -> MSABlock:
        """Rows × columns of the MSA ``key`` (indices in the order given; duplicates allowed)."""
        i = self._index(key)
        depth, length = int(self._nums["depth"][i]), int(self._nums["length"][i])
        part = self._part[i]
        r = _selection(rows, depth, "rows", key)
        c = _selection(cols, length, "columns", key)
        if r.size == 0 or c.size == 0:
            return self._empty(key, r, c, depth, length, part, i)
        r0, r1 = int(r.min()), int(r.max()) + 1
        c0, c1 = int(c.min()), int(c.max()) + 1
        row_start = int(self._nums["row_start"][i])
        col_start = int(self._nums["col_start"][i])
        # one record past the row range gives the end of its deletion cells
        stop = min(r1 + 1, depth)
        all_start = int(self._nums["del_start"][i])
        all_count = int(self._nums["del_count"][i])
        fold = all_count > 0 and read_all_deletions(r1 - r0, depth, all_count)
        # residues, row records and column records in one PartArrays.read_many, and
        # with them every deletion cell of the MSA when the row range spans most of it (the cells
        # of the range are known only once its row records are read: a second round trip)
        # (damaged data: a StoreError naming the part and array, not zarr's own ValueError)
        reads = [
            (part, self._array[i], (slice(r0, r1), slice(c0, c1))),
            (part, "rows", (slice(row_start + r0, row_start + stop),)),
            (part, "cols", (slice(col_start + c0, col_start + c1),)),
        ]
        if fold:
            reads.append((part, "deletions", (slice(all_start, all_start + all_count),)))
        try:
            res, row_raw, col_raw, *del_raw = self._part_arrays.read_many(*reads)
        except StoreError as exc:
            raise StoreError(f"MSA {key}: unreadable ({exc})") from exc
        row_rec = decode_records(row_raw, MSA_ROW)
        col_rec = decode_records(col_raw, MSA_COL)
        all_cells = decode_records(del_raw[0], MSA_DELETION) if fold else None
        # zarr clips a selection to the array: an array shorter than the index says reads short
        for array, got, want in (
            (self._array[i], res.shape, (r1 - r0, c1 - c0)), ("rows", row_rec.shape, (stop - r0,)),
            ("cols", col_rec.shape, (c1 - c0,)),
            *((("deletions", all_cells.shape, (all_count,)),) if all_cells is not None else ()),
        ):  # fmt: skip
            if got != want:
                raise _read_short(key, part, array, depth, length, got, want)
        del_end = (
            int(row_rec["del_start"][r1 - r0])
            if r1 < depth
            else int(self._nums["del_start"][i] + self._nums["del_count"][i])
        )
        del_begin = int(row_rec["del_start"][0])
        rr, cc = r - r0, c - c0
        deletions = np.zeros((r.size, c.size), dtype=np.int16)
        if del_end > del_begin:
            if all_cells is not None and all_start <= del_begin and del_end <= all_start + all_count:
                cells = all_cells[del_begin - all_start : del_end - all_start].copy()
            else:  # the range's cells alone (or row records that disagree with the index: as read)
                try:
                    cells = self._part_arrays.records(part, "deletions", MSA_DELETION, del_begin, del_end)
                except StoreError as exc:
                    raise StoreError(f"MSA {key}: unreadable ({exc})") from exc
                if cells.shape != (del_end - del_begin,):  # a deletions array cut short reads short
                    raise _read_short(
                        key, part, "deletions", depth, length, cells.shape, (del_end - del_begin,)
                    )
            cells["col"] -= c0
            starts = row_rec["del_start"][: r1 - r0] - del_begin
            counts = np.diff(np.append(starts, del_end - del_begin))
            cell_row = np.repeat(np.arange(r1 - r0), counts)
            _scatter_deletions(deletions, (r1 - r0, c1 - c0), rr, cc, cell_row, cells)
        return MSABlock(
            key=key,
            residues=_take2(res, rr, cc),
            deletions=deletions,
            species=np.ascontiguousarray(row_rec["species"][rr]),
            source=np.ascontiguousarray(row_rec["source"][rr]),
            profile=np.ascontiguousarray(col_rec["profile"][cc]),
            deletion_mean=np.ascontiguousarray(col_rec["deletion_mean"][cc]),
            depth=depth,
            length=length,
        )

    def _empty(
        self, key: str, r: np.ndarray, c: np.ndarray, depth: int, length: int, part: str, i: int
    ) -> MSABlock:
        col_start = int(self._nums["col_start"][i])
        row_start = int(self._nums["row_start"][i])
        col_rec = self._part_arrays.records(part, "cols", MSA_COL, col_start, col_start + length)[c]
        row_rec = self._part_arrays.records(part, "rows", MSA_ROW, row_start, row_start + depth)[r]
        return MSABlock(
            key=key,
            residues=np.zeros((r.size, c.size), np.uint8),
            deletions=np.zeros((r.size, c.size), np.int16),
            species=np.ascontiguousarray(row_rec["species"]),
            source=np.ascontiguousarray(row_rec["source"]),
            profile=np.ascontiguousarray(col_rec["profile"]),
            deletion_mean=np.ascontiguousarray(col_rec["deletion_mean"]),
            depth=depth,
            length=length,
        )

    def close(self) -> None:
        self._part_arrays.clear()
