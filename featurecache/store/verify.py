"""`featurecache verify`: recompute content hashes and check index ↔ parts consistency."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from featurecache.errors import FeatureCacheError
from featurecache.store.index import complete_parts, read_table
from featurecache.store.layout import (
    ENTRY_GROUPS,
    GROUP_OFFSETS,
    PART_DONE_FILE,
    PART_INDEX_DIR,
    content_hash,
)
from featurecache.store.reader import open_store

log = logging.getLogger(__name__)


def verify_store(path: Path) -> list[str]:
    """Every problem found, as one line each (empty list: the store is consistent)."""
    store = open_store(path)
    problems: list[str] = []
    parts = {p.name: p for p in complete_parts(store.path)}
    # 1. every part is complete and its own index agrees with its arrays
    for name, part in parts.items():
        manifest = part / PART_INDEX_DIR / PART_DONE_FILE
        if not manifest.is_file():
            problems.append(f"part {name}: no {PART_DONE_FILE} (incomplete part)")
            continue
        if not name.startswith("s-"):
            continue
        m = json.loads(manifest.read_text())
        rows = read_table(part / PART_INDEX_DIR / "entries.arrow", memory_map=False)
        for g in ENTRY_GROUPS:
            _, count_col = GROUP_OFFSETS[g]
            total = sum(rows.column(count_col).to_pylist()) if rows.num_rows else 0
            try:
                import zarr

                n = zarr.open_array(str(part / g), mode="r").shape[0]
            except (FileNotFoundError, ValueError, KeyError) as exc:
                problems.append(f"part {name}: array {g} unreadable ({exc})")
                continue
            if n != total or m.get("counts", {}).get(g, total) != total:
                problems.append(f"part {name}: {g} has {n} rows, its index says {total}")
    # 2. every index row points at an existing part and its arrays hash to the recorded content hash
    entries = store.entries
    for row in entries.to_pylist():
        if row["part"] not in parts:
            problems.append(f"entry {row['id']}: part {row['part']} is missing")
            continue
        try:
            e = store.entry(row["id"])
        except FeatureCacheError as exc:
            problems.append(f"entry {row['id']}: unreadable ({exc})")
            continue
        groups = {"atoms": e.atoms, "tokens": e.tokens, "bonds": e.bonds, "interfaces": e.interfaces}
        got = content_hash(groups)
        if got != row["content_hash"]:
            problems.append(
                f"entry {row['id']}: content hash {got[:16]}… != index {row['content_hash'][:16]}…"
            )
    # 3. index rows and part rows agree (nothing lost, nothing invented)
    chains = store.chains
    ids = set(store.ids)
    orphan = {c for c in chains.column("entry_id").to_pylist()} - ids if chains.num_rows else set()
    for c in sorted(orphan):
        problems.append(f"chains index has rows for {c}, which is not an entry")
    for extra_check in _EXTRA_CHECKS:
        problems.extend(extra_check(store))
    log.info("verified %d entries in %d parts: %d problem(s)", entries.num_rows, len(parts), len(problems))
    return problems


def _msa_checks(store: object) -> list[str]:
    from featurecache.store.msa import verify_msas

    return verify_msas(store)


#: further checks registered by the MSA / component stages: callables(store) -> list[str]
_EXTRA_CHECKS: list = [_msa_checks]
