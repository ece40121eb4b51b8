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

import contextlib
import json
import logging
import multiprocessing
import os
import shlex
import shutil
import signal
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from featurecache.const import FEATURIZER_VERSION, decode_res_name
from featurecache.errors import FeatureCacheError, ServiceError, StoreError, StoreVersionError, raised_from
from featurecache.signals import exits_with_parent, interrupts_deferred, stopped_by_sigterm
from featurecache.store.index import (
    access_problem,
    complete_parts,
    differing_hashes,
    index_tables,
    read_table,
    store_of,
)
from featurecache.store.layout import (
    COMPONENT_PART_PREFIX,
    ENTRY_GROUPS,
    GROUP_OFFSETS,
    MSA_PART_PREFIX,
    PART_DONE_FILE,
    PART_INDEX_DIR,
    PARTS_DIR,
    STRUCTURE_PART_PREFIX,
    content_hash,
    group_hashes,
)
from featurecache.store.leftovers import clean_leftovers
from featurecache.store.reader import LocalStore, open_store
from featurecache.store.root import array_metadata, array_names, fill_only_shards, shard_files
from featurecache.store.versions import msa_stage_notes, part_record, store_versions, version_notes
from featurecache.store.writer import GROUP_HASHES
from featurecache.text import first_named

log = logging.getLogger(__name__)

#: the most worker processes checking entries and MSAs by default (:func:`default_workers`)
MAX_DEFAULT_WORKERS = 16
#: fewer entries + MSAs than this: checked in this process (serially ~5 ms each; a worker starts in ~0.5 s)
MIN_ROWS_FOR_WORKERS = 256
#: index rows per task sent to a worker
BATCH_ROWS = 32

Row = dict[str, Any]


def default_workers() -> int:
    """The worker processes checking entries and MSAs when not told: one per CPU this process may
    run on, its affinity and its cgroup's CPU quota taken into account (``dask.system.CPU_COUNT``,
    as a build counts them: ``build.run.usable_cpus``; ``os.cpu_count()`` is the host's, 128 in a
    pod limited to 4; review R31d s47 #4), at most :data:`MAX_DEFAULT_WORKERS`."""
    try:
        import dask.system

        cpus = int(dask.system.CPU_COUNT)
    except ImportError:  # an install without the build's dependencies (the lookup image)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(MAX_DEFAULT_WORKERS, cpus))


@dataclass
class Damaged:
    """An index row (an entry, or an MSA) whose arrays do not read back to its content hash."""

    kind: str  # "entry" | "msa"
    id: str  # an entry's id, an MSA's key
    key: str  # its build key (an entry's ``key``, an MSA's ``inputs_key``): what a build skips
    part: str
    source_path: str  # an entry's file; an MSA's files, "; "-joined (relative to source_dir)
    source_dir: str  # the directory its part recorded ("": none recorded)
    source_gone: bool | None  # its files are gone (it cannot be rebuilt); None: cannot tell
    problem: str  # the first of its problems
    chains: str = ""  # an MSA's chains ("1psm/A, 3zee/A")
    pdb_dir: str = ""  # the --pdb-dir its build read (an entry's source_dir; an MSA's: one of its entries')
    #: its part is gone altogether (``source_dir``: the store's latest build's directory, as its
    #: part no longer records one); any rewrite of the index drops its rows, so it cannot be kept
    #: through a repair that writes (:func:`repair_store`)
    part_gone: bool = False
    #: its rows in ``STORE/index/`` differ from its part's own index, and the part records no
    #: checksum of its own index (:func:`_records_index_checksum`): which copy is damaged cannot be
    #: told, so a repair takes it out for the build to rebuild, and changes nothing while it is kept
    #: (any rewrite of the index from the parts would serve the part's copy; review R29b s46 #1)
    unsettled: bool = False


@dataclass
class VerifyReport:
    """What :func:`verify_report` found."""

    #: every problem, one line each (empty: the store is consistent)
    problems: list[str] = field(default_factory=list)
    #: the entries and MSAs among them that ``featurecache verify --repair`` can take out of the
    #: index for the next build to rebuild from their sources
    damaged: list[Damaged] = field(default_factory=list)
    #: parts whose own index (``_index/*.arrow``) is unreadable: their rows cannot be listed
    bad_index_parts: dict[str, str] = field(default_factory=dict)
    #: component parts whose arrays do not read (``--repair`` moves them aside; the next build's
    #: chem stage recomputes their components), or that are gone while the index lists their rows
    #: (``--repair`` drops the rows; the same)
    damaged_component_parts: dict[str, str] = field(default_factory=dict)
    #: damage in parts that no index row uses any more (not a problem: nothing is served from them;
    #: ``featurecache prune`` deletes them)
    notes: list[str] = field(default_factory=list)
    #: entries that did not check out in parts a newer featurecache wrote (their ``part.json``
    #: records a newer featurizer): not verified, not damage (``--repair`` leaves them), one line
    #: each, also among ``notes`` (review RF1 s27 #2)
    newer: list[str] = field(default_factory=list)
    #: residue codes of entries for which the index lists no component (a component part deleted
    #: and its rows dropped by a rewrite of the index): code -> the entries using it. Their atoms
    #: have no reference conformer; ``--repair`` writes a rescan part, so the next build's chem
    #: stage computes them
    no_component: dict[str, list[str]] = field(default_factory=dict)
    #: zarr groups whose metadata (``zarr.json``) is missing or not a group's: ``parts/`` and an
    #: MSA part's ``residues/`` (review R28c s46 #12); ``--repair`` writes it
    missing_groups: list[Path] = field(default_factory=list)
    #: index tables whose ``STORE/index/<name>.arrow`` differs from what the parts' own index gives
    #: (name -> how) in rows of parts that record their own index's checksum, or a file that is
    #: missing or unreadable: ``--repair`` rewrites the index from the parts
    index_differs: dict[str, str] = field(default_factory=dict)
    #: ``STORE/index/`` is of an older featurecache's layout (``index_check.LEGACY_SECONDS``): not a
    #: problem; ``--repair`` rewrites it in today's layout (review R29b s46 #2)
    old_layout: bool = False
    #: problem lines of index differences in rows of parts that record no checksum of their own
    #: index, which no entry, MSA or component part can be taken out for (a failure's row, ...):
    #: ``--repair`` changes nothing while there is one (review R29b s46 #1)
    unsettled: list[str] = field(default_factory=list)
    #: problem lines of entries, MSAs and component parts (or a whole check of them) whose check an
    #: error stopped that does not say their data is unreadable (:func:`unreadable_data`: a bug in
    #: the reader, ...): not damage, ``--repair`` keeps them (review R31d s47 #1); ``featurecache
    #: verify`` prints them as ``UNCHECKED`` lines
    unchecked: list[str] = field(default_factory=list)


def verify_store(path: Path, progress: bool = False, workers: int | None = None) -> list[str]:
    """Every problem found, as one line each (empty list: the store is consistent).

    ``progress``: a bar per stage on stderr (parts, entries, MSAs, components). ``workers``:
    processes checking entries and MSAs (1: all in this process); by default
    :func:`default_workers`, for a store of at least :data:`MIN_ROWS_FOR_WORKERS` entries and
    MSAs (a smaller one is checked faster here than workers start)."""
    return verify_report(path, progress, workers).problems


def verify_report(
    path: Path, progress: bool = False, workers: int | None = None, sound: set[tuple[Any, ...]] | None = None
) -> VerifyReport:
    """:func:`verify_store`'s problems, and which entries / MSAs / parts they damage.

    ``sound``: the entries and MSAs (:func:`_identity`) found sound before: not read again; those
    found sound now are added (``verify --repair`` verifies the store again after it wrote, and an
    index row it left alone has the arrays it had)."""
    from featurecache.build.progress import progress_stages

    # SIGTERM (``timeout``, ``kill``): the pool is shut down, then the process ends by the signal
    with stopped_by_sigterm(lambda: _stopped_line(path), log), progress_stages(progress) as stage:
        return _verify(path, stage, workers, sound)


def _stopped_line(path: Path) -> str:
    """The one line of a verify that SIGTERM stopped."""
    return f"verify of {path} stopped by SIGTERM before it finished: no report"


def _stopped_repair_line(root: Path) -> str:
    """The one line of a ``verify --repair`` that SIGTERM stopped (what a repair stopped mid-way
    leaves, the next prune, repair or build deletes: docs/build.md)."""
    again = f"featurecache verify {shlex.quote(str(root))} --repair"
    return (f"verify --repair of {root} stopped by SIGTERM before it finished: nothing its index uses was lost; "
            f"run `{again}` again to finish it")  # fmt: skip


def _verify(
    path: Path, stage: Callable[[str, int], Callable[[int], None]], workers: int | None,
    sound: set[tuple[Any, ...]] | None = None,
) -> VerifyReport:  # fmt: skip
    store = open_store(path)
    report = VerifyReport()
    problems = report.problems
    # entries / MSAs of another featurizer than this code's, or of several: a note (not a problem)
    report.notes.extend(version_notes(store_versions(store), str(store.path)))
    # MSAs merged by an older MSA stage (the next build with their --msa-dir rewrites them): a note too
    report.notes.extend(msa_stage_notes(store))
    parts = {p.name: p for p in complete_parts(store.path)}
    entries, msas = store.entries, store.msas
    # parts an index row reads arrays from: damage elsewhere is in data nothing serves
    live = set(entries.column("part").to_pylist()) | set(msas.column("part").to_pylist())
    components = store.components
    if "part" in components.column_names:
        live |= set(components.column("part").to_pylist())
    served = _served_msas(msas)
    # 1. every part is complete and its own index agrees with its arrays
    if parts and not _is_group(store.path / PARTS_DIR):
        report.missing_groups.append(store.path / PARTS_DIR)
        problems.append(f"{store.path / PARTS_DIR / 'zarr.json'} is missing or not a zarr group's metadata: the store "
                        f"is no Zarr v3 hierarchy without it (generic zarr readers find no part){_WRITES_GROUP}")  # fmt: skip
    advance = stage("parts", len(parts))
    unchecked = 0  # parts that record no checksum of their own index
    for name, part in parts.items():
        advance(1)
        unchecked += not _records_index_checksum(part)
        bad_index = _unreadable_part_index(part)
        if bad_index is not None:
            report.bad_index_parts[name] = bad_index
            problems.append(f"part {name}: its own index {bad_index}")
            continue
        # an MSA part the store serves: a missing shard file none of its served MSAs reads is a note
        msas_read = served.get(name, []) if served is not None and name in live else None
        found, unused = _check_part(name, part, msas_read)
        report.notes.extend(unused)
        report.notes.extend(_unreadable_verify_files(name, part))
        groups = _missing_part_groups(part)
        found += [f"part {name}: {g.relative_to(part)}/zarr.json is missing or not a zarr group's metadata (generic "
                  f"zarr readers find none of its arrays){_WRITES_GROUP}" for g in groups]  # fmt: skip
        if name in live:
            report.missing_groups.extend(groups)
            problems.extend(found)
            if found and name.startswith(COMPONENT_PART_PREFIX):
                report.damaged_component_parts[name] = found[0]
        else:
            report.notes.extend(f"{p} (no entry, MSA or component the store serves is read from part {name}; "
                                "`featurecache prune` deletes it once no index row uses it)" for p in found)  # fmt: skip
    if unchecked:
        report.notes.append(f"{unchecked} part{'s record' if unchecked != 1 else ' records'} no checksum of {'their' if unchecked != 1 else 'its'} "
                            "own index (written by a featurecache before parts recorded one): their own index is "
                            "compared with the store's index, not checked; where the two differ, which copy is "
                            "damaged cannot be told")  # fmt: skip
    dirs: dict[str, str] = {}
    rows = entries.to_pylist()
    n_rows = entries.num_rows + msas.num_rows
    if sound:
        msa_ids = (
            msas.select(_MSA_IDENTITY).to_pylist() if set(_MSA_IDENTITY) <= set(msas.column_names) else []
        )
        n_rows = sum(_identity("entries", r) not in sound for r in rows)
        n_rows += sum(_identity("msas", r) not in sound for r in msa_ids)
    with _Checks(store, parts, workers, n_rows, sound) as checks:
        # 2. every index row points at an existing part and its arrays hash to the recorded content hash
        advance = stage("entries", entries.num_rows)
        for row, found in zip(rows, checks.run("entries", rows), strict=True):
            advance(1)
            if found and found[0].startswith(_NEWER):  # a newer featurecache's part: not damage
                report.newer.append(found[0].removeprefix(_NEWER))
                report.notes.append(report.newer[-1])
                continue
            if found and found[0].startswith(UNCHECKED):  # not damage: --repair keeps the row
                report.unchecked.append(found[0].removeprefix(UNCHECKED))
                problems.append(report.unchecked[-1])
                continue
            if found and found[0].startswith(_NO_COMPONENT):  # the entry is sound: a component is missing
                for code in found[0].removeprefix(_NO_COMPONENT).split():
                    report.no_component.setdefault(code, []).append(row["id"])
                continue
            problems.extend(found)
            # (a part that is gone altogether: damaged too, the repair must say what becomes of it)
            if found and row["part"] not in report.bad_index_parts:
                report.damaged.append(
                    _damaged_entry(store.path, row, found[0], dirs, row["part"] not in parts)
                )
        # 3. index rows and part rows agree (nothing lost, nothing invented)
        # (the structure parts a build holds back until its MSA and chem stages have run: not stale)
        held = set(store.unpublished_parts)
        readable = [p for n, p in parts.items() if n not in report.bad_index_parts and n not in held]
        derived = index_tables(store.path, readable)
        stale = _index_matches_parts(entries, derived["entries"], set(report.bad_index_parts))
        problems.extend(stale)
        if not stale and not report.bad_index_parts:
            _check_index_contents(store, derived, report, dirs, parts, readable)
        problems.extend(f"part {n}: written but not yet published (the build that wrote it has not run its MSA and "
                        "chem stages after it: a build is running, or was stopped; run `featurecache build` on "
                        "the store to finish it)" for n in sorted(held) if n in parts)  # fmt: skip
        chains = store.chains
        ids = set(store.ids)
        orphan = {c for c in chains.column("entry_id").to_pylist()} - ids if chains.num_rows else set()
        for c in sorted(orphan):
            problems.append(f"chains index has rows for {c}, which is not an entry")
        problems.extend(_chains_cover_tokens(entries, chains))
        if report.no_component:
            problems.append(_no_component_problem(report.no_component))
        # 4. every MSA reads back to its content hash, then the extra checks (components)
        from featurecache.store.msa import verify_msas

        advance = stage("MSAs", msas.num_rows)
        msa_rows = {r["key"]: r for r in msas.to_pylist()} if "key" in msas.column_names else {}

        def each_msa(_: Callable[[Row], list[str]], rows: list[Row]) -> Iterator[list[str]]:
            for row, found in zip(rows, checks.run("msas", rows), strict=True):
                advance(1)
                full = msa_rows.get(row["key"])
                if found and found[0].startswith(UNCHECKED):  # not damage: --repair keeps the row
                    report.unchecked.append(found[0].removeprefix(UNCHECKED))
                elif found and full is not None and full["part"] not in report.bad_index_parts:
                    report.damaged.append(_damaged_msa(store.path, full, found[0], chains, entries, dirs,
                                                       full["part"] not in parts))  # fmt: skip
                yield found

        problems.extend(_guarded("MSAs", lambda s: verify_msas(s, each_msa), store, report.unchecked))
    advance = stage("components", len(_EXTRA_CHECKS))
    for label, extra_check in _EXTRA_CHECKS:
        advance(1)
        for line in _guarded(label, extra_check, store, report.unchecked):
            if line.startswith(UNCHECKED):  # not damage: --repair keeps it (review R32a s47 #4)
                line = line.removeprefix(UNCHECKED)
                report.unchecked.append(line)
            problems.append(line)
    _check_component_contents(store, report)
    if any(p.startswith("components: unreadable") for p in problems):
        not_checked: list[str] = []
        report.damaged_component_parts.update(
            (n, why) for n, why in _unreadable_component_parts(store.path, parts, not_checked).items()
            if n not in report.bad_index_parts
        )  # fmt: skip
        report.unchecked += not_checked
        problems += not_checked
    # a component part that is gone (deleted) while the index lists its rows: any rewrite of the
    # index drops them, and only a rescan has the next build's chem stage compute them again
    if "part" in components.column_names:
        report.damaged_component_parts.update(
            (n, f"part {n} is missing") for n in sorted(set(components.column("part").to_pylist()) - set(parts))
            if n and n.startswith(COMPONENT_PART_PREFIX)
        )  # fmt: skip
    log.info("verified %d entries in %d parts: %d problem(s)", entries.num_rows, len(parts), len(problems))
    return report


def _source_dir(root: Path, part: str, dirs: dict[str, str]) -> str:
    if part not in dirs:
        from featurecache.build.discover import part_source_dir  # build imports store

        dirs[part] = part_source_dir(root, part)
    return dirs[part]


def _recorded_dir(root: Path, which: str) -> str:
    """The ``which`` ("pdb_dir", "msa_dir") the store's latest build recorded (``info`` shows it),
    "" when none: where the rows of a part that is gone altogether (its ``part.json`` with it)
    were built from, as far as the store can tell."""
    from featurecache.store.info import recorded_build_inputs

    try:
        attrs = json.loads((Path(root) / "zarr.json").read_text()).get("attributes", {})
    except (OSError, ValueError, AttributeError):
        return ""
    value = recorded_build_inputs(attrs if isinstance(attrs, dict) else {})[which]
    return value if isinstance(value, str) else ""


def _gone(source_dir: str, paths: list[str]) -> bool | None:
    """Whether every one of ``paths`` (relative to ``source_dir``) is gone; None: no directory
    recorded, or it is not there (unmounted?): cannot tell."""
    if not source_dir or not paths or not Path(source_dir).is_dir():
        return None
    return not any((Path(source_dir) / p).exists() for p in paths)


def _damaged_entry(
    root: Path, row: Row, problem: str, dirs: dict[str, str], part_gone: bool = False
) -> Damaged:
    src = _recorded_dir(root, "pdb_dir") if part_gone else _source_dir(root, row["part"], dirs)
    return Damaged("entry", row["id"], row["key"], row["part"], row["source_path"], src,
                   _gone(src, [row["source_path"]]), problem, pdb_dir=src, part_gone=part_gone)  # fmt: skip


def _damaged_msa(
    root: Path, row: Row, problem: str, chains: pa.Table, entries: pa.Table, dirs: dict[str, str],
    part_gone: bool = False,
) -> Damaged:  # fmt: skip
    # a part that is gone took its record of the --msa-dir with it: the latest build's, as for entries
    src = _recorded_dir(root, "msa_dir") if part_gone else _source_dir(root, row["part"], dirs)
    paths = sorted({s.split("#", 1)[0] for s in (row.get("sources") or [])})
    users, user_ids = [], []
    if chains.num_rows and "msa_key" in chains.column_names:
        for c in chains.select(["entry_id", "auth_id", "label_id", "msa_key"]).to_pylist():
            if c["msa_key"] == row["key"]:
                users.append(f"{c['entry_id']}/{c['auth_id'] or c['label_id']}")
                user_ids.append(c["entry_id"])
    part_of = dict(zip(entries.column("id").to_pylist(), entries.column("part").to_pylist(), strict=True))
    pdb_dirs = [_source_dir(root, part_of[i], dirs) for i in user_ids[:1] if i in part_of]
    # an MSA of no file (a single-sequence one) is rebuilt from its chain's sequence alone
    gone = _gone(src, paths) if row.get("n_files") else False
    return Damaged("msa", row["key"], row.get("inputs_key") or "", row["part"], "; ".join(paths), src, gone,
                   problem, ", ".join(dict.fromkeys(users)), pdb_dirs[0] if pdb_dirs else "", part_gone)  # fmt: skip


def _unreadable_part_index(part: Path) -> str | None:
    """Why a part's own index cannot be read (naming the file), or None when every file reads. A
    part, index directory or file the uid may not read is no damage (``--repair`` would move the
    part aside): a StoreError naming it, the uid and the fix (exit 3; review RF2 s27 #3)."""
    idx = part / PART_INDEX_DIR
    try:
        with os.scandir(idx) as it:  # (Path.glob finds no file in an _index/ it may not list)
            files = sorted(Path(e.path) for e in it if e.name.endswith(".arrow"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except PermissionError as exc:
        raise StoreError(access_problem(idx, store_of(part)) or f"cannot read {idx}: {exc.strerror}") from exc
    for f in files:
        try:
            read_table(f, memory_map=False)
        except FeatureCacheError as exc:
            if isinstance(exc.__cause__, PermissionError):
                raise
            return f"file {f} is unreadable ({exc.__cause__ or exc})"
    return _changed_part_index(part)


def _records_index_checksum(part: Path) -> bool:
    """Whether ``part``'s ``part.json`` records the sha256 of its ``_index/*.arrow`` files
    (``writer.INDEX_SHA256_KEY``; parts written before session 46 do not)."""
    from featurecache.store.writer import INDEX_SHA256_KEY

    try:
        doc = json.loads((part / PART_INDEX_DIR / PART_DONE_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get(INDEX_SHA256_KEY), dict)


def _changed_part_index(part: Path) -> str | None:
    """Which ``_index/*.arrow`` file of ``part`` no longer has the sha256 its ``part.json`` recorded
    when the part was written (``writer.INDEX_SHA256_KEY``: an Arrow file has no checksum of its
    own, and a flipped bit reads back as other data; review R28c s46 #3), or is gone; None when
    they all match, or the part records none (written before, or no readable part.json)."""
    from featurecache.store.writer import INDEX_SHA256_KEY, index_file_hashes

    try:
        recorded = json.loads((part / PART_INDEX_DIR / PART_DONE_FILE).read_text()).get(INDEX_SHA256_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(recorded, dict):
        return None
    now = index_file_hashes(part)
    for name, digest in sorted(recorded.items()):
        f = part / PART_INDEX_DIR / name
        if name not in now:
            return f"file {f} is missing (its part.json records it)"
        if now[name] != digest:
            return (f"file {f} has changed since the part was written (sha256 {now[name][:16]}…, its part.json "
                    f"records {str(digest)[:16]}…)")  # fmt: skip
    return None


#: the columns of an MSA index row that :func:`_identity` takes (what ``msa._check_msa`` checks)
_MSA_IDENTITY = ["key", "part", "content_hash", "depth", "length", "array"]


def _identity(kind: str, row: Row) -> tuple[Any, ...]:
    """What an index row of ``kind`` ("entries", "msas") is checked against: the same tuple, the
    same arrays (parts never change once written)."""
    if kind == "entries":
        return ("entry", row["id"], row["part"], row["content_hash"])
    return ("msa", *(row.get(c) for c in _MSA_IDENTITY))


class _Checks:
    """Runs the per-row checks (``"entries"``: :func:`_check_entry`, ``"msas"``:
    ``msa._check_msa``) here or on a pool of worker processes, yielding each row's problems in
    row order. ``sound``: rows (:func:`_identity`) not checked again (no problem); the rows found
    sound are added."""

    def __init__(
        self, store: LocalStore, parts: dict[str, Path], workers: int | None, n_rows: int,
        sound: set[tuple[Any, ...]] | None = None,
    ) -> None:  # fmt: skip
        if workers is None:
            workers = default_workers() if n_rows >= MIN_ROWS_FOR_WORKERS else 1
        self._sound = sound
        self._store, self._parts, self._workers = store, parts, max(1, workers)
        self._pool: ProcessPoolExecutor | None = None
        #: the in-process checks' component codes (:func:`_component_codes`), read once
        self._codes: set[str] | None = None
        self._codes_read = False
        if self._workers > 1 and n_rows:
            # spawn: zarr's event loop thread does not survive a fork; the workers end when this
            # process dies (SIGKILL: review R40b s51 #1), started by the thread that runs the checks
            self._pool = ProcessPoolExecutor(
                max_workers=self._workers,
                mp_context=multiprocessing.get_context("spawn"),
                **exits_with_parent(_init_worker, (str(store.path),)),
            )

    def __enter__(self) -> _Checks:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._pool is None:
            return
        # dropped (its queues' semaphores are unlinked once it is collected: a process SIGTERM then
        # ends leaves none for the resource tracker to warn of, review R40b s51 #3), and shut down
        # whole: a Ctrl-C or SIGTERM meanwhile is raised after it (dropped when one stopped the
        # checks: that is the news); a second one at once
        pool, self._pool = self._pool, None
        try:
            with interrupts_deferred(drop=exc_type is not None):
                pool.shutdown(wait=True, cancel_futures=True)
        finally:
            del pool

    def run(self, kind: str, rows: list[Row]) -> Iterator[list[str]]:
        if self._sound is None:
            yield from self._run(kind, rows)
            return
        sound = self._sound
        ids = [_identity(kind, r) for r in rows]
        known = [i in sound for i in ids]  # (decided first: a row found sound below is added)
        found = self._run(kind, [r for r, k in zip(rows, known, strict=True) if not k])
        for i, k in zip(ids, known, strict=True):
            if k:
                yield []
                continue
            problems = next(found)
            if not problems:
                sound.add(i)
            yield problems

    def _run(self, kind: str, rows: list[Row]) -> Iterator[list[str]]:
        if self._pool is None:
            if kind == "entries" and not self._codes_read:
                self._codes, self._codes_read = _component_codes(self._store), True
            yield from _check_rows(self._store, self._parts, kind, rows, self._codes)
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


def _check_rows(
    store: LocalStore, parts: dict[str, Path], kind: str, rows: list[Row], codes: set[str] | None
) -> Iterator[list[str]]:
    """``codes``: :func:`_component_codes` of ``store``, read once per process, not per batch."""
    from featurecache.store.msa import _check_msa

    for row in rows:
        yield _check_entry(store, parts, row, codes) if kind == "entries" else _check_msa(store, row)


def _component_codes(store: LocalStore) -> set[str] | None:
    """The residue codes the index lists a component of (a CCD code, or the code of a perceived
    ``code#hash``); None when it lists none (a store whose builds had no chem stage: not checked)."""
    components = store.components
    if not components.num_rows or "code" not in components.column_names:
        return None
    return set(components.column("code").to_pylist())


#: a worker process's store, parts and component codes, read once by :func:`_init_worker`
_worker: tuple[LocalStore, dict[str, Path], set[str] | None] | None = None


def _init_worker(path: str) -> None:
    global _worker
    # Ctrl-C reaches the whole process group: the parent stops the pool, workers print nothing
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    store = open_store(path)
    _worker = (store, {p.name: p for p in complete_parts(store.path)}, _component_codes(store))


def _check_batch(kind: str, rows: list[Row]) -> list[list[str]]:
    assert _worker is not None, "verify worker used before _init_worker"
    store, parts, codes = _worker
    return list(_check_rows(store, parts, kind, rows, codes if kind == "entries" else None))


#: what a check catches from the reader: the errors of data that does not read
#: (:func:`unreadable_data`), and those of a bug in the reader, which say nothing of the data
CHECK_ERRORS = (FeatureCacheError, OSError, ValueError, KeyError, RuntimeError)
#: the start of a per-row check's line for a row whose check an error stopped that does not say its
#: data is unreadable (:func:`unchecked_line`): a problem, not damage (``--repair`` keeps the row)
UNCHECKED = "unchecked: "


def unreadable_data(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a read of the store, says that the data read is unreadable: damage,
    which ``verify --repair`` takes out of the index for a build to rebuild. The reader raises
    StoreError ``… unreadable (…)`` for data that does not read (a shard that fails its checksum, a
    missing data file, records it cannot decode: zarr's and numcodecs' ValueError, RuntimeError and
    OSError wrapped); an OSError is a file that does not read. Not damage (review R31d s47 #1):

    - StoreVersionError: data a newer featurecache wrote (an upgrade reads it);
    - ServiceError: a service that did not answer; an OSError of a denied permission (the fix is
      the file's mode);
    - anything else: a KeyError, ValueError, RuntimeError (NotFound, InvalidRequest, ChemError) out
      of the reader is a bug in it, which says nothing of the data."""
    return (
        isinstance(exc, (StoreError, OSError))
        and not isinstance(exc, (StoreVersionError, ServiceError))
        and raised_from(exc, PermissionError) is None
    )


def unchecked_line(what: str, exc: BaseException) -> str:
    """The problem line of ``what`` (``entry ID``, ``MSA KEY``, ``component part NAME``) whose check
    ``exc`` stopped without saying that its data is unreadable (:func:`unreadable_data`); a per-row
    check returns it after :data:`UNCHECKED`."""
    return f"{what}: could not be checked ({type(exc).__name__}: {exc})"


def _guarded(
    label: str, check: Callable[[LocalStore], list[str]], store: LocalStore, unchecked: list[str]
) -> list[str]:
    """``check``'s problems, or one line when an error stopped it (e.g. an index table without a
    column the check needs: said instead of a traceback), also put in ``unchecked`` when the error
    does not say the data is unreadable (:func:`unreadable_data`)."""
    try:
        return check(store)
    except CHECK_ERRORS as exc:
        line = unchecked_line(label, exc)
        if not unreadable_data(exc):
            unchecked.append(line)
        return [line]


#: the end of a missing group metadata's problem line
_WRITES_GROUP = ": `featurecache verify --repair` writes it"
#: what zarr writes for a group without attributes (the store's intermediate groups are such)
_GROUP_METADATA = {"attributes": {}, "zarr_format": 3, "node_type": "group"}


def _is_group(path: Path) -> bool:
    try:
        doc = json.loads((path / "zarr.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("node_type") == "group" and doc.get("zarr_format") == 3


def _missing_part_groups(part: Path) -> list[Path]:
    """The intermediate groups of ``part`` without their metadata: an MSA part's ``residues/``
    (its arrays are ``residues/NNNNNN``); the part's own group is :func:`_check_part`'s."""
    residues = part / "residues"
    return [residues] if residues.is_dir() and not _is_group(residues) else []


def _unreadable_verify_files(name: str, part: Path) -> list[str]:
    """A note for each ``_verify/*.arrow`` of ``part`` that does not read: nothing is served from
    it, but a later damage report of the part cannot say which arrays changed (review R28c s46 #12)."""
    out = []
    try:
        with os.scandir(part / "_verify") as it:
            files = sorted(Path(e.path) for e in it if e.name.endswith(".arrow"))
    except OSError:  # none (older parts), or one this uid may not list: not what this note is about
        return []
    for f in files:
        try:
            read_table(f, memory_map=False)
        except FeatureCacheError as exc:
            if isinstance(exc.__cause__, PermissionError):
                continue
            out.append(f"part {name}: {f} is unreadable ({exc.__cause__ or exc}): a report of damage to the part "
                       "cannot name the arrays that changed (`featurecache prune` deletes the part once a build "
                       "has rewritten what it holds)")  # fmt: skip
    return out


def _write_groups(groups: list[Path]) -> list[str]:
    """Write the metadata of each of ``groups`` (a group without attributes, as zarr writes one);
    returns their ``zarr.json`` paths."""
    out = []
    for g in groups:
        meta = g / "zarr.json"
        tmp = meta.with_name(f".zarr.json.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(_GROUP_METADATA, indent=2))
            os.replace(tmp, meta)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StoreError(f"cannot write {meta}: {exc.strerror or exc}") from exc
        out.append(str(meta))
    return out


def _check_part(name: str, part: Path, msas: list[Row] | None = None) -> tuple[list[str], list[str]]:
    """A part is complete, a structure part's arrays have the rows its own index says, and no
    shard file is missing that the part needs (see :class:`~featurecache.store.root.PartArrays`):
    its problems, and notes of the missing shard files of an MSA part that none of ``msas`` reads
    (:func:`_missing_shards`; ``msas``: the index rows of the MSAs the store serves from it, None:
    every missing file is a problem)."""
    manifest = part / PART_INDEX_DIR / PART_DONE_FILE
    if not manifest.is_file():
        return [f"part {name}: no {PART_DONE_FILE} (incomplete part)"], []
    if not name.startswith(STRUCTURE_PART_PREFIX):
        return _missing_shards(name, part, msas if name.startswith(MSA_PART_PREFIX) else None)
    problems: list[str] = []
    try:
        m = json.loads(manifest.read_text())
        rows = read_table(part / PART_INDEX_DIR / "entries.arrow", memory_map=False)
    except (
        FeatureCacheError,
        OSError,
        ValueError,
    ) as exc:  # ValueError: bad JSON, pyarrow's ArrowInvalid
        return [f"part {name}: its own index is unreadable ({exc})"], []
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
    return problems, []


def _served_msas(msas: pa.Table) -> dict[str, list[Row]] | None:
    """The store's index rows of the MSAs it serves, by part (where each lies in its part:
    :data:`~featurecache.store.msa.MSA_READ_COLUMNS`); None when the index lacks one of those
    columns or has a null in one (then every missing shard file of an MSA part is a problem)."""
    from featurecache.store.msa import MSA_READ_COLUMNS

    columns = ["part", *MSA_READ_COLUMNS]
    if not set(columns) <= set(msas.column_names) or any(msas.column(c).null_count for c in columns):
        return None
    out: dict[str, list[Row]] = {}
    for row in msas.select(columns).to_pylist():
        out.setdefault(row["part"], []).append(row)
    return out


#: the arrays of an MSA part that its MSAs read (:func:`~featurecache.store.msa.msa_reads`); the
#: ``residues/NNNNNN`` arrays, one per MSA, besides
_MSA_SHARED_ARRAYS = ("rows", "cols", "deletions")


def _missing_shards(name: str, part: Path, msas: list[Row] | None = None) -> tuple[list[str], list[str]]:
    """An MSA or component part that lists its fill-only shards: every other shard file exists.
    (A part from before that list: a missing file cannot be told from an empty shard.)

    Returns the problems, and the notes: with ``msas`` (an MSA part's index rows of the MSAs the
    store serves from it), a missing file that none of them reads (an MSA's ``residues/NNNNNN`` no
    served MSA is, a range of ``rows``/``cols``/``deletions`` outside theirs) is a note. Such an
    array is left by an MSA that ``verify --repair`` or ``prune --sources-gone`` took out of the
    index and a build rebuilt into a newer part: nothing is served from it, and the part goes once
    none of its MSAs is served (``prune``). Before, it was a problem for good after the documented
    repair (review R31a s47 #1). A missing file a served MSA reads is a problem, as is any in an
    array that is not an MSA's."""
    try:
        fill_only = fill_only_shards(part)
    except FeatureCacheError as exc:
        return [str(exc)], []
    if fill_only is None:
        return [], []
    reads: dict[str, list[tuple[slice, ...]]] | None = None
    if msas is not None:
        from featurecache.store.msa import msa_reads

        reads = {}
        for row in msas:
            for array, selection in msa_reads(row).items():
                reads.setdefault(array, []).append(selection)
    problems: list[str] = []
    unused: list[str] = []
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
        lines = {f: f"part {name}: array {array} is missing its data file {f}" for f in missing}
        if reads is None or not (array in _MSA_SHARED_ARRAYS or array.startswith("residues/")):
            problems.extend(lines.values())
            continue
        read = {f for selection in reads.get(array, []) for f in shard_files(part / array, arr, selection)}
        problems.extend(line for f, line in lines.items() if f in read)
        unused.extend(
            f"{line}, which no MSA the store serves reads (the MSAs that did were taken out of the index by "
            "`verify --repair` or `prune --sources-gone`, or rebuilt into a newer part): nothing is served from "
            f"it; `featurecache prune` deletes it with part {name} once none of the part's MSAs is served"
            for f, line in lines.items() if f not in read
        )  # fmt: skip
    return problems, unused


#: the start of :func:`_check_entry`'s one line for an entry of a part a newer featurecache wrote
_NEWER = "newer featurizer: "
#: the start of :func:`_check_entry`'s one line for a sound entry with residue codes the index lists
#: no component of (then the codes, space-separated): not damage of the entry
_NO_COMPONENT = "no component: "
#: the start of the problem line that gathers those (:func:`_no_component_problem`)
NO_COMPONENT_PROBLEM = "components: the index lists no component of residue code(s)"


def _check_entry(
    store: LocalStore, parts: dict[str, Path], row: dict[str, Any], codes: set[str] | None = None
) -> list[str]:
    """The problems of one index row (:func:`_entry_problems`). An entry whose part records a newer
    featurizer than this code's (``part.json``) is not checked by this code's rules: one line
    starting :data:`_NEWER` instead (a newer featurecache's records, with fields this one does not
    know, are refused by the reader: not damage, and ``--repair`` must not remove it). A sound
    entry with a residue code outside ``codes`` (the codes of the index's components): one line
    starting :data:`_NO_COMPONENT`."""
    found = _entry_problems(store, parts, row, codes)
    if found and row["part"] in parts:
        version = _newer_featurizer(store.path, row["part"])
        if version is not None:
            return [f"{_NEWER}entry {row['id']} (part {row['part']}): written by a newer featurecache "
                    f"(featurizer {version}, from the part's part.json; this featurecache is of featurizer "
                    f"{FEATURIZER_VERSION}): not verified; upgrade featurecache to verify it "
                    f"({found[0].removeprefix(UNCHECKED)})"]  # fmt: skip
    return found


def _newer_featurizer(root: Path, part: str) -> str | None:
    """The featurizer version that ``part``'s ``part.json`` records when it is newer than this
    code's (None: not newer, or not a version of dot-separated numbers, or no record)."""
    version, _ = part_record(root, part)

    def key(v: str) -> tuple[int, ...] | None:
        fields = v.split(".")
        return tuple(int(f) for f in fields) if all(f.isdigit() for f in fields) else None

    mine, theirs = key(FEATURIZER_VERSION), key(version)
    return version if mine is not None and theirs is not None and theirs > mine else None


def _entry_problems(
    store: LocalStore, parts: dict[str, Path], row: dict[str, Any], codes: set[str] | None = None
) -> list[str]:
    """The problems of one index row: its part is gone, it does not read, or its hash differs;
    else, with ``codes``, the residue codes of its tokens that are not among them. A read that
    fails by an error that does not say the data is unreadable (:func:`unreadable_data`): one
    :func:`unchecked_line`."""
    if row["part"] not in parts:
        return [f"entry {row['id']}: part {row['part']} is missing"]
    try:
        e = store.entry(row["id"])
        groups = {"atoms": e.atoms, "tokens": e.tokens, "bonds": e.bonds, "interfaces": e.interfaces}
        # the fields its part stores: what the build hashed (the reader derives those added since);
        # read here too: an entry of no bonds (or interfaces) reads none of that array's data, only
        # its metadata here, and a part whose metadata is gone must give a problem line, not end
        # the run (review R28c s46 #1)
        stored = {g: store.stored_fields(row["id"], g) for g in groups}
    except CHECK_ERRORS as exc:
        denied = raised_from(exc, PermissionError)
        if denied is not None:  # not damage: this uid may not read it (--repair must not remove it)
            where = Path(denied.filename) if denied.filename else parts[row["part"]]
            raise StoreError(access_problem(where, store.path)
                             or f"cannot read {where}: {denied.strerror}") from exc  # fmt: skip
        if not unreadable_data(exc):  # a KeyError of a bug in the reader: the entry may be sound
            return [UNCHECKED + unchecked_line(f"entry {row['id']}", exc)]
        # the reader says "entry ID: unreadable (…)" itself, naming the part and the array
        msg = str(exc)
        return [msg if msg.startswith(f"entry {row['id']}: ") else f"entry {row['id']}: unreadable ({msg})"]
    groups = {g: {f: a for f, a in cols.items() if f in stored[g]} for g, cols in groups.items()}
    got = content_hash(groups)
    if got != row["content_hash"]:
        return [
            f"entry {row['id']}: content hash {got[:16]}… != index {row['content_hash'][:16]}… "
            f"(part {row['part']}: {_differing_groups(parts[row['part']], row['id'], groups)})"
        ]
    if codes is not None and len(e.tokens["res_name"]):
        # every residue a chem stage scanned has a component row of its code (a failed one too)
        used = {decode_res_name(u) for u in np.unique(e.tokens["res_name"], axis=0)}
        if not used <= codes:
            return [f"{_NO_COMPONENT}{' '.join(sorted(used - codes))}"]
    return []


def _no_component_problem(no_component: dict[str, list[str]]) -> str:
    """One line for :attr:`VerifyReport.no_component`: the codes, and the entries using them."""
    ids = sorted({i for entry_ids in no_component.values() for i in entry_ids})
    shown = first_named(ids, 10)
    return (f"{NO_COMPONENT_PROBLEM} {', '.join(sorted(no_component))}, used by {len(ids)} "
            f"entr{'y' if len(ids) == 1 else 'ies'} ({shown}): their atoms have no reference conformer "
            "(ref_mask False) until a build's chem stage computes them, which it does after `featurecache verify "
            "--repair` has it scan every structure part again")  # fmt: skip


def _differing_groups(part: Path, entry_id: str, groups: dict[str, dict[str, Any]]) -> str:
    """Which of the entry's array groups hash differently from what its part recorded when it was
    written (``writer.GROUP_HASHES``), as words for the mismatch line; read only on a mismatch."""
    return differing_hashes(part / GROUP_HASHES, "entry_id", entry_id, group_hashes(groups),
                            {g: g for g in ENTRY_GROUPS}, "array group", "entry")  # fmt: skip


def _check_index_contents(store: LocalStore, derived: dict[str, pa.Table], report: VerifyReport,
                          dirs: dict[str, str], parts: dict[str, Path], readable: list[Path]) -> None:  # fmt: skip
    """The index files hold what the parts' own index gives (``derived``: :func:`index_tables`),
    and every chain's ``sequence_hash`` is the hash of its sequence (``store.index_check``; review
    R28c s46 #3). A differing file whose differing rows are all of parts that record their own
    index's checksum (:func:`_records_index_checksum`: their own index is the sound copy), or that
    is missing or unreadable: a problem, and ``--repair`` rewrites the index
    (:attr:`VerifyReport.index_differs`). Differing rows of a part that records none: which copy is
    damaged cannot be told (review R29b s46 #1), so the entries, MSAs and component parts they are
    of are damaged (``--repair`` takes them out, the build rebuilds them from their sources); rows of
    none of those: :attr:`VerifyReport.unsettled`. A chain row of a part that is damaged: its entry
    is damaged.

    A differing file that is exactly what a rebuild from the parts the index's last rebuild recorded
    (``readable`` less the parts written since: :func:`_stale_tables`) gives is a stale index, not a
    damaged one: a build running or stopped before it rebuilt the index after its MSA or chem stage,
    or a copy taken during one (review R36b s49 #4); a build, or ``--repair``, rewrites it."""
    from featurecache.store.index_check import chain_hash_problems, index_differences

    found, layout_notes = index_differences(store.path, derived)
    report.notes.extend(layout_notes)
    report.old_layout = bool(layout_notes)
    unchecked = {n for n, p in parts.items() if not _records_index_checksum(p)}
    stale, newer = _stale_tables(store.path, readable, set(found))
    for name, diff in found.items():
        if name in stale:
            report.index_differs[name] = diff.why  # (--repair rewrites it from the parts, as a build does)
            report.problems.append(
                f"index/{name}.arrow predates part(s) {first_named(newer, 5)}, written after the index was last "
                f"rebuilt: {diff.why} (stale index: a build is running or was stopped, or this is a copy taken "
                "during one: run `featurecache build` on the store)"
            )  # fmt: skip
            continue
        if diff.index_only:
            of = set()
        elif diff.rows is None:  # other columns: any part's rows may be what changed
            of = (
                {r for r in derived[name].column("part").to_pylist()}
                if "part" in derived[name].column_names
                else set(unchecked)
            )
        else:
            of = {r.get("part") for r in diff.rows}
        old = sorted(of & unchecked)
        if not old:
            report.index_differs[name] = diff.why
            report.problems.append(f"index/{name}.arrow differs from the rows of the parts' own index: {diff.why} (the "
                                   "file is damaged or was changed: `featurecache verify --repair` rewrites the index "
                                   "from the parts)")  # fmt: skip
            continue
        undecided = (f"index/{name}.arrow differs from the rows of the parts' own index: {diff.why}; part(s) "
                     f"{', '.join(old)} record no checksum of their own index (written by a featurecache before parts "
                     "recorded one), so the store alone cannot tell which copy is damaged")  # fmt: skip
        owners = _unsettled_owners(store, derived, name, diff.rows, set(old), diff.why, report, dirs)
        if owners is None:
            report.unsettled.append(undecided)
            # a build of this store rewrites its index from the parts too (review R30 s46 #2)
            report.problems.append(f"{undecided}: `featurecache verify --repair` leaves it (a rewrite of the index "
                                   "from the parts would serve the part's copy, and so would a `featurecache build` "
                                   "of this store); compare the part's own index with a copy of the store, or build "
                                   "the store anew into another --out")  # fmt: skip
        else:
            report.problems.append(f"{undecided}: `featurecache verify --repair` takes {owners} out of the index "
                                   "for the next build to rebuild from the sources, and does not copy the parts' rows "
                                   "into the index; run it before any `featurecache build` of this store, which "
                                   "would serve the part's copy")  # fmt: skip
    bad_chains = chain_hash_problems(derived["chains"])
    if bad_chains:
        rows = {r["id"]: r for r in store.entries.to_pylist() if r["id"] in bad_chains}
        for entry_id, why in sorted(bad_chains.items()):
            problem = f"entry {entry_id}: {why} (part {rows[entry_id]['part'] if entry_id in rows else '?'})"
            report.problems.append(problem)
            if entry_id in rows and not any(d.kind == "entry" and d.id == entry_id for d in report.damaged):
                report.damaged.append(_damaged_entry(store.path, rows[entry_id], problem, dirs))


def _stale_tables(root: Path, readable: list[Path], differing: set[str]) -> tuple[set[str], list[str]]:
    """(Which of the ``differing`` index tables are stale, the parts written after the index was
    last rebuilt). The parts a rebuild covered are those its record lists
    (``index/.part-rows/manifest.json``); a differing table is stale when it is exactly what a
    rebuild from the ``readable`` parts it covered gives (a file missing where those give no rows):
    the index of that rebuild, before the parts written since (a build's MSA and chem parts, after
    its structure stage's rebuild). Without the record, or with no part written since: none."""
    from featurecache.store.index import PART_ROWS_DIR, PART_ROWS_MANIFEST
    from featurecache.store.index_check import index_differences
    from featurecache.store.layout import INDEX_DIR

    if not differing:
        return set(), []
    try:
        manifest = json.loads((root / INDEX_DIR / PART_ROWS_DIR / PART_ROWS_MANIFEST).read_text())
        covered = {str(p) for p in manifest["parts"]}
    except (OSError, ValueError, KeyError, TypeError):
        return set(), []
    newer = [p.name for p in readable if p.name not in covered]
    if not newer:
        return set(), []
    try:
        then = index_tables(root, [p for p in readable if p.name in covered])
        still, _ = index_differences(root, {n: t for n, t in then.items() if n in differing})
    except (FeatureCacheError, OSError, ValueError, KeyError):
        return set(), []
    stale = {
        n for n in differing
        if (n in then and n not in still) or (n not in then and not (root / INDEX_DIR / f"{n}.arrow").exists())
    }  # fmt: skip
    return stale, newer


def _unsettled_owners(
    store: LocalStore, derived: dict[str, pa.Table], name: str, rows: list[Row] | None, old: set[str],
    why: str, report: VerifyReport, dirs: dict[str, str],
) -> str | None:  # fmt: skip
    """Take the entries, MSAs and component parts that the differing ``rows`` of index table
    ``name`` are of, in the parts ``old`` (which record no checksum of their own index), as damaged
    ones into ``report`` (``why``: how the table differs); returns them in words, or None when some such row is of none of them (or
    the rows cannot be told: other columns), and then takes none."""
    if rows is None:
        return None
    entry_ids: set[str] = set()
    msa_keys: set[str] = set()
    component_parts: set[str] = set()
    for r in rows:
        part = r.get("part")
        if part not in old:
            continue
        if part.startswith(COMPONENT_PART_PREFIX):
            component_parts.add(part)
        elif part.startswith(STRUCTURE_PART_PREFIX) and r.get("entry_id" if name != "entries" else "id"):
            entry_ids.add(r["entry_id" if name != "entries" else "id"])
        elif name == "msas" and r.get("key"):
            msa_keys.add(r["key"])
        else:  # a failure's, a removal's, ... row: nothing a build rebuilds
            return None
    # the rows as the parts give them (an id or key only the index file holds: its row goes with
    # the rewrite of the index that the removal makes)
    entry_rows = {r["id"]: r for r in derived["entries"].to_pylist() if r["id"] in entry_ids}
    msa_rows = {r["key"]: r for r in derived["msas"].to_pylist() if r["key"] in msa_keys} if msa_keys else {}

    def problem(what: str, part: str) -> str:
        return (f"{what}: its rows in index/{name}.arrow differ from part {part}'s own index ({why}), which records "
                "no checksum of it: the store alone cannot tell which copy is damaged")  # fmt: skip

    taken = {(d.kind, d.id) for d in report.damaged}
    for entry_id, row in sorted(entry_rows.items()):
        if ("entry", entry_id) not in taken:
            d = _damaged_entry(store.path, row, problem(f"entry {entry_id}", row["part"]), dirs)
            d.unsettled = True
            report.damaged.append(d)
    for key, row in sorted(msa_rows.items()):
        if ("msa", key) not in taken:
            d = _damaged_msa(
                store.path, row, problem(f"MSA {key[:12]}…", row["part"]), store.chains, store.entries, dirs
            )
            d.unsettled = True
            report.damaged.append(d)
    for part in sorted(component_parts):
        report.damaged_component_parts.setdefault(part, problem(f"part {part}", part))
    named = [*sorted(entry_rows), *(f"MSA {k[:12]}…" for k in sorted(msa_rows)),
             *(f"component part {p}" for p in sorted(component_parts))]  # fmt: skip
    return ", ".join(named) if named else None


def _index_matches_parts(entries: pa.Table, live: pa.Table, unlisted: set[str]) -> list[str]:
    """The index's entries are exactly the live entries of the parts (``live``: the entries a
    rebuild from the parts whose own index reads gives; a killed build can leave the top-level
    index behind its parts; a build on the store rebuilds it). The index gives them as a rebuild
    from those parts would (less what prune --sources-gone or verify --repair removed)."""
    in_parts = set(zip(live.column("id").to_pylist(), live.column("part").to_pylist(), strict=True))
    in_index = set(zip(entries.column("id").to_pylist(), entries.column("part").to_pylist(), strict=True))
    hidden = {i for i, p in in_index if p in unlisted}  # an earlier version shows through: not stale
    out = [f"entry {i} of part {p} is not in the index (stale index: run `featurecache build` on the store "
           "to rebuild it)" for i, p in sorted(in_parts - in_index) if i not in hidden]  # fmt: skip
    # (the entries of a part whose own index is unreadable: that part's line says so)
    out += [f"index entry {i} points at part {p}, which does not hold it as its latest version"
            for i, p in sorted(in_index - in_parts) if p not in unlisted]  # fmt: skip
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


def _unreadable_component_parts(root: Path, parts: dict[str, Path], unchecked: list[str]) -> dict[str, str]:
    """Component parts whose ``atoms`` or ``bonds`` array does not read back whole (why). One whose
    read fails by an error that does not say the data is unreadable (:func:`unreadable_data`) is
    not among them: its line goes to ``unchecked`` (``--repair`` must not move a sound part aside)."""
    from featurecache.store.root import PartArrays

    arrays = PartArrays(root, "component part array")
    out: dict[str, str] = {}
    for name in parts:
        if not name.startswith(COMPONENT_PART_PREFIX):
            continue
        for array in ("atoms", "bonds"):
            try:
                arrays.read(name, array, (slice(None),))
            except CHECK_ERRORS as exc:
                if unreadable_data(exc):
                    out[name] = str(exc)
                else:
                    unchecked.append(unchecked_line(f"component part {name}", exc))
                break
    return out


def _check_component_contents(store: LocalStore, report: VerifyReport) -> None:
    """Every served reference conformer reads back to the content hash its writer recorded
    (``components.component_content_hash``): a changed one is a problem and its part is damaged
    (``--repair`` moves it aside, the next build's chem stage recomputes its components); the
    components of parts written before the hash was recorded are named in a note."""
    from featurecache.store.components import component_content_problems

    try:
        found = component_content_problems(store.path, store.components)
    except CHECK_ERRORS as exc:
        if unreadable_data(exc):
            report.problems.append(f"components: content not checked ({type(exc).__name__}: {exc})")
        else:  # a bug in the reader, not damage: --repair keeps it (review R32a s47 #4)
            report.unchecked.append(unchecked_line("component contents", exc))
            report.problems.append(report.unchecked[-1])
        return
    report.problems.extend(found.problems)
    report.damaged_component_parts.update(
        (n, why) for n, why in found.damaged_parts.items() if n not in report.bad_index_parts
    )
    if found.unrecorded:
        n = sum(found.unrecorded.values())
        report.notes.append(f"{n} component{'s' if n != 1 else ''} of part(s) {', '.join(sorted(found.unrecorded))} "
                            "record no content hash (written by a featurecache before it was recorded): their "
                            "reference conformers are checked for readability only")  # fmt: skip


def _component_checks(store: object) -> list[str]:
    """Every component row's part exists and its arrays read. A load of the component table that
    an error stops that does not say the data is unreadable (:func:`unreadable_data`) gives its
    :func:`unchecked_line` after :data:`UNCHECKED`, as a per-row check does."""
    from featurecache.store.components import load_component_table, scanned_structure_parts

    out: list[str] = []
    try:
        load_component_table(store.path, store.components)  # type: ignore[attr-defined]
    except CHECK_ERRORS as exc:
        msg = str(exc)
        if not unreadable_data(exc):  # a bug in the reader ("components: unreadable" would move parts)
            out.append(UNCHECKED + unchecked_line("components", exc))
        else:
            out.append(msg if msg.startswith("components: ") else f"components: {msg}")
    # every build's chem stage scans the structure parts it wrote; one not scanned (its component
    # part was moved aside by --repair) may use components the store no longer holds
    root = Path(store.path)  # type: ignore[attr-defined]
    try:
        if any(p.name.startswith(COMPONENT_PART_PREFIX) for p in complete_parts(root)):
            served = set(store.entries.column("part").to_pylist())  # type: ignore[attr-defined]
            unscanned = sorted(served - scanned_structure_parts(root))
            if unscanned:
                out.append(f"components: the entries of part(s) {', '.join(unscanned)} have not been scanned "
                           "by a build's chem stage, so components they use may be missing: run `featurecache "
                           "build` on the store with the options it was built with (its chem stage computes them)")  # fmt: skip
    except (FeatureCacheError, OSError, ValueError, KeyError):
        pass  # an unreadable part index is reported by the parts check
    return out


#: further checks run after the MSAs: (what they check, callable(store) -> list[str]); a line
#: that starts with :data:`UNCHECKED` is not damage (``VerifyReport.unchecked``)
_EXTRA_CHECKS: list[tuple[str, Callable[[Any], list[str]]]] = [
    ("components", _component_checks),
]


#: where ``verify --repair`` moves a part whose own index is unreadable (nothing is deleted)
DAMAGED_PARTS_DIR = "damaged-parts"


@dataclass
class RepairResult:
    """What :func:`repair_store` did (``report``: the verify it acted on)."""

    report: VerifyReport
    #: the damaged entries and MSAs taken out of the index (the next build rebuilds them)
    removed: list[Damaged] = field(default_factory=list)
    #: damaged ones left as they are: their source files are gone (or cannot be found)
    kept: list[Damaged] = field(default_factory=list)
    #: part whose own index is unreadable → where it was moved
    moved_parts: dict[str, Path] = field(default_factory=dict)
    #: such parts left in place: (part, why)
    kept_parts: list[tuple[str, str]] = field(default_factory=list)
    #: the parts written (removal rows; an empty stand-in of each moved part), the index files
    #: rewritten because they differed from the parts (``index/<name>.arrow``), and the group
    #: metadata files written because they were missing (their paths)
    written: list[str] = field(default_factory=list)
    #: entries / MSAs a moved part had removed (``prune --sources-gone``), removed again
    removed_again: list[str] = field(default_factory=list)
    #: the rows of parts that are gone (deleted) which the index listed and the repair's rewrite of
    #: the index dropped, other than the damaged entries' and MSAs' (``removed``, with theirs):
    #: index table ("failures", "components", ...) → part → the rows' ids (a path, a key, ...)
    dropped: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    #: the component parts among them: a written rescan part has the next build's chem stage
    #: recompute their components (``rescan``: its name)
    dropped_component_parts: list[str] = field(default_factory=list)
    rescan: str = ""
    #: the index tables rewritten from the parts' own index (they differed from it, or were of an
    #: older layout): their ``index/<name>.arrow`` are among ``written``
    rewrote_index: list[str] = field(default_factory=list)
    #: after a repair that wrote, what verify finds in the store: ``left``, the problems it found
    #: before too (the repair could not fix them); ``pending``, new ones, the state the repair
    #: leaves for the build it prints (a rescan part's "not scanned")
    left: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    #: why nothing was changed although some damage could be repaired ("": not so): kept ones of a
    #: part that is gone (any rewrite of the index drops them); ``removed`` and ``moved_parts`` are
    #: then empty, ``would_remove``, ``would_move`` and ``would_drop`` (component parts that are
    #: gone) say what a repair would have done
    blocked: str = ""
    would_remove: list[Damaged] = field(default_factory=list)
    would_move: list[str] = field(default_factory=list)
    would_drop: list[str] = field(default_factory=list)


def repair_store(
    path: Path, *, drop_gone: bool = False, progress: bool = False, workers: int | None = None
) -> RepairResult:
    """``featurecache verify --repair``: verify (holding the build lock), then take every damaged
    entry and MSA out of the index the way ``prune --sources-gone`` does (:data:`REMOVED` rows of
    a new part; parts never change), so that the next build from their sources rebuilds exactly
    those, and ``prune`` later deletes the parts that hold nothing else. A part whose own index is
    unreadable is moved to ``STORE/damaged-parts/`` (an empty part of the same name stands in, so
    the number is not reused) and the next build rebuilds its entries.

    One whose source files are gone cannot be rebuilt: it is kept (and listed) unless
    ``drop_gone``. An entry or MSA whose part is gone altogether is damaged too: taken out when
    its files are under the directory the store's latest build recorded (its part's record is gone
    with it); kept otherwise. The index is rewritten from the parts, which drops the rows of a part
    that is gone, so while such a one is kept the repair changes nothing (``blocked`` says why):
    it never takes out silently what it says it keeps. The other rows of parts that are gone
    (failures, components, ...) go with any write too: ``dropped`` names them, and a component
    part that is gone is repaired as a damaged one is (the next build's chem stage recomputes its
    components). After a write the store is verified again (``left``, ``pending``; the entries and
    MSAs found sound are not read again). Raises StoreError (nothing changed) when the store cannot
    be written."""
    from featurecache.store.prune import (
        _listed_of_missing_parts,
        _removal_parts,
        write_removal_parts,
        write_removals,
    )
    from featurecache.store.root import BuildLock

    root = Path(path)
    with stopped_by_sigterm(lambda: _stopped_repair_line(root), log), BuildLock(root, "verify --repair"):
        # what a killed prune or repair left (its copy of the index, parts set aside to delete):
        # whoever wrote it is dead while this holds the lock (store.leftovers)
        clean_leftovers(root)
        sound: set[tuple[Any, ...]] = set()
        report = verify_report(root, progress, workers, sound)
        result = RepairResult(report)
        # group metadata that is gone: written as zarr writes it (a file of fixed content)
        result.written += _write_groups(report.missing_groups)
        for d in report.damaged:
            (result.removed if d.source_gone is False or drop_gone else result.kept).append(d)
        store = open_store(root) if report.bad_index_parts else None
        to_move: list[str] = []
        for name, why in report.bad_index_parts.items():
            gone = _gone_in_part(root, store, name) if store is not None else []
            if gone and not drop_gone:
                result.kept_parts.append((name, f"{why}; the source files of {', '.join(gone)} are gone"))
                continue
            to_move.append(name)
        # a component part whose arrays do not read: moved aside too (its components are recomputed);
        # one that is gone: its rows dropped, as the move drops a moved one's
        gone_components = [n for n in report.damaged_component_parts if not (root / "parts" / n).is_dir()]
        to_move += [
            n for n in report.damaged_component_parts if n not in to_move and n not in gone_components
        ]
        # residue codes the index lists no component of (their part's rows dropped already): the
        # chem stage, which has scanned every structure part, computes them only after a rescan
        rescan_all = bool(report.no_component)
        lost = [d for d in result.kept if d.part_gone or d.unsettled]
        # (index files unlike their parts: review R28c s46 #3; of an older layout: review R29b s46 #2)
        rewrite_index = bool(report.index_differs) or report.old_layout
        # an index difference of a part that records no checksum of its own index, kept: any write
        # rebuilds the index from the parts, which would serve the part's copy (review R29b s46 #1)
        if (lost or report.unsettled) and (
            result.removed or to_move or gone_components or rescan_all or rewrite_index
        ):
            # any write rebuilds the index from the parts: the kept rows of a gone part would go too
            result.blocked = _blocked(root, lost, report.unsettled)
            result.would_remove, result.removed = result.removed, []
            result.would_move, to_move = to_move, []
            result.would_drop, gone_components = gone_components, []
            rescan_all = rewrite_index = False
        if (
            rewrite_index
            and any(d.unsettled for d in result.removed)
            and not (to_move or gone_components or rescan_all)
        ):
            # the index the removals write (below) is rewritten whole, without the rows they take
            # out; a rewrite first would serve the parts' copy of those rows until then
            rewrite_index = False
        # the rows of parts that are gone: any write below drops them (said after it)
        missing = _listed_of_missing_parts(root) if not result.blocked else {}
        # what the index lists before any part moves (a moved part may have held removals)
        listed = (set(store.ids), set(store.msas.column("key").to_pylist()) if "key" in store.msas.column_names
                  else set()) if store is not None else (set(), set())  # fmt: skip
        entries = [_removal_row(d) for d in result.removed if d.kind == "entry"]
        msas = [_removal_row(d) for d in result.removed if d.kind == "msa"]
        removals: list[str] = []  # the removal parts written before the index is rewritten whole
        if to_move or gone_components or rescan_all or rewrite_index:
            from featurecache.store.index import rebuild_index
            from featurecache.store.prune import drop_saved_index, restore_index, save_index

            saved = save_index(root)
            rescan: list[str] = []
            try:
                for name in to_move:
                    result.moved_parts[name] = _move_part(root, name)
                result.written += _stand_ins(root, result.moved_parts)
                if (
                    gone_components
                    or rescan_all
                    or any(n.startswith(COMPONENT_PART_PREFIX) for n in result.moved_parts)
                ):
                    from featurecache.store.components import write_rescan_part

                    # the remaining component parts recorded the structure parts the moved one
                    # computed components for as scanned: this part makes the next build's chem
                    # stage scan them all again (only missing components are computed)
                    rescan.append(write_rescan_part(root))
                    result.written += rescan
                    result.rescan = rescan[0]
                if entries or msas:
                    # before the rewrite, so that the one index it publishes applies them: a rewrite
                    # first served an unsettled entry's rows from its part's copy until the removals
                    # were written, and for good had the repair stopped there (review R30 s46 #3)
                    _extra, names = _removal_parts(root, entries, msas)
                    write_removal_parts(root, names, entries, msas, _common_dir(result.removed, "entry"),
                                        _common_dir(result.removed, "msa"), removals)  # fmt: skip
                rebuild_index(root, incremental=False)
                if rewrite_index:
                    layout = [n for n in _LAYOUT_TABLES if (root / "index" / f"{n}.arrow").is_file()]
                    result.rewrote_index = sorted(
                        set(report.index_differs) | set(layout if report.old_layout else [])
                    )
                    result.written += [f"index/{name}.arrow" for name in result.rewrote_index]
                    log.warning("rewrote %s from the parts' own index: %s", root / "index",
                                "; ".join([*(f"{n}.arrow {why}" for n, why in report.index_differs.items()),
                                           *(["in today's layout"] if report.old_layout else [])]))  # fmt: skip
            except (OSError, StoreError) as exc:
                for name, where in result.moved_parts.items():
                    stand_in = root / "parts" / name
                    if stand_in.is_dir():
                        shutil.rmtree(stand_in, ignore_errors=True)
                    with contextlib.suppress(OSError):
                        where.rename(stand_in)
                for name in [*rescan, *removals]:
                    shutil.rmtree(root / "parts" / name, ignore_errors=True)
                restored = restore_index(saved)
                what = (
                    "nothing changed" if restored else "the index could not be put back (see the ERROR above)"
                )
                if isinstance(exc, StoreError):
                    raise StoreError(f"{exc}; {what}") from exc
                raise StoreError(f"cannot write the store at {exc.filename or root}: {exc.strerror or exc}; "
                                 f"{what}") from exc  # fmt: skip
            drop_saved_index(saved)
            result.written += removals
        if result.moved_parts and store is not None:
            _remove_again(root, listed, result)
        if (entries or msas) and not removals:
            _extra, names = _removal_parts(root, entries, msas)
            write_removals(root, names, entries, msas, _common_dir(result.removed, "entry"),
                           _common_dir(result.removed, "msa"))  # fmt: skip
            result.written += names
        if result.written:
            result.dropped_component_parts = gone_components
            result.dropped = {t: rows for t, rows in _by_table(missing).items() if t not in _WITH_THEIR_ROWS}
            after = verify_report(root, progress, workers, sound)
            before = set(report.problems)
            # (codes without a component, once a rescan part is written: the build computes them)
            fixed = (NO_COMPONENT_PROBLEM,) if result.rescan else ()
            result.left = [p for p in after.problems if p in before and not p.startswith(fixed)]
            result.pending = [p for p in after.problems if p not in result.left]
    return result


#: index tables whose rows go with an entry's, an MSA's or a component's (named as those are), or
#: are a run record: not named among a repair's ``dropped`` rows
_WITH_THEIR_ROWS = {"entries", "msas", "chains", "interfaces", "warnings", "timings", "component_timings"}


def _by_table(missing: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
    """``prune._listed_of_missing_parts``' part → table → ids, as table → part → ids."""
    out: dict[str, dict[str, list[str]]] = {}
    for part, tables in sorted(missing.items()):
        for table, ids in sorted(tables.items()):
            out.setdefault(table, {})[part] = ids
    return out


#: the index files of an older layout's run records (``index_check.LEGACY_SECONDS``) a rewrite changes
_LAYOUT_TABLES = ("entries", "components", "timings", "component_timings")


def _blocked(root: Path, lost: list[Damaged], unsettled: list[str] | None = None) -> str:
    """Why a repair changed nothing: the kept ``lost`` (of parts that are gone) would have gone
    too, or the kept index differences of parts that record no checksum of their own index (those
    of ``lost`` with ``unsettled``, and the ``unsettled`` lines) would be served from the parts."""
    if unsettled or any(d.unsettled for d in lost):
        kept = [d for d in lost if d.unsettled]
        names = ", ".join(d.id if d.kind == "entry" else f"MSA {d.id[:12]}…" for d in kept)
        what = (f"the source files of {names} are gone, so they cannot be taken out for a build to rebuild"
                if kept else "rows of no entry, MSA or component differ")  # fmt: skip
        return (f"nothing changed: the index differs from the own index of parts that record no checksum of it, "
                f"and {what}; a repair rewrites the index from the parts, which would serve the parts' copy, "
                "which may be the damaged one" + (f": take them out with `featurecache verify {shlex.quote(str(root))} "
                "--repair --drop-gone`" if kept and not unsettled else ""))  # fmt: skip
    parts = ", ".join(sorted({d.part for d in lost}))
    names = ", ".join(d.id if d.kind == "entry" else f"MSA {d.id[:12]}…" for d in lost)
    return (f"nothing changed: the index lists {names} of part(s) {parts}, which are missing, and their source "
            "files are gone; a repair rewrites the index from the parts, which would drop them as well: put the "
            f"part(s) back, or take them out too with `featurecache verify {shlex.quote(str(root))} --repair "
            "--drop-gone`")  # fmt: skip


def _remove_again(root: Path, listed: tuple[set[str], set[str]], result: RepairResult) -> None:
    """A moved part may have held removals (``prune --sources-gone``'s rows): the entries and MSAs
    the index now lists that it did not list before the part was moved are removed again (a new
    removal part), so that the repair brings back nothing a prune had removed."""
    from featurecache.store.prune import _removal_parts, write_removals

    after = open_store(root)
    ids, keys = listed
    moved = ", ".join(result.moved_parts)
    why = f"removed before; the part recording its removal ({moved}) was moved aside by verify --repair"
    entries = [{"kind": "entry", "id": r["id"], "key": r["key"], "source_path": r["source_path"], "message": why}
               for r in after.entries.select(["id", "key", "source_path"]).to_pylist() if r["id"] not in ids]  # fmt: skip
    msas = []
    if "key" in after.msas.column_names:
        for r in after.msas.select(["key", "inputs_key", "sources"]).to_pylist():
            if r["key"] not in keys:
                paths = sorted({src.split("#", 1)[0] for src in r["sources"] or []})
                msas.append({"kind": "msa", "id": r["key"], "key": r["inputs_key"],
                             "source_path": "; ".join(paths), "message": why})  # fmt: skip
    if not entries and not msas:
        return
    _extra, names = _removal_parts(root, entries, msas)
    write_removals(root, names, entries, msas, "", "")
    result.written += names
    result.removed_again += [e["id"] for e in entries] + [f"MSA {m['id'][:12]}…" for m in msas]


def rebuild_command(root: Path, damaged: list[Damaged], parts: Iterable[str] = ()) -> str:
    """The ``featurecache build`` that rebuilds ``damaged`` once repaired: the directories they
    were built from; the ``--pdb-dir`` of the store's latest structure part when none of them
    records one (damaged component parts record none); the ``--msa-dir`` of the store's latest MSA
    part when none of them is an MSA (a build without it would give their chains single-sequence
    MSAs); the options the store
    records in its config (``--msa-depth``, ``--conformer-timeout``: a build with other ones would
    rebuild what is not damaged); paths quoted for a shell. ``--ccd``: the path the store's latest
    build recorded (``info.BUILD_INPUTS_KEY``) when it still holds a CCD of the recorded fingerprint;
    else, or for a store that recorded none, ``--ccd CCD`` stands for it (:func:`rebuild_note`
    says why, naming the recorded path)."""
    from featurecache.store.layout import MSA_PART_PREFIX

    dirs: dict[str, str] = {}
    pdb = {d.pdb_dir for d in damaged if d.pdb_dir}
    msa = {d.source_dir for d in damaged if d.kind == "msa" and d.source_dir}
    for name in parts:  # moved aside (own index unreadable): the directory its manifest recorded
        src = _source_dir(root, name, dirs)
        if src:
            (msa if name.startswith(MSA_PART_PREFIX) else pdb).add(src)
    if not msa:
        for part in reversed(complete_parts(root)):
            if part.name.startswith(MSA_PART_PREFIX) and _source_dir(root, part.name, dirs):
                msa = {_source_dir(root, part.name, dirs)}
                break
    if not pdb:  # only components damaged (their parts record no directory): the store's structures'
        pdb = {_latest_structure_dir(root, dirs)} - {""}
    args = ["--pdb-dir", shlex.quote(next(iter(pdb))) if len(pdb) == 1 else "PDB_DIR"]
    if msa:
        args += ["--msa-dir", shlex.quote(next(iter(msa))) if len(msa) == 1 else "MSA_DIR"]
    args += ["--out", shlex.quote(str(root))]
    options, _unknown = _build_options(
        root, _rebuilt_msa_dirs(root, damaged, parts), _unsettled_msas(damaged)
    )
    return " ".join(["featurecache", "build", *args, *options])


def _latest_structure_dir(root: Path, dirs: dict[str, str]) -> str:
    """The ``--pdb-dir`` the store's latest structure part recorded, else the one its latest build
    recorded (``info`` shows it); "" when neither is known."""
    for part in reversed(complete_parts(root)):
        if part.name.startswith(STRUCTURE_PART_PREFIX) and _source_dir(root, part.name, dirs):
            return _source_dir(root, part.name, dirs)
    return _recorded_dir(root, "pdb_dir")


def rebuild_note(root: Path, damaged: list[Damaged] | None = None, parts: Iterable[str] = ()) -> str:
    """What :func:`rebuild_command` (of the same ``damaged`` and ``parts``) cannot fill in from the
    store, or chose against what the store records ("" when nothing). ``damaged`` None: the
    ``--msa-depth`` check looks at every MSA of the store built from files."""
    msa_dirs = None if damaged is None else _rebuilt_msa_dirs(root, damaged, parts)
    _options, unknown = _build_options(root, msa_dirs, _unsettled_msas(damaged or []))
    return "; ".join(unknown)


def _unsettled_msas(damaged: list[Damaged]) -> set[str]:
    """The keys of the unsettled MSAs of ``damaged``: their own rows may be the damaged copy, so
    their ``depth`` does not decide the ``--msa-depth`` of the rebuild (:func:`msas_from_files`)."""
    return {d.id for d in damaged if d.kind == "msa" and d.unsettled}


def _rebuilt_msa_dirs(root: Path, damaged: list[Damaged], parts: Iterable[str]) -> set[str] | None:
    """The ``--msa-dir`` :func:`rebuild_command` prints for them (an empty set: none; None: it
    cannot name one, ``MSA_DIR``): the MSAs built from that directory's files are the ones its
    build rebuilds at the ``--msa-depth`` it is given, whichever entries are damaged."""
    from featurecache.store.layout import MSA_PART_PREFIX

    dirs: dict[str, str] = {}
    msa = {d.source_dir for d in damaged if d.kind == "msa" and d.source_dir}
    for name in parts:
        if name.startswith(MSA_PART_PREFIX) and _source_dir(root, name, dirs):
            msa.add(_source_dir(root, name, dirs))
    if not msa:
        for part in reversed(complete_parts(root)):
            if part.name.startswith(MSA_PART_PREFIX) and _source_dir(root, part.name, dirs):
                return {_source_dir(root, part.name, dirs)}
    return msa if len(msa) <= 1 else None


def changed_by_cap(rows: list[dict[str, Any]], cap: int) -> list[dict[str, Any]]:
    """The MSAs of ``rows`` (:func:`msas_from_files`) that a build at ``--msa-depth cap`` rebuilds to
    other rows than they hold: ``min(n_distinct, cap) != depth``."""
    return [r for r in rows if min(r["n_distinct"], cap) != r["depth"]]


def msas_from_files(
    root: Path, msa_dirs: set[str] | None, untrusted: Collection[str] = ()
) -> list[dict[str, Any]] | None:
    """The stored MSAs built from files (``key``, ``part``, ``depth``, ``n_distinct``, ``n_files``),
    of the MSA parts whose recorded ``--msa-dir`` is in ``msa_dirs`` (None: any; a part that recorded
    none counts as any's): those a build from that directory rebuilds at the ``--msa-depth`` it is
    given. A cap c rebuilds such an MSA of unchanged files to the rows it holds exactly when
    ``min(n_distinct, c) == depth``. None when the store's MSA tables cannot tell.

    An MSA whose removal is in effect, and those of ``untrusted`` (keys: the unsettled MSAs verify
    found, which ``--repair`` takes out), are left out: their rows are not what the store serves,
    and an unsettled one's ``depth`` may be the damaged copy (an 838-row MSA whose row said 837 asked
    for ``--msa-depth 837``, and that build cut it: review R30 s46 #1)."""
    from featurecache.store.index import REMOVED, without_removed
    from featurecache.store.layout import MSA_PART_PREFIX
    from featurecache.store.msa import latest_msas

    # the MSA parts' own rows, not the index's: the index drops an MSA no listed chain uses, and
    # after ``verify --repair`` took a damaged entry out, its chains' MSAs are listed by no chain
    # (the build rebuilds them at the cap it is given unless they are still stored)
    columns = ["key", "part", "depth", "n_distinct", "n_files"]
    own = []
    removals = []
    for part in complete_parts(Path(root)):
        with contextlib.suppress(StoreError, KeyError, pa.ArrowInvalid):
            r = part / PART_INDEX_DIR / f"{REMOVED}.arrow"
            if r.is_file():
                t = read_table(r, memory_map=False).select(["kind", "id"])
                removals.append(t.append_column("part", pa.array([part.name] * t.num_rows, pa.string())))
        f = part / PART_INDEX_DIR / "msas.arrow"
        if part.name.startswith(MSA_PART_PREFIX) and f.is_file():
            with contextlib.suppress(StoreError, KeyError):
                t = read_table(f, memory_map=False)
                if t.num_rows:
                    own.append(t.append_column("part", pa.array([part.name] * t.num_rows)) if "part" not in
                               t.column_names else t)  # fmt: skip
    try:
        msas = pa.concat_tables([t.select(columns) for t in own]) if own else None
        if msas is not None and removals:
            msas = without_removed(msas, "key", pa.concat_tables(removals), "msa")
        rows = latest_msas(msas).to_pylist() if msas is not None else []
    except (KeyError, pa.ArrowInvalid):
        return None
    dirs: dict[str, str] = {}
    skip = set(untrusted)
    return [r for r in rows if r["n_files"] and r["depth"] is not None and r["n_distinct"] is not None
            and r["key"] not in skip
            and (msa_dirs is None or _source_dir(root, r["part"], dirs) in msa_dirs | {""})]  # fmt: skip


def _depth_option(
    root: Path, cap: int, msa_dirs: set[str] | None, untrusted: Collection[str] = ()
) -> tuple[list[str], list[str]]:
    """``--msa-depth`` for a rebuild that reads ``msa_dirs`` (None: any directory), and a note when
    the recorded ``cap`` is not the one that built the MSAs it rebuilds. The root config records the
    LATEST build's cap (an extension from another --pdb-dir with another --msa-depth overwrites it),
    and the store keeps no cap per MSA (it is hashed into the MSA's inputs key); but msas.arrow keeps
    each MSA's stored ``depth`` and its ``n_distinct`` rows before the cap, and a cap c rebuilds an
    MSA of unchanged files to the same rows exactly when min(n_distinct, c) == depth. When the
    recorded cap would change one (cut an undamaged 836-row MSA to 100 rows, review R3 s24 #4), the
    option keeps them all: the default cap when it does (the option left out), else their single
    cut depth; with no such value, ``--msa-depth DEPTH`` and a note. Each case is named in a note."""
    from featurecache.const import DEFAULT_MSA_DEPTH_CAP

    recorded = [] if cap == DEFAULT_MSA_DEPTH_CAP else ["--msa-depth", str(cap)]
    if msa_dirs == set():  # no --msa-dir: the build rebuilds no MSA from files
        return recorded, []
    rows = msas_from_files(root, msa_dirs, untrusted)
    if rows is None:
        return recorded, []

    def changed(c: int) -> list[dict[str, Any]]:
        return changed_by_cap(rows, c)

    bad = changed(cap)
    if not bad:
        return recorded, []
    deepest = max(r["depth"] for r in bad)
    where = f" from {next(iter(msa_dirs))}" if msa_dirs else ""
    why = (f"the store records --msa-depth {cap}, its latest build's, which would rebuild {len(bad)} stored "
           f"MSA(s){where} to other rows than they hold (up to {deepest} rows)")  # fmt: skip
    cut = sorted({r["depth"] for r in rows if r["n_distinct"] > r["depth"]})
    for c in [DEFAULT_MSA_DEPTH_CAP, *cut[-1:]]:
        if not changed(c):
            if c == DEFAULT_MSA_DEPTH_CAP:
                return [], [f"--msa-depth left at the default {c}: {why}; {c} keeps them ({deepest} rows is a "
                            "lower bound on the cap they were built with)"]  # fmt: skip
            return ["--msa-depth", str(c)], [
                f"--msa-depth {c}: {why}; {c} keeps them (they were cut to {c} rows)"
            ]
    return ["--msa-depth", "DEPTH"], [
        f"DEPTH: {why}, and no one cap keeps them all (cut depths {', '.join(map(str, cut)) or 'none'}): give the "
        f"--msa-depth of the build that made them, at least {deepest}"
    ]


def _build_options(
    root: Path, msa_dirs: set[str] | None = None, untrusted: Collection[str] = ()
) -> tuple[list[str], list[str]]:
    """The build options the store's config records, as arguments (those left at their defaults
    omitted), and what it cannot tell (a line each). ``--msa-depth``: :func:`_depth_option` for a
    rebuild reading ``msa_dirs``, the MSAs of ``untrusted`` (keys) left out."""
    from featurecache.build.config import BuildConfig
    from featurecache.const import DEFAULT_MSA_DEPTH_CAP
    from featurecache.store.info import recorded_build_inputs

    try:
        attrs = json.loads((Path(root) / "zarr.json").read_text()).get("attributes", {})
        config = attrs.get("config") or {}
    except (OSError, ValueError, AttributeError):
        attrs, config = {}, {}
    if not isinstance(config, dict) or "msa_depth_cap" not in config:
        return [], [
            "the store records no build options: run it with the options of the build that made the store"
        ]
    out: list[str] = []
    unknown: list[str] = []
    defaults = BuildConfig()
    depth, depth_notes = _depth_option(
        root, config.get("msa_depth_cap", DEFAULT_MSA_DEPTH_CAP), msa_dirs, untrusted
    )
    out += depth
    unknown += depth_notes
    timeout = config.get("conformer_timeout_s", defaults.conformer_timeout_s)
    if timeout != defaults.conformer_timeout_s:
        out += ["--conformer-timeout", f"{timeout:g}"]
    if config.get("keep_crystallization_aids") is True:
        out.append("--keep-cryst-aids")
    recorded = recorded_build_inputs(attrs if isinstance(attrs, dict) else {})
    if recorded["recorded"]:
        ccd = recorded["ccd"]
        if ccd is not None:
            why = _recorded_ccd_differs(ccd["path"], ccd["fingerprint"])
            if why is None:
                out += ["--ccd", shlex.quote(ccd["path"])]
            else:
                out += ["--ccd", "CCD"]
                unknown.append(f"CCD: the --ccd the store was built with; it recorded {ccd['path']}, which {why}: "
                               "give the CCD of that build (another one rebuilds the entries whose definitions it changes)")  # fmt: skip
        return out, unknown
    try:
        cfg = BuildConfig(**{k: v for k, v in config.items() if k in BuildConfig.__dataclass_fields__})
        with_ccd = attrs.get("entry_config_hash") not in (None, cfg.entry_config_hash(""))
    except (TypeError, ValueError):
        with_ccd = True
    if with_ccd:
        out += ["--ccd", "CCD"]
        unknown.append("CCD: the --ccd the store was built with (the store does not record its path; "
                       "run it with the options of the build that made the store)")  # fmt: skip
    return out, unknown


def _recorded_ccd_differs(path: str, fingerprint: str) -> str | None:
    """Why the CCD a store recorded (``path``, ``fingerprint``) cannot be passed to its rebuild as
    it is ("is gone", "has changed since: ..."), or None when the path still holds the same CCD."""
    from featurecache.build.run import ccd_fingerprint

    where = Path(path)
    if not where.exists():
        return "is gone"
    try:
        now = ccd_fingerprint(where)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if now != fingerprint:
        return f"has changed since (fingerprint {now}, the build's {fingerprint})"
    return None


def _removal_row(d: Damaged) -> dict[str, str]:
    return {"kind": d.kind, "id": d.id, "key": d.key, "source_path": d.source_path,
            "message": f"damaged, taken out by verify --repair for the next build to rebuild: {d.problem}",
            "chains": d.chains}  # fmt: skip


def _common_dir(damaged: list[Damaged], kind: str) -> str:
    """The source directory all of them recorded ("" if they differ: the removal part records none)."""
    dirs = {d.source_dir for d in damaged if d.kind == kind}
    return dirs.pop() if len(dirs) == 1 else ""


def _gone_in_part(root: Path, store: LocalStore, part: str) -> list[str]:
    """The ids of the index's entries in ``part`` whose source files are gone (or cannot be found)."""
    rows = [r for r in store.entries.select(["id", "source_path", "part"]).to_pylist() if r["part"] == part]
    dirs: dict[str, str] = {}
    src = _source_dir(root, part, dirs)
    return [r["id"] for r in rows if _gone(src, [r["source_path"]]) is not False]


def _move_part(root: Path, name: str) -> Path:
    target = root / DAMAGED_PARTS_DIR / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}"
    try:
        target.parent.mkdir(exist_ok=True)
        (root / "parts" / name).rename(target)
    except OSError as exc:
        raise StoreError(f"cannot move part {name} of {root} to {target}: {exc.strerror or exc}") from exc
    return target


def _stand_ins(root: Path, moved: dict[str, Path]) -> list[str]:
    """An empty part in the place of each moved one (a build numbers its parts after the highest
    present, and a reused number would pass for a part the chem stage already scanned)."""
    from featurecache.store.layout import MSA_PART_PREFIX
    from featurecache.store.msa import MSAPartContents, write_msa_part
    from featurecache.store.writer import PartContents, write_structure_part

    written = []
    for name, where in moved.items():
        try:
            src = json.loads((where / PART_INDEX_DIR / PART_DONE_FILE).read_text()).get("source_dir", "")
        except (OSError, ValueError, AttributeError):
            src = ""
        src = src if isinstance(src, str) else ""
        if name.startswith(STRUCTURE_PART_PREFIX):
            write_structure_part(root, name, PartContents(source_dir=src))
        elif name.startswith(MSA_PART_PREFIX):
            write_msa_part(root, name, MSAPartContents(source_dir=src))
        elif name.startswith(COMPONENT_PART_PREFIX):
            from featurecache.store.components import write_component_part

            write_component_part(root, name, [])  # the next build's chem stage recomputes its components
        written.append(name)
    return written
