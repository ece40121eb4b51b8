"""Arrow IPC index files: schemas, per-part writing, and the atomic top-level rebuild.

Every part carries its own rows in ``<part>/_index/<table>.arrow``; ``rebuild_index`` concatenates
them into ``STORE/index/<table>.arrow`` and swaps each file in with ``os.replace`` (atomic), so a
reader never sees a half-written index and a killed build leaves the previous index intact.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from featurecache.errors import StoreError
from featurecache.store.layout import INDEX_DIR, PART_INDEX_DIR, PARTS_DIR, TABLES, TMP_PREFIX

log = logging.getLogger(__name__)

ENTRIES_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("key", pa.string()),  # hash(input bytes, featurizer version, config): skip-if-done
        ("content_hash", pa.string()),  # sha256 of the entry's arrays (verify recomputes it)
        ("source_path", pa.string()),
        ("source_sha256", pa.string()),
        ("source_bytes", pa.int64()),
        ("format", pa.string()),
        ("part", pa.string()),
        ("atom_start", pa.int64()), ("atom_count", pa.int64()),
        ("token_start", pa.int64()), ("token_count", pa.int64()),
        ("bond_start", pa.int64()), ("bond_count", pa.int64()),
        ("interface_start", pa.int64()), ("interface_count", pa.int64()),
        ("n_chains", pa.int32()),
        ("n_polymer_chains", pa.int32()),
        ("n_ligand_chains", pa.int32()),
        ("n_protein_tokens", pa.int32()),
        ("n_rna_tokens", pa.int32()),
        ("n_dna_tokens", pa.int32()),
        ("n_ligand_tokens", pa.int32()),
        ("n_resolved_tokens", pa.int32()),
        ("n_present_atoms", pa.int32()),
        ("resolution", pa.float64()),  # NaN when not stated
        ("release_date", pa.string()),  # ISO date, "" when not stated
        ("method", pa.string()),
        ("structure_id", pa.string()),
        ("n_models", pa.int32()),
        ("n_warnings", pa.int32()),
        ("seconds", pa.float64()),  # featurization wall time
    ]
)  # fmt: skip

CHAINS_SCHEMA = pa.schema(
    [
        ("entry_id", pa.string()),
        ("asym_id", pa.int32()),
        ("label_id", pa.string()),
        ("auth_id", pa.string()),
        ("entity_id", pa.int32()),
        ("sym_id", pa.int32()),
        ("mol_type", pa.int8()),
        ("sequence", pa.string()),
        ("sequence_hash", pa.string()),
        ("token_start", pa.int32()),
        ("token_count", pa.int32()),
        ("n_resolved", pa.int32()),
    ]
)

INTERFACES_SCHEMA = pa.schema(
    [
        ("entry_id", pa.string()),
        ("chain_i", pa.int32()),
        ("chain_j", pa.int32()),
        ("n_contacts", pa.int32()),
        ("min_distance", pa.float32()),
    ]
)

FAILURES_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("entry_id", pa.string()),
        ("stage", pa.string()),  # read | parse | tokenize | featurize | write | msa | chem
        ("error_class", pa.string()),
        ("message", pa.string()),
        ("key", pa.string()),
        ("part", pa.string()),
    ]
)

WARNINGS_SCHEMA = pa.schema(
    [
        ("entry_id", pa.string()),
        ("path", pa.string()),
        ("stage", pa.string()),
        ("message", pa.string()),
        ("part", pa.string()),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "entries": ENTRIES_SCHEMA,
    "chains": CHAINS_SCHEMA,
    "interfaces": INTERFACES_SCHEMA,
    "failures": FAILURES_SCHEMA,
    "warnings": WARNINGS_SCHEMA,
}


def table_from_rows(name: str, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    schema = SCHEMAS[name]
    return pa.Table.from_pylist(rows, schema=schema)


def write_table(path: Path, table: pa.Table) -> None:
    """Write an Arrow IPC file (not atomic: callers write inside a temp dir or use replace_table)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def replace_table(path: Path, table: pa.Table) -> None:
    """Write ``path`` atomically (temp file in the same directory + ``os.replace``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_table(tmp, table)
    os.replace(tmp, path)


def read_table(path: Path, *, memory_map: bool = True) -> pa.Table:
    """An Arrow IPC file; StoreError naming the file when it is missing, truncated or not Arrow."""
    try:
        if memory_map:
            with pa.memory_map(str(path), "r") as source:
                return ipc.open_file(source).read_all()
        with pa.OSFile(str(path), "rb") as source:
            return ipc.open_file(source).read_all()
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        hint = (
            "; re-running `featurecache build` on this store rebuilds the index from the parts"
            if Path(path).parent.name == INDEX_DIR else ""
        )  # fmt: skip
        raise StoreError(f"index file {path} is unreadable ({exc}){hint}") from exc


def complete_parts(root: Path) -> list[Path]:
    """Parts that were renamed into place (temp dirs excluded), sorted by name."""
    parts_dir = root / PARTS_DIR
    if not parts_dir.is_dir():
        return []
    return sorted(p for p in parts_dir.iterdir() if p.is_dir() and not p.name.startswith(TMP_PREFIX))


def _concat(tables: Iterable[pa.Table], name: str) -> pa.Table:
    tables = list(tables)
    if not tables:
        schema = SCHEMAS.get(name)
        return schema.empty_table() if schema is not None else pa.table({})
    return pa.concat_tables(tables, promote_options="permissive")


def gather_part_tables(root: Path) -> dict[str, pa.Table]:
    """Concatenate every complete part's ``_index/<table>.arrow`` per table name."""
    found: dict[str, list[pa.Table]] = {}
    for part in complete_parts(root):
        idx = part / PART_INDEX_DIR
        if not idx.is_dir():
            continue
        for f in sorted(idx.glob("*.arrow")):
            t = read_table(f, memory_map=False)
            # the directory name is the truth (a part may have been committed under another number)
            parts = pa.array([part.name] * t.num_rows, type=pa.string())
            if "part" in t.column_names:
                t = t.set_column(t.column_names.index("part"), "part", parts)
            else:
                t = t.append_column("part", parts)
            found.setdefault(f.stem, []).append(t)
    return {name: _concat(found.get(name, []), name) for name in sorted(set(found) | set(SCHEMAS))}


def latest_per(table: pa.Table, column: str) -> pa.Table:
    """Keep, for each value of ``column``, the row from the latest part (parts sort by name)."""
    if table.num_rows == 0 or "part" not in table.column_names:
        return table
    order = pc.sort_indices(table, sort_keys=[(column, "ascending"), ("part", "descending")])
    t = table.take(order)
    col = t.column(column).to_pylist()
    keep = [i for i in range(len(col)) if i == 0 or col[i] != col[i - 1]]
    return t.take(pa.array(keep, type=pa.int64()))


def rebuild_index(root: Path) -> dict[str, pa.Table]:
    """Rebuild ``STORE/index/*.arrow`` from the parts; returns the tables written."""
    tables = gather_part_tables(Path(root))
    entries = latest_per(tables["entries"], "id")
    live = {(e["id"], e["part"]) for e in entries.select(["id", "part"]).to_pylist()}
    # per-entry tables keep only the rows of each entry's live part
    for name in ("chains", "interfaces", "warnings"):
        t = tables[name]
        if t.num_rows and "part" in t.column_names:
            mask = [(r["entry_id"], r["part"]) in live for r in t.select(["entry_id", "part"]).to_pylist()]
            tables[name] = t.filter(pa.array(mask, type=pa.bool_()))
    # a path's latest outcome wins: a failure is dropped once the same path built successfully later
    failures = latest_per(tables["failures"], "path")
    if failures.num_rows:
        built = {r["source_path"]: r["part"] for r in entries.select(["source_path", "part"]).to_pylist()}
        mask = [built.get(r["path"], "") < r["part"] for r in failures.select(["path", "part"]).to_pylist()]
        failures = failures.filter(pa.array(mask, type=pa.bool_()))
    tables["entries"] = entries
    tables["failures"] = failures
    tables = _postprocess(root, tables)
    index_dir = Path(root) / INDEX_DIR
    index_dir.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        if name in TABLES or table.num_rows:
            replace_table(index_dir / f"{name}.arrow", _sorted(name, table))
    return tables


def _sorted(name: str, table: pa.Table) -> pa.Table:
    keys = {
        "entries": [("id", "ascending")],
        "chains": [("entry_id", "ascending"), ("asym_id", "ascending")],
        "interfaces": [("entry_id", "ascending"), ("chain_i", "ascending"), ("chain_j", "ascending")],
        "failures": [("path", "ascending")],
        "warnings": [("entry_id", "ascending")],
    }.get(name)
    if not keys or table.num_rows == 0 or not all(k in table.column_names for k, _ in keys):
        return table
    return table.take(pc.sort_indices(table, sort_keys=keys))


def _postprocess(root: Path, tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Cross-table joins done at rebuild time (MSA keys on chains, coverage on entries, …)."""
    from featurecache.store.components import join_chem_warnings
    from featurecache.store.msa import join_msa_columns

    return join_chem_warnings(join_msa_columns(tables))
