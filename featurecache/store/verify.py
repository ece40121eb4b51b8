"""`featurecache verify`: recompute content hashes and check index ↔ parts consistency."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import zarr

from featurecache.errors import FeatureCacheError
from featurecache.store.index import complete_parts, gather_part_tables, latest_per, read_table
from featurecache.store.layout import (
    ENTRY_GROUPS,
    GROUP_OFFSETS,
    PART_DONE_FILE,
    PART_INDEX_DIR,
    content_hash,
)
from featurecache.store.reader import open_store
from featurecache.store.root import shard_files

log = logging.getLogger(__name__)


def verify_store(path: Path, progress: bool = False) -> list[str]:
    """Every problem found, as one line each (empty list: the store is consistent).

    ``progress``: a bar per stage on stderr (parts, entries, then the MSA and component checks)."""
    from featurecache.build.progress import progress_stages

    with progress_stages(progress) as stage:
        return _verify(path, stage)


def _verify(path: Path, stage: Callable[[str, int], Callable[[int], None]]) -> list[str]:
    store = open_store(path)
    problems: list[str] = []
    parts = {p.name: p for p in complete_parts(store.path)}
    # 1. every part is complete and its own index agrees with its arrays
    advance = stage("parts", len(parts))
    for name, part in parts.items():
        advance(1)
        manifest = part / PART_INDEX_DIR / PART_DONE_FILE
        if not manifest.is_file():
            problems.append(f"part {name}: no {PART_DONE_FILE} (incomplete part)")
            continue
        if not name.startswith("s-"):
            continue
        try:
            m = json.loads(manifest.read_text())
            rows = read_table(part / PART_INDEX_DIR / "entries.arrow", memory_map=False)
        except (
            FeatureCacheError,
            OSError,
            ValueError,
        ) as exc:  # ValueError: bad JSON, pyarrow's ArrowInvalid
            problems.append(f"part {name}: its own index is unreadable ({exc})")
            continue
        for g in ENTRY_GROUPS:
            _, count_col = GROUP_OFFSETS[g]
            total = sum(rows.column(count_col).to_pylist()) if rows.num_rows else 0
            try:
                arr = zarr.open_array(str(part / g), mode="r")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problems.append(f"part {name}: array {g} unreadable ({exc})")
                continue
            n = arr.shape[0]
            if n != total or m.get("counts", {}).get(g, total) != total:
                problems.append(f"part {name}: {g} has {n} rows, its index says {total}")
            # a structure array with rows always has its shard file (its records are never all
            # zero); zarr would read a missing one back as zeros
            missing = [f for f in shard_files(part / g, arr) if not f.is_file()]
            problems.extend(f"part {name}: array {g} is missing its data file {f}" for f in missing)
    # 2. every index row points at an existing part and its arrays hash to the recorded content hash
    entries = store.entries
    advance = stage("entries", entries.num_rows)
    for row in entries.to_pylist():
        advance(1)
        if row["part"] not in parts:
            problems.append(f"entry {row['id']}: part {row['part']} is missing")
            continue
        try:
            e = store.entry(row["id"])
        except (FeatureCacheError, OSError, ValueError, KeyError, RuntimeError) as exc:
            # the reader says "entry ID: unreadable (…)" itself, naming the part and the array
            msg = str(exc)
            problems.append(
                msg if msg.startswith(f"entry {row['id']}: ") else f"entry {row['id']}: unreadable ({msg})"
            )
            continue
        groups = {"atoms": e.atoms, "tokens": e.tokens, "bonds": e.bonds, "interfaces": e.interfaces}
        got = content_hash(groups)
        if got != row["content_hash"]:
            problems.append(
                f"entry {row['id']}: content hash {got[:16]}… != index {row['content_hash'][:16]}…"
            )
    # 3. index rows and part rows agree (nothing lost, nothing invented)
    problems.extend(_index_matches_parts(store.path, entries))
    chains = store.chains
    ids = set(store.ids)
    orphan = {c for c in chains.column("entry_id").to_pylist()} - ids if chains.num_rows else set()
    for c in sorted(orphan):
        problems.append(f"chains index has rows for {c}, which is not an entry")
    problems.extend(_chains_cover_tokens(entries, chains))
    advance = stage("MSAs, components", len(_EXTRA_CHECKS))
    for label, extra_check in _EXTRA_CHECKS:
        advance(1)
        try:
            problems.extend(extra_check(store))
        except (FeatureCacheError, OSError, ValueError, KeyError, RuntimeError) as exc:
            # e.g. an index table without a column the check needs: say so instead of a traceback
            problems.append(f"{label}: could not be checked ({type(exc).__name__}: {exc})")
    log.info("verified %d entries in %d parts: %d problem(s)", entries.num_rows, len(parts), len(problems))
    return problems


def _index_matches_parts(root: Path, entries: pa.Table) -> list[str]:
    """The index's entries are exactly the live entries of the parts (a killed build can leave the
    top-level index behind its parts; a build on the store rebuilds it)."""
    live = latest_per(gather_part_tables(root)["entries"], "id")
    in_parts = set(zip(live.column("id").to_pylist(), live.column("part").to_pylist(), strict=True))
    in_index = set(zip(entries.column("id").to_pylist(), entries.column("part").to_pylist(), strict=True))
    out = [f"entry {i} of part {p} is not in the index (stale index: run `featurecache build` on the store "
           "to rebuild it)" for i, p in sorted(in_parts - in_index)]  # fmt: skip
    out += [f"index entry {i} points at part {p}, which does not hold it as its latest version"
            for i, p in sorted(in_index - in_parts)]  # fmt: skip
    return out


def _chains_cover_tokens(entries: pa.Table, chains: pa.Table) -> list[str]:
    """Each entry's chain rows tile its tokens: n_chains rows, contiguous from 0 to token_count."""
    spans: dict[str, list[tuple[int, int]]] = {}
    if chains.num_rows:
        cols = chains.select(["entry_id", "token_start", "token_count"]).to_pydict()
        for e, start, count in zip(cols["entry_id"], cols["token_start"], cols["token_count"], strict=True):
            spans.setdefault(e, []).append((start, count))
    out = []
    for row in entries.select(["id", "token_count", "n_chains"]).to_pylist():
        rows = sorted(spans.get(row["id"], []))
        end = 0
        for start, count in rows:
            if start != end:
                break
            end = start + count
        if len(rows) != row["n_chains"] or end != row["token_count"]:
            out.append(f"entry {row['id']}: {len(rows)} chain rows covering tokens up to {end}, but the entry "
                       f"has {row['n_chains']} chains and {row['token_count']} tokens")  # fmt: skip
    return out


def _component_checks(store: object) -> list[str]:
    """Every component row's part exists and its arrays read."""
    from featurecache.store.components import load_component_table

    try:
        load_component_table(store.path, store.components)  # type: ignore[attr-defined]
    except (FeatureCacheError, OSError, ValueError, KeyError) as exc:
        return [f"components: {exc}"]
    return []


def _msa_checks(store: object) -> list[str]:
    from featurecache.store.msa import verify_msas

    return verify_msas(store)


#: further checks registered by the MSA / component stages: (what they check, callable(store) -> list[str])
_EXTRA_CHECKS: list[tuple[str, Callable[[Any], list[str]]]] = [
    ("MSAs", _msa_checks),
    ("components", _component_checks),
]
