"""`featurecache verify`: recompute content hashes and check index ↔ parts consistency.

The per-entry and per-MSA checks (read every array back, hash it) run on a pool of threads: zarr
decodes and hashlib hashes with the GIL released, so reads overlap. Problems are reported in the
order of the index whatever order the reads finish in.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import zarr

from featurecache.errors import FeatureCacheError
from featurecache.store.index import complete_parts, gather_part_tables, latest_per, read_table
from featurecache.store.layout import (
    ENTRY_GROUPS,
    GROUP_OFFSETS,
    PART_DONE_FILE,
    PART_INDEX_DIR,
    STRUCTURE_PART_PREFIX,
    content_hash,
)
from featurecache.store.reader import LocalStore, open_store
from featurecache.store.root import array_names, fill_only_shards, shard_files

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: threads reading and hashing entries / MSAs at once (reads wait on the disk and on zarr's
#: decoding, which release the GIL; benchmarks in the H2 report: 2 cores, real store)
DEFAULT_WORKERS = min(16, 4 * (os.cpu_count() or 1))


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int) -> Iterator[R]:
    """``map(fn, items)`` run on ``workers`` threads, results yielded in the order of ``items``;
    at most ``4 * workers`` items are in flight (a million entries are not all submitted at once)."""
    if workers <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify") as pool:
        pending: deque[Future[R]] = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= 4 * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


def verify_store(path: Path, progress: bool = False, workers: int | None = None) -> list[str]:
    """Every problem found, as one line each (empty list: the store is consistent).

    ``progress``: a bar per stage on stderr (parts, entries, MSAs, components). ``workers``:
    threads reading entries and MSAs at once (default :data:`DEFAULT_WORKERS`; 1: one at a time)."""
    from featurecache.build.progress import progress_stages

    with progress_stages(progress) as stage:
        return _verify(path, stage, DEFAULT_WORKERS if workers is None else max(1, workers))


def _verify(path: Path, stage: Callable[[str, int], Callable[[int], None]], workers: int) -> list[str]:
    store = open_store(path)
    problems: list[str] = []
    parts = {p.name: p for p in complete_parts(store.path)}
    # 1. every part is complete and its own index agrees with its arrays
    advance = stage("parts", len(parts))
    for found in ordered_map(lambda item: _check_part(*item), parts.items(), workers):
        advance(1)
        problems.extend(found)
    # 2. every index row points at an existing part and its arrays hash to the recorded content hash
    entries = store.entries
    advance = stage("entries", entries.num_rows)

    def check(row: dict[str, Any]) -> list[str]:
        return _check_entry(store, parts, row)

    for found in ordered_map(check, entries.to_pylist(), workers):
        advance(1)
        problems.extend(found)
    # 3. index rows and part rows agree (nothing lost, nothing invented)
    problems.extend(_index_matches_parts(store.path, entries))
    chains = store.chains
    ids = set(store.ids)
    orphan = {c for c in chains.column("entry_id").to_pylist()} - ids if chains.num_rows else set()
    for c in sorted(orphan):
        problems.append(f"chains index has rows for {c}, which is not an entry")
    problems.extend(_chains_cover_tokens(entries, chains))
    # 4. every MSA reads back to its content hash, then the extra checks (components)
    from featurecache.store.msa import verify_msas

    msas = store.msas
    advance = stage("MSAs", msas.num_rows)

    def each_msa(
        fn: Callable[[dict[str, Any]], list[str]], rows: list[dict[str, Any]]
    ) -> Iterator[list[str]]:
        for found in ordered_map(fn, rows, workers):
            advance(1)
            yield found

    problems.extend(_guarded("MSAs", lambda s: verify_msas(s, each_msa), store))
    advance = stage("components", len(_EXTRA_CHECKS))
    for label, extra_check in _EXTRA_CHECKS:
        advance(1)
        problems.extend(_guarded(label, extra_check, store))
    log.info("verified %d entries in %d parts: %d problem(s)", entries.num_rows, len(parts), len(problems))
    return problems


def _guarded(label: str, check: Callable[[LocalStore], list[str]], store: LocalStore) -> list[str]:
    try:
        return check(store)
    except (FeatureCacheError, OSError, ValueError, KeyError, RuntimeError) as exc:
        # e.g. an index table without a column the check needs: say so instead of a traceback
        return [f"{label}: could not be checked ({type(exc).__name__}: {exc})"]


def _check_part(name: str, part: Path) -> list[str]:
    """A part is complete, a structure part's arrays have the rows its own index says, and no
    shard file is missing that the part needs (see :class:`~featurecache.store.root.PartArrays`)."""
    manifest = part / PART_INDEX_DIR / PART_DONE_FILE
    if not manifest.is_file():
        return [f"part {name}: no {PART_DONE_FILE} (incomplete part)"]
    if not name.startswith(STRUCTURE_PART_PREFIX):
        return _missing_shards(name, part)
    problems: list[str] = []
    try:
        m = json.loads(manifest.read_text())
        rows = read_table(part / PART_INDEX_DIR / "entries.arrow", memory_map=False)
    except (
        FeatureCacheError,
        OSError,
        ValueError,
    ) as exc:  # ValueError: bad JSON, pyarrow's ArrowInvalid
        return [f"part {name}: its own index is unreadable ({exc})"]
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
    return problems


def _missing_shards(name: str, part: Path) -> list[str]:
    """An MSA or component part that lists its fill-only shards: every other shard file exists.
    (A part from before that list: a missing file cannot be told from an empty shard.)"""
    try:
        fill_only = fill_only_shards(part)
    except FeatureCacheError as exc:
        return [str(exc)]
    if fill_only is None:
        return []
    problems = []
    for array in array_names(part):
        try:
            arr = zarr.open_array(str(part / array), mode="r")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"part {name}: array {array} unreadable ({exc})")
            continue
        missing = [
            f for f in shard_files(part / array, arr)
            if not f.is_file() and f.relative_to(part).as_posix() not in fill_only
        ]  # fmt: skip
        problems.extend(f"part {name}: array {array} is missing its data file {f}" for f in missing)
    return problems


def _check_entry(store: LocalStore, parts: dict[str, Path], row: dict[str, Any]) -> list[str]:
    """The problems of one index row: its part is gone, it does not read, or its hash differs."""
    if row["part"] not in parts:
        return [f"entry {row['id']}: part {row['part']} is missing"]
    try:
        e = store.entry(row["id"])
    except (FeatureCacheError, OSError, ValueError, KeyError, RuntimeError) as exc:
        # the reader says "entry ID: unreadable (…)" itself, naming the part and the array
        msg = str(exc)
        return [msg if msg.startswith(f"entry {row['id']}: ") else f"entry {row['id']}: unreadable ({msg})"]
    groups = {"atoms": e.atoms, "tokens": e.tokens, "bonds": e.bonds, "interfaces": e.interfaces}
    got = content_hash(groups)
    if got != row["content_hash"]:
        return [f"entry {row['id']}: content hash {got[:16]}… != index {row['content_hash'][:16]}…"]
    return []


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
        msg = str(exc)
        return [msg if msg.startswith("components: ") else f"components: {msg}"]
    return []


#: further checks run after the MSAs: (what they check, callable(store) -> list[str])
_EXTRA_CHECKS: list[tuple[str, Callable[[Any], list[str]]]] = [
    ("components", _component_checks),
]
