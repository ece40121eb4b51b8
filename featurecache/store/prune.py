"""`featurecache prune`: delete the parts that no index row uses any more.

Parts never change once written, so what a later build supersedes stays on disk: the old version
of an entry whose input was replaced or rebuilt (a new CCD or featurizer version rebuilds every
entry), MSAs of sequences no entry has any more, component rows recomputed since. The index lists
none of it (``index.rebuild_index``), but a part is removed only when *none* of its rows is in any
index table: a part holding one live entry, MSA, component, failure, warning or chem-stage record
stays whole. Before anything is removed, the index that the remaining parts give is computed and
must equal the current one, table by table, so a prune never changes what the store serves.

The highest-numbered part of each kind (``s-``, ``m-``, ``c-``) is always kept: a build numbers
its new parts after the highest one present, and a reused name would pass for a part that the
chem stage already scanned (``chem_scans``), or that the index already took in.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from featurecache.errors import StoreError
from featurecache.store.index import complete_parts, index_tables, rebuild_index
from featurecache.store.layout import PART_DONE_FILE, PART_INDEX_DIR, PARTS_DIR, TMP_PREFIX
from featurecache.store.root import BuildLock, check_store_dir

log = logging.getLogger(__name__)


@dataclass
class PruneResult:
    """The parts removed (or, for a dry run, the ones that would be) and their bytes on disk."""

    parts: list[str] = field(default_factory=list)
    bytes: int = 0
    dry_run: bool = False


def unused_parts(root: Path) -> list[Path]:
    """Complete parts none of whose rows is in any index table (sorted by name). A directory
    without its ``part.json`` is never listed (``verify`` reports it as incomplete).

    Raises StoreError when the index without them would differ from the index with them (a table
    derived from rows that are not themselves listed): nothing is then safe to remove."""
    root = Path(root)
    parts = complete_parts(root)
    tables = index_tables(root, parts)
    used: set[str] = set()
    for table in tables.values():
        if table.num_rows and "part" in table.column_names:
            used.update(pc.unique(table.column("part")).to_pylist())
    last = {p.name[:2]: p for p in parts}  # the highest number of each kind: never removed
    unused = [
        p for p in parts
        if p.name not in used and p not in last.values() and (p / PART_INDEX_DIR / PART_DONE_FILE).is_file()
    ]  # fmt: skip
    if unused:
        without = index_tables(root, [p for p in parts if p not in unused])
        changed = _differing_tables(tables, without)
        if changed:
            raise StoreError(
                f"{root}: the {len(unused)} part(s) without index rows still decide table(s) "
                f"{', '.join(changed)} of the index; nothing removed"
            )
    return unused


def prune_store(root: Path, *, dry_run: bool = False) -> PruneResult:
    """Remove :func:`unused_parts` (holding the build lock: no build may run meanwhile). Each
    part is first renamed to a temp name readers and builds ignore, the index is rebuilt from
    the remaining parts (its tables are the ones it had), then the parts are deleted."""
    root = Path(root)
    check_store_dir(root)
    if not (root / "zarr.json").is_file():
        raise StoreError(f"{root} is not a featurecache store (no zarr.json)")
    with BuildLock(root):
        unused = unused_parts(root)
        result = PruneResult([p.name for p in unused], sum(_dir_bytes(p) for p in unused), dry_run)
        if dry_run or not unused:
            return result
        moved = []
        try:
            for p in unused:
                target = root / PARTS_DIR / f"{TMP_PREFIX}pruned-{p.name}-{uuid.uuid4().hex[:8]}"
                p.rename(target)
                moved.append(target)
        except OSError as exc:
            raise StoreError(f"cannot remove part {p.name} of {root}: {exc.strerror or exc}") from exc
        finally:
            # whatever was moved is out of every index (the next build's leftover cleanup deletes
            # it if this process dies before the rmtree below)
            rebuild_index(root)
        for target in moved:
            shutil.rmtree(target, ignore_errors=True)
    log.info("pruned %d part(s), %d bytes: %s", len(result.parts), result.bytes, ", ".join(result.parts))
    return result


def _dir_bytes(path: Path) -> int:
    return sum(os.stat(os.path.join(d, f)).st_size for d, _, files in os.walk(path) for f in files)


def _differing_tables(a: dict[str, pa.Table], b: dict[str, pa.Table]) -> list[str]:
    """Names of the tables that differ (compared as Arrow IPC bytes: ``Table.equals`` has NaN,
    a resolution not stated, unequal to itself)."""
    names = sorted(set(a) | set(b))
    return [n for n in names if n not in a or n not in b or _ipc_bytes(a[n]) != _ipc_bytes(b[n])]


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks())
    return bytes(sink.getvalue())
