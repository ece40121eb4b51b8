"""`featurecache verify`: recompute content hashes and check index ↔ parts consistency.

The per-entry and per-MSA checks (read every array back, hash it) run in worker processes, each
with the store opened once, on batches of index rows; problems are reported in the order of the
index whatever order the batches finish in. Processes, not threads: a read of one entry is a few
small zarr reads whose cost is mostly Python (zarr's asyncio pipeline, the shard index), which
holds the GIL, so threads did not overlap (2 cores, real store: 8 threads 1.21 s vs one 1.32 s for
285 entries; 2 processes 0.72 s vs 1.54 s). A small store is checked in this process (starting
workers costs ~0.5 s each).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pyarrow as pa

from featurecache.errors import FeatureCacheError, StoreError
from featurecache.store.index import (
    REMOVED,
    complete_parts,
    differing_hashes,
    gather_part_tables,
    latest_per,
    read_table,
    without_removed,
)
from featurecache.store.layout import (
    ENTRY_GROUPS,
    GROUP_OFFSETS,
    PART_DONE_FILE,
    PART_INDEX_DIR,
    STRUCTURE_PART_PREFIX,
    content_hash,
    group_hashes,
)
from featurecache.store.reader import LocalStore, open_store
from featurecache.store.root import array_metadata, array_names, fill_only_shards, shard_files
from featurecache.store.writer import GROUP_HASHES

log = logging.getLogger(__name__)

#: worker processes checking entries and MSAs (default: one per core, at most 16)
DEFAULT_WORKERS = min(16, os.cpu_count() or 1)
#: fewer entries + MSAs than this: checked in this process (serially ~5 ms each; a worker starts in ~0.5 s)
MIN_ROWS_FOR_WORKERS = 256
#: index rows per task sent to a worker
BATCH_ROWS = 32

Row = dict[str, Any]


def verify_store(path: Path, progress: bool = False, workers: int | None = None) -> list[str]:
    """Every problem found, as one line each (empty list: the store is consistent).

    ``progress``: a bar per stage on stderr (parts, entries, MSAs, components). ``workers``:
    processes checking entries and MSAs (1: all in this process); by default
    :data:`DEFAULT_WORKERS`, for a store of at least :data:`MIN_ROWS_FOR_WORKERS` entries and
    MSAs (a smaller one is checked faster here than workers start)."""
    from featurecache.build.progress import progress_stages

    with progress_stages(progress) as stage:
        return _verify(path, stage, workers)


def _verify(path: Path, stage: Callable[[str, int], Callable[[int], None]], workers: int | None) -> list[str]:
    store = open_store(path)
    problems: list[str] = []
    parts = {p.name: p for p in complete_parts(store.path)}
    # 1. every part is complete and its own index agrees with its arrays
    advance = stage("parts", len(parts))
    for name, part in parts.items():
        advance(1)
        problems.extend(_check_part(name, part))
    entries, msas = store.entries, store.msas
    with _Checks(store, parts, workers, entries.num_rows + msas.num_rows) as checks:
        # 2. every index row points at an existing part and its arrays hash to the recorded content hash
        advance = stage("entries", entries.num_rows)
        for found in checks.run("entries", entries.to_pylist()):
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

        advance = stage("MSAs", msas.num_rows)

        def each_msa(_: Callable[[Row], list[str]], rows: list[Row]) -> Iterator[list[str]]:
            for found in checks.run("msas", rows):
                advance(1)
                yield found

        problems.extend(_guarded("MSAs", lambda s: verify_msas(s, each_msa), store))
    advance = stage("components", len(_EXTRA_CHECKS))
    for label, extra_check in _EXTRA_CHECKS:
        advance(1)
        problems.extend(_guarded(label, extra_check, store))
    log.info("verified %d entries in %d parts: %d problem(s)", entries.num_rows, len(parts), len(problems))
    return problems


class _Checks:
    """Runs the per-row checks (``"entries"``: :func:`_check_entry`, ``"msas"``:
    ``msa._check_msa``) here or on a pool of worker processes, yielding each row's problems in
    row order."""

    def __init__(self, store: LocalStore, parts: dict[str, Path], workers: int | None, n_rows: int) -> None:
        if workers is None:
            workers = DEFAULT_WORKERS if n_rows >= MIN_ROWS_FOR_WORKERS else 1
        self._store, self._parts, self._workers = store, parts, max(1, workers)
        self._pool: ProcessPoolExecutor | None = None
        if self._workers > 1 and n_rows:
            # spawn: zarr's event loop thread does not survive a fork
            self._pool = ProcessPoolExecutor(
                max_workers=self._workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(str(store.path),),
            )

    def __enter__(self) -> _Checks:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def run(self, kind: str, rows: list[Row]) -> Iterator[list[str]]:
        if self._pool is None:
            yield from _check_rows(self._store, self._parts, kind, rows)
            return
        pending: deque[Future[list[list[str]]]] = deque()
        batches = (rows[i : i + BATCH_ROWS] for i in range(0, len(rows), BATCH_ROWS))
        try:
            for batch in batches:
                pending.append(self._pool.submit(_check_batch, kind, batch))
                if len(pending) >= 4 * self._workers:  # bounded: a million rows are not all queued
                    yield from pending.popleft().result()
            while pending:
                yield from pending.popleft().result()
        except BrokenProcessPool as exc:
            raise StoreError(f"verify: a worker process checking {kind} died ({exc})") from exc


def _check_rows(store: LocalStore, parts: dict[str, Path], kind: str, rows: list[Row]) -> Iterator[list[str]]:
    from featurecache.store.msa import _check_msa

    for row in rows:
        yield _check_entry(store, parts, row) if kind == "entries" else _check_msa(store, row)


#: a worker process's store and parts, opened once by :func:`_init_worker`
_worker: tuple[LocalStore, dict[str, Path]] | None = None


def _init_worker(path: str) -> None:
    global _worker
    # Ctrl-C reaches the whole process group: the parent stops the pool, workers print nothing
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    store = open_store(path)
    _worker = (store, {p.name: p for p in complete_parts(store.path)})


def _check_batch(kind: str, rows: list[Row]) -> list[list[str]]:
    assert _worker is not None, "verify worker used before _init_worker"
    return list(_check_rows(*_worker, kind, rows))


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
            arr = array_metadata(part / g)
        except StoreError as exc:
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
            arr = array_metadata(part / array)
        except StoreError as exc:
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
        return [
            f"entry {row['id']}: content hash {got[:16]}… != index {row['content_hash'][:16]}… "
            f"(part {row['part']}: {_differing_groups(parts[row['part']], row['id'], groups)})"
        ]
    return []


def _differing_groups(part: Path, entry_id: str, groups: dict[str, dict[str, Any]]) -> str:
    """Which of the entry's array groups hash differently from what its part recorded when it was
    written (``writer.GROUP_HASHES``), as words for the mismatch line; read only on a mismatch."""
    return differing_hashes(part / GROUP_HASHES, "entry_id", entry_id, group_hashes(groups),
                            {g: g for g in ENTRY_GROUPS}, "array group", "entry")  # fmt: skip


def _index_matches_parts(root: Path, entries: pa.Table) -> list[str]:
    """The index's entries are exactly the live entries of the parts (a killed build can leave the
    top-level index behind its parts; a build on the store rebuilds it)."""
    raw = gather_part_tables(root)
    # less what prune --sources-gone removed (the index leaves it out as well)
    live = latest_per(without_removed(raw["entries"], "id", raw.get(REMOVED), "entry"), "id")
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
