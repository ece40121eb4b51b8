"""`featurecache prune`: delete the parts that no index row uses any more.

Parts never change once written, so what a later build supersedes stays on disk: the old version
of an entry whose input was replaced or rebuilt (a new CCD or featurizer version rebuilds every
entry), MSAs of sequences no entry has any more, component rows recomputed since. The index lists
none of it (``index.rebuild_index``), but a part is removed only when *none* of its rows is in any
index table: a part holding one live entry, MSA, component, failure, warning or chem-stage record
stays whole. Before anything is removed, the index that the remaining parts give is computed and
must equal the current one, table by table, so a prune never changes what the store serves.

Parts held back from the published index (an extension build's new structure parts, until its MSA
and chem stages have run: ``index.rebuild_index``; a killed build leaves them so) are never removed,
and "used" means used by either index: the published one, which leaves their rows out and so still
lists the older versions of the entries they replace, and the one over every part, which the next
build works from (it lists their entries, and the MSAs and components written for them since). Both
must be unchanged without the parts removed.

A part that is gone altogether (its directory deleted) while the index still lists its rows stops
a prune that would write (nothing removed, also with ``--dry-run``): the index is rewritten from
the parts, which would drop its entries, MSAs and other rows with no word, also those whose files
are still there. ``verify --repair`` says what becomes of them, and a build rebuilds them.

The highest-numbered part of each kind (``s-``, ``m-``, ``c-``) is always kept: a build numbers
its new parts after the highest one present or recorded
(:func:`~featurecache.build.discover.next_part_number`), and a reused name would pass for a part
that the chem stage already scanned (``chem_scans``), or that the index already took in.

``--sources-gone PDB_DIR [--msa-dir DIR]`` (opt-in) first removes from the index the stored entries
and MSAs whose source files are gone, those a build from the same directories reports as "sources
gone": an entry recorded by a build from ``PDB_DIR`` (its part's ``source_dir``; or from a
directory that no longer exists, renamed or moved to ``PDB_DIR``: some of its entries match files
there, :func:`~featurecache.build.discover.directory_parts`) that no file there gives any more
(neither its id nor its path among the build's inputs) and whose file does not exist; an MSA from
files that a build from ``DIR`` (or from a directory renamed or moved to it) recorded, none of which
is listed under ``DIR`` or exists. Parts never change, so the removal is written as :data:`~featurecache.store.index.REMOVED`
rows of one new part per kind; the index then leaves those entries (their chains, interfaces, ...)
and MSAs out, and the parts that hold nothing else are deleted as above. A later build of a file
put back stores it again. Entries are looked up in the index over every part, held-back ones
included: a held entry whose file is gone is removed (the published version of its id with it, and
the next build does not publish it), the held part itself is kept as above; a held entry whose file
is there is left alone, and the next build publishes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from featurecache.errors import StoreError, UsageError
from featurecache.store.index import (
    PART_ROWS_DIR,
    PART_ROWS_MANIFEST,
    PUBLISHED_FILE,
    REMOVED,
    REMOVED_SCHEMA,
    complete_parts,
    dir_bytes,
    first_build_finished,
    forget_parts,
    held_back,
    published_record,
    read_table,
    rebuild_index,
    store_part_rows,
    store_write_error,
    tables_from_rows,
    without_parts,
)
from featurecache.store.layout import (
    INDEX_DIR,
    INDEX_FILES,
    MSA_PART_PREFIX,
    PART_DONE_FILE,
    PART_INDEX_DIR,
    PARTS_DIR,
    PRUNED_PREFIX,
    REMOVING_PREFIX,
    SAVED_INDEX_PREFIX,
    STRUCTURE_PART_PREFIX,
    part_name,
)
from featurecache.store.leftovers import Removed, clean_leftovers, find_leftovers, freed_bytes
from featurecache.store.root import BuildLock, check_store_dir, lock_holder

log = logging.getLogger(__name__)


@dataclass
class PruneResult:
    """The parts removed (or, for a dry run, the ones that would be) and their bytes on disk."""

    parts: list[str] = field(default_factory=list)
    bytes: int = 0
    dry_run: bool = False
    #: --sources-gone: the ids of the entries removed from the index (or that would be)
    entries: list[str] = field(default_factory=list)
    #: --sources-gone: each MSA removed, named by the chains that use it ("1psm/A")
    msas: list[str] = field(default_factory=list)
    #: the parts among ``parts`` that an earlier prune, interrupted, had set aside to delete
    #: (``parts/.tmp-pruned-*``), deleted by this one (``bytes`` counts them, and the other
    #: leftovers of killed commands it deleted: :mod:`featurecache.store.leftovers`)
    interrupted_earlier: list[str] = field(default_factory=list)


def unused_parts(
    root: Path, extra: dict[str, pa.Table] | None = None, later: Sequence[str] = ()
) -> list[Path]:
    """Complete parts none of whose rows is in any index table (sorted by name): neither in the
    published index nor in the one over every part, and not held back from the published index
    (module docstring). A directory without its ``part.json`` is never listed (``verify`` reports it
    as incomplete). ``extra`` and ``later``: the own rows and names of parts a dry run did not write.

    Raises StoreError when either index without them would differ from the index with them (a
    table derived from rows that are not themselves listed): nothing is then safe to remove."""
    root = Path(root)
    parts = complete_parts(root)
    # every part's rows once, from the index's kept rows where they cover the parts (review R26a
    # s44 #2: at 12.5k parts, three gathers of ~110k small files took 112 s and 1.8 GB)
    raw = store_part_rows(root)[0]
    held = _held_back_parts(root, parts, raw["entries"])
    indexes = _indexes(root, raw, held, extra)
    used: set[str] = set(held)
    for tables in indexes.values():
        for table in tables.values():
            if table.num_rows and "part" in table.column_names:
                used.update(pc.unique(table.column("part")).to_pylist())
    last: dict[str, str] = {}  # the highest number of each kind: never removed
    for name in [p.name for p in parts] + list(later):
        last[name[:2]] = max(last.get(name[:2], name), name)
    unused = [
        p for p in parts
        if p.name not in used and p.name not in last.values() and (p / PART_INDEX_DIR / PART_DONE_FILE).is_file()
    ]  # fmt: skip
    if unused:
        without = _indexes(root, without_parts(raw, [p.name for p in unused]), held, extra)
        changed = [
            f"{name}{'' if which == 'published' else ' (over every part, held-back ones included)'}"
            for which, tables in indexes.items()
            for name in _differing_tables(tables, without[which])
        ]
        if changed:
            raise StoreError(
                f"{root}: the {len(unused)} part(s) without index rows still decide table(s) "
                f"{', '.join(changed)} of the index; nothing removed"
            )
    return unused


def _held_back_parts(root: Path, parts: Sequence[Path], entries: pa.Table) -> set[str]:
    """The names of the structure parts among ``parts`` that ``rebuild_index(root)`` holds back
    from the published index: those with entry rows (``entries``: every part's own, as
    ``gather_part_rows`` gives them) that ``index/.published.json`` does not list, once the store
    has a finished build (the rule and the record are the index module's)."""
    root = Path(root)
    # rebuild_index's finished=None: a store without index/entries.arrow counts as finished
    finished = not (root / INDEX_DIR / "entries.arrow").is_file() or first_build_finished(root)
    record = published_record(root) if finished else None
    if record is None:
        return set()
    unlisted = {p.name for p in parts if p.name.startswith(STRUCTURE_PART_PREFIX) and p.name not in record}
    return {p for p in held_back(entries, record) if p in unlisted}


def _indexes(
    root: Path, raw: dict[str, pa.Table], held: set[str], extra: dict[str, pa.Table] | None
) -> dict[str, dict[str, pa.Table]]:
    """The index tables the parts' rows ``raw`` give: "published" (without the ``held`` parts' rows:
    what the store serves; as ``rebuild_index`` derives it) and, when some are held, "every part"
    (what a build works from)."""
    published = tables_from_rows(root, without_parts(raw, held) if held else raw, extra)
    if not held:
        return {"published": published}
    return {"published": published, "every part": tables_from_rows(root, raw, extra)}


def prune_store(
    root: Path, *, dry_run: bool = False, sources_gone: Path | None = None, msa_dir: Path | None = None
) -> PruneResult:
    """Remove :func:`unused_parts` (holding the build lock: no build may run meanwhile). Each
    part is first renamed to a temp name readers and builds ignore, the index is rebuilt from
    the remaining parts (its tables are the ones it had), then the parts are deleted.

    What a killed prune or repair left (the parts it had set aside, its copy of the index; also a
    killed build's temp parts: :mod:`featurecache.store.leftovers`) is deleted first, and the parts
    an interrupted prune had set aside are counted among the removed ones (``interrupted_earlier``;
    a dry run lists them). A Ctrl-C or SIGTERM logs one line saying what state the store is left in
    (:func:`_interrupted_line`), then goes on as it would have (KeyboardInterrupt; SIGTERM ends the
    process, by the signal).

    ``sources_gone`` (a ``--pdb-dir``; ``msa_dir``: a ``--msa-dir``, only with it): first remove
    from the index the entries and MSAs whose source files are gone from them (module docstring)."""
    from featurecache.signals import quiet_on_sigint

    root = Path(root)
    check_store_dir(root)
    if not (root / "zarr.json").is_file():
        if root.is_dir():  # a new store whose build has not written it yet: named (review R35a s49 #7)
            from featurecache.store.reader import check_not_being_built

            check_not_being_built(root, "the store yet (no zarr.json)")
        raise StoreError(f"{root} is not a featurecache store (no zarr.json)")
    if msa_dir is not None and sources_gone is None:
        raise UsageError("--msa-dir is read only with --sources-gone PDB_DIR")
    for d, what in ((sources_gone, "--sources-gone"), (msa_dir, "--msa-dir")):
        if d is not None and not Path(d).is_dir():
            raise UsageError(f"{what} {d}: no such directory")
    step = ["check"]  # how far it got (the interrupt's line says what that leaves)
    with quiet_on_sigint(prefixes=(), sigterm=_PruneTerminated):
        try:
            return _prune(root, dry_run, sources_gone, msa_dir, step)
        except KeyboardInterrupt as exc:
            log.warning("%s", _interrupted_line(root, step[0], dry_run))
            if not isinstance(exc, _PruneTerminated):
                raise
    # SIGTERM: its default action again (quiet_on_sigint put it back), now that the lock is released
    # and the line written: the process ends by the signal, as it would have without the line
    for handler in logging.getLogger().handlers:
        handler.flush()
    signal.raise_signal(signal.SIGTERM)
    raise AssertionError("SIGTERM did not end the process")  # (its action was the default)


class _PruneTerminated(KeyboardInterrupt):
    """SIGTERM during a prune, raised where a Ctrl-C's KeyboardInterrupt is (:func:`prune_store`)."""


def _interrupted_line(root: Path, step: str, dry_run: bool) -> str:
    """The one line for a prune that a signal stopped at ``step``: what state the store is in."""
    import shlex

    again = f"`featurecache prune {shlex.quote(str(root))}`"
    if dry_run or step == "check":
        return f"interrupted: no part was removed and what {root} serves is unchanged"
    if step == "removals recorded":
        return (f"interrupted: the removal of the entries and MSAs whose source files are gone is recorded; no part "
                f"was deleted: run {again} to delete those left unused")  # fmt: skip
    if step == "removals":
        return ("interrupted while recording the removal of the entries and MSAs whose source files are gone: "
                "part of it may be recorded (the next rebuild of the index takes it in); run the same prune again "
                "to finish it")  # fmt: skip
    n = sum(f.kind == "pruned" for f in find_leftovers(root))
    if not n:
        return f"interrupted: what {root} serves is unchanged; the parts it was removing are gone"
    return (f"interrupted: what {root} serves is unchanged (no part the index uses was removed); {n} part(s) set "
            f"aside to be deleted are still in {root / PARTS_DIR}/{PRUNED_PREFIX}*: run {again} again to delete "
            "them")  # fmt: skip


def _prune(
    root: Path, dry_run: bool, sources_gone: Path | None, msa_dir: Path | None, step: list[str]
) -> PruneResult:
    """:func:`prune_store`'s work, once its arguments are checked; ``step[0]``: how far it got."""
    with _lock_unless_listing(root, dry_run):
        earlier = _interrupted_earlier(root, dry_run)
        extra: dict[str, pa.Table] = {}
        later: list[str] = []
        gone_entries: list[dict[str, str]] = []
        gone_msas: list[dict[str, str]] = []
        missing = _listed_of_missing_parts(root)
        if sources_gone is not None:
            gone_entries, gone_msas = _sources_gone(root, Path(sources_gone), msa_dir)
            extra, later = _removal_parts(root, gone_entries, gone_msas)
            if later and missing:
                raise _missing_parts_error(root, missing)
            if not dry_run and later:
                from featurecache.build.discover import resolved

                step[0] = "removals"
                write_removals(
                    root, later, gone_entries, gone_msas, str(resolved(Path(sources_gone))),
                    str(resolved(Path(msa_dir))) if msa_dir is not None else "",
                )  # fmt: skip
                step[0] = "removals recorded"
                n_e, n_m = len(gone_entries), len(gone_msas)
                log.info("removed from the index: %d entr%s and %d MSA%s whose source files are gone (part%s %s)",
                         n_e, "y" if n_e == 1 else "ies", n_m, "" if n_m == 1 else "s", "" if len(later) == 1 else "s",
                         ", ".join(later))  # fmt: skip
                extra, later = {}, []
        unused = unused_parts(root, extra, later)
        if unused and missing:
            raise _missing_parts_error(root, missing)
        result = PruneResult([p.name for p in unused], sum(dir_bytes(p) for p in unused), dry_run)
        result.entries = [r["id"] for r in gone_entries]
        result.msas = [r["chains"] for r in gone_msas]
        result.interrupted_earlier = [r.leftover.part for r in earlier if r.leftover.kind == "pruned"]
        result.parts = result.interrupted_earlier + result.parts
        result.bytes += sum(r.bytes for r in earlier)
        if dry_run or not unused:
            return result
        moved: list[tuple[Path, Path]] = []
        saved = save_index(root)
        step[0] = "move"
        try:
            for p in unused:
                target = root / PARTS_DIR / f"{PRUNED_PREFIX}{p.name}-{uuid.uuid4().hex[:8]}"
                p.rename(target)
                moved.append((p, target))
            # whatever was moved is out of every index (the next prune, or build, deletes it if
            # this process dies before the rmtree below: store.leftovers); the kept rows without
            # the moved parts spare the rebuild a gather of every part's files
            forget_parts(root, {p.name: target for p, target in moved})
            rebuild_index(root)
        except (OSError, StoreError) as exc:
            # an index that cannot be written: the parts go back, so the index still lists only
            # what is there
            for p, target in reversed(moved):
                with contextlib.suppress(OSError):
                    target.rename(p)
            raise _failed(exc, root, restore_index(saved)) from exc
        except KeyboardInterrupt:
            # the index is the one it was, or one of the same tables (its files are named by their
            # contents' generation): the saved copy is of no use, the parts moved so far the next
            # prune deletes
            drop_saved_index(saved)
            raise
        drop_saved_index(saved)
        for _p, target in moved:
            shutil.rmtree(target, ignore_errors=True)
    n = len(result.parts)
    log.info(
        "pruned %d part%s, %d bytes: %s", n, "" if n == 1 else "s", result.bytes, ", ".join(result.parts)
    )
    return result


def _interrupted_earlier(root: Path, dry_run: bool) -> list[Removed]:
    """What killed commands left in the store (:mod:`~featurecache.store.leftovers`): deleted (the
    caller holds the lock), or for a dry run only listed, with the bytes deleting it frees."""
    if not dry_run:
        return clean_leftovers(root)
    return [Removed(f, freed_bytes(f.path)) for f in find_leftovers(root)]


def _listed_of_missing_parts(root: Path) -> dict[str, dict[str, list[str]]]:
    """The rows the index lists (``STORE/index/*.arrow``) of parts that are gone altogether: part →
    table → the rows' ids (an entry's id, a failure's path, an MSA's or a component's key, ...; ""
    for a table without one)."""
    root = Path(root)
    there = {p.name for p in complete_parts(root)}
    out: dict[str, dict[str, list[str]]] = {}
    for f in sorted((root / INDEX_DIR).glob("*.arrow")):
        if f.stem not in INDEX_FILES or f.name.startswith("."):  # not featurecache's (review R28c s46 #7)
            continue
        table = read_table(f, memory_map=False)
        if not table.num_rows or "part" not in table.column_names:
            continue
        parts = table.column("part").to_pylist()
        if set(parts) <= there:
            continue
        col = next((c for c in ("id", "path", "key", "entry_id") if c in table.column_names), None)
        ids = table.column(col).to_pylist() if col is not None else [""] * len(parts)
        for part, i in zip(parts, ids, strict=True):
            if part and part not in there:
                out.setdefault(part, {}).setdefault(f.stem, []).append(str(i or ""))
    return out


def _missing_parts_error(root: Path, missing: dict[str, dict[str, list[str]]]) -> StoreError:
    """The refusal of a prune whose index rewrite would drop the rows of ``missing`` parts."""
    import shlex

    entries = [i for tables in missing.values() for i in tables.get("entries", [])]
    n_msas = sum(len(tables.get("msas", [])) for tables in missing.values())
    what = [f"entr{'y' if len(entries) == 1 else 'ies'} {', '.join(entries[:10])}"
            f"{f' and {len(entries) - 10} more' if len(entries) > 10 else ''}"] if entries else []  # fmt: skip
    what += [f"{n_msas} MSA{'' if n_msas == 1 else 's'}"] if n_msas else []
    if not what:
        n = sum(len(ids) for tables in missing.values() for ids in tables.values())
        what = [
            f"{n} row{'' if n == 1 else 's'} ({', '.join(sorted({t for ts in missing.values() for t in ts}))})"
        ]
    q = shlex.quote(str(root))
    return StoreError(f"{root}: the index lists {' and '.join(what)} of part(s) {', '.join(sorted(missing))}, "
                      "which are missing; a prune rewrites the index from the parts, which would drop them from "
                      f"what the store serves; nothing removed: see `featurecache verify {q}` (`--repair` takes "
                      "them out for a build to rebuild them) or put the part(s) back")  # fmt: skip


@contextlib.contextmanager
def _lock_unless_listing(root: Path, dry_run: bool) -> Iterator[None]:
    """The build lock, for a prune that changes the store. A dry run only reads: it takes no lock
    (a read-only store can be listed), and says when a build holds the store meanwhile."""
    if not dry_run:
        with BuildLock(root, "prune"):
            yield
        return
    holder = lock_holder(root)
    if holder is not None:
        log.warning("%s holds %s: this listing may change when it ends", holder, root)
    yield


def _write_error(root: Path, exc: OSError, what: str) -> StoreError:
    """:func:`~featurecache.store.index.store_write_error`'s line, with what became of the change."""
    return StoreError(f"{store_write_error(exc, root)}; {what}")


def _saved_names(root: Path) -> list[str]:
    """What :func:`save_index` keeps of ``STORE/index/`` (paths relative to it): the index files
    (``<table>.arrow``: its files that are not hidden), the published record
    (:data:`~featurecache.store.index.PUBLISHED_FILE`) and the kept part rows with their manifest
    (``.part-rows/<file>``): the rebuild of a prune or repair rewrites all three (the record first:
    ``index._published_now``), and a failed one must leave them as they were (review R42b s52 #4: a
    failed prune rewrote the record, and later prunes held back the parts it had meant to remove).
    Temp files (``.<name>.<pid>.tmp``) are not kept."""
    index = Path(root) / INDEX_DIR
    out = []
    for where, prefix in ((index, ""), (index / PART_ROWS_DIR, f"{PART_ROWS_DIR}/")):
        with contextlib.suppress(OSError), os.scandir(where) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    keep = not e.name.startswith(".") or (not prefix and e.name == PUBLISHED_FILE)
                    if keep and e.is_file(follow_symlinks=False):
                        out.append(prefix + e.name)
    return sorted(out)


def _index_files(root: Path) -> dict[str, tuple[int, int]]:
    """:func:`_saved_names`' files: name → (bytes, mtime_ns); what tells whether a rebuild wrote any."""
    out = {}
    index = Path(root) / INDEX_DIR
    for name in _saved_names(root):
        with contextlib.suppress(OSError):
            st = (index / name).stat()
            out[name] = (st.st_size, st.st_mtime_ns)
    return out


@dataclass
class SavedIndex:
    """``STORE/index/``'s files as they were before a change (:func:`save_index`): hard links (or
    copies) in a directory beside it, put back by :func:`restore_index` (renames: no data is
    written, so a full disk or a file-size limit does not stop it)."""

    root: Path
    where: Path
    stat: dict[str, tuple[int, int]]


def save_index(root: Path) -> SavedIndex:
    """Keep the index's files aside before a change (:func:`_saved_names`: the index files, the
    published record, the kept part rows); StoreError (nothing changed) if it cannot."""
    root = Path(root)
    index = root / INDEX_DIR
    where = root / f"{SAVED_INDEX_PREFIX}{uuid.uuid4().hex[:8]}"
    try:
        where.mkdir()
        for name in _saved_names(root):
            (where / name).parent.mkdir(exist_ok=True)
            try:
                os.link(index / name, where / name)
            except OSError:
                shutil.copy2(index / name, where / name)
    except OSError as exc:
        shutil.rmtree(where, ignore_errors=True)
        raise _write_error(root, exc, "nothing changed") from exc
    return SavedIndex(root, where, _index_files(root))


def drop_saved_index(saved: SavedIndex) -> None:
    shutil.rmtree(saved.where, ignore_errors=True)


def _restore_order(name: str) -> tuple[bool, bool, str]:
    """The order :func:`restore_index` puts files back in: the kept part rows first (their manifest
    last: it vouches for them), then the record and the index files, ``entries.arrow`` last (as a
    rebuild renames them: a reader meanwhile finds two generations and reads again)."""
    return (not name.startswith(f"{PART_ROWS_DIR}/"), name in (f"{PART_ROWS_DIR}/{PART_ROWS_MANIFEST}",
            "entries.arrow"), name)  # fmt: skip


def restore_index(saved: SavedIndex) -> bool:
    """After a failed write: put the index's files back exactly as they were (a file written since
    is removed). False (and an ERROR naming where the saved files are) if that fails too."""
    root, index = saved.root, saved.root / INDEX_DIR
    if _index_files(root) == saved.stat:
        drop_saved_index(saved)
        return True
    try:
        names = set(saved.stat)
        for name in _saved_names(root):
            if name not in names:
                (index / name).unlink()
        for name in sorted(names, key=_restore_order):
            (index / name).parent.mkdir(exist_ok=True)
            os.replace(saved.where / name, index / name)
    except OSError as exc:
        log.error("the index of %s could not be put back as it was (%s): its previous files are in %s; copy "
                  "them into %s, or run `featurecache build` on the store once it can be written", root,
                  exc.strerror or exc, saved.where, index)  # fmt: skip
        return False
    drop_saved_index(saved)
    return True


def _failed(exc: OSError | StoreError, root: Path, restored: bool) -> StoreError:
    """The one line for a prune / repair whose write failed (a StoreError's text is not wrapped again)."""
    what = "nothing removed" if restored else "the index could not be put back (see the ERROR above)"
    if isinstance(exc, StoreError):  # (a StoreError is an OSError) already says where and why
        return StoreError(f"{exc}; {what}")
    return _write_error(root, exc, what)


def write_removal_parts(
    root: Path, names: list[str], entries: list[dict[str, str]], msas: list[dict[str, str]], entry_dir: str,
    msa_dir: str, written: list[str],
) -> None:  # fmt: skip
    """Write the parts :func:`_removal_parts` named (their :data:`REMOVED` rows; they record the
    directories, as a build's parts do: ``entry_dir`` a ``--pdb-dir``, ``msa_dir`` a ``--msa-dir``,
    "" none), without an index rebuild; each name is appended to ``written`` once its part is there
    (the caller takes them out again should a later step fail)."""
    from featurecache.store.msa import MSAPartContents, write_msa_part
    from featurecache.store.writer import PartContents, write_structure_part

    for name in names:
        if name.startswith(STRUCTURE_PART_PREFIX):
            write_structure_part(
                root, name, PartContents(source_dir=entry_dir, removed=[_row(r) for r in entries])
            )
        else:
            write_msa_part(root, name, MSAPartContents(source_dir=msa_dir, removed=[_row(r) for r in msas]))
        written.append(name)


def write_removals(
    root: Path, names: list[str], entries: list[dict[str, str]], msas: list[dict[str, str]], entry_dir: str,
    msa_dir: str,
) -> None:  # fmt: skip
    """Write the parts :func:`_removal_parts` named (:func:`write_removal_parts`), then rebuild
    the index. Nothing changes when a write fails: a part already
    written is taken out again and the StoreError says where the store could not be written."""
    written: list[str] = []
    saved = save_index(root)
    try:
        write_removal_parts(root, names, entries, msas, entry_dir, msa_dir, written)
        rebuild_index(root)
    except (OSError, StoreError) as exc:
        for part in (root / PARTS_DIR / name for name in written):
            doomed = part.with_name(f"{REMOVING_PREFIX}{uuid.uuid4().hex[:8]}")
            with contextlib.suppress(OSError):
                part.rename(doomed)
                shutil.rmtree(doomed, ignore_errors=True)
        raise _failed(exc, root, restore_index(saved)) from exc
    drop_saved_index(saved)


#: how many files of an ``--msa-dir`` whose names show no MSA file the guard of
#: :func:`_sources_gone` reads (FASTA-named ones first, then the others, by path) before it calls
#: the directory not the inputs
_SNIFF_AT_MOST = 64


#: how much of a file (decompressed) the guard of :func:`_sources_gone` reads to judge an
#: alignment by its content: its first records, cut at the last record that fits (a 97 MB FASTA
#: database was read whole, and parsed, to learn that its row 1 was no alignment row: review RF2
#: s27 #7); rows past it are not looked at (a file whose first MiB is an alignment counts)
_JUDGE_BYTES = 1 << 20
#: why a file of only a stored chain's query does not count (the refusal then says how to proceed)
_ONLY_QUERY = ("only the query of a stored chain, no row beyond it (a query-only file is no sign that the "
               "directory holds the MSAs)")  # fmt: skip


def _head(path: Path) -> tuple[bytes, bool]:
    """The first :data:`_JUDGE_BYTES` of the (gunzipped) file, without a UTF-8 byte-order mark,
    and whether that is the whole file."""
    import gzip

    from featurecache.parse.a3m import GZIP_MAGIC, UTF8_BOM

    with open(path, "rb") as fh:
        gz = fh.read(2) == GZIP_MAGIC
    with gzip.open(path, "rb") if gz else open(path, "rb") as fh:
        data = fh.read(_JUDGE_BYTES + 1)
    return data[:_JUDGE_BYTES].removeprefix(UTF8_BOM), len(data) <= _JUDGE_BYTES


def _a3m_evidence(path: Path, wanted: set[str]) -> str:
    """:func:`_msa_by_content` of an a3m/FASTA file, from its first records only (:func:`_head`):
    the empty string for an alignment whose query is a stored chain's sequence with a row beyond
    the query (a hit: a residue, not the query's row again), else why not."""
    from featurecache.build.msa_stage import _hashes
    from featurecache.parse.a3m import _parse_a3m

    data, whole = _head(path)
    if not whole:  # complete records only: the one the cut ends in is left out
        cut = max(data.rfind(b"\n>"), data.rfind(b"\x00"))
        if cut <= 0:
            return f"its first record is longer than {_JUDGE_BYTES >> 20} MiB (not judged)"
        data = data[:cut]
    msas = _parse_a3m(data.decode("utf-8", errors="replace"))
    queried = [m for m in msas if _hashes(m.query_sequence, wanted)]
    if not queried:
        return "no alignment of a stored chain's sequence" if msas else "no alignment"
    for m in queried:
        if any(r != m.rows[0] and any(c.isalpha() for c in r) for r in m.rows[1:]):
            return ""
    return _ONLY_QUERY


def _msa_by_content(msa_dir: Path, rel: str, wanted: set[str]) -> str:
    """The empty string when the file ``rel`` of ``msa_dir`` shows that the directory holds the
    MSAs: the MSA stage reads template hits from it, or an alignment whose query is the sequence
    of a chain of the store (``wanted``: their sequence hashes; the build joins an alignment to the
    chains of its query) with at least one row beyond the query. Else why not, for the guard's
    refusal. A FASTA file of unaligned sequences of different lengths (a ``queries.fasta``) is no
    alignment, as the build's scan finds; one of a single sequence, or of equal ones (a homodimer's
    two queries), gives no row beyond the query: it could be a stray input of a search as well as
    a query-only MSA, and counting it removed every stored MSA of an unmounted directory (review
    RF2 s27 #1). An a3m/FASTA file is judged from its first records (:func:`_a3m_evidence`)."""
    from featurecache.build.discover import native
    from featurecache.build.msa_stage import _degap, _hashes
    from featurecache.parse.hits import parse_hhr, parse_m8, sniff_file
    from featurecache.parse.sto import parse_sto

    path = Path(msa_dir) / native(rel)  # rel as listed (UTF-8 text): the file system's name for it
    try:  # its first KB first: a file that is no MSA format's (a tarball) is not read further
        fmt = sniff_file(path)
        if fmt in ("unknown", "empty"):
            return "no MSA format"
        if fmt == "a3m":
            return _a3m_evidence(path, wanted)
        if fmt == "hhr":
            return "" if parse_hhr(path) else "no template hit"
        if fmt == "m8":
            return "" if parse_m8(path) else "no template hit"
        alns = parse_sto(path)
    except ValueError as exc:  # MSAError, InputError, UnicodeDecodeError
        return f"not an alignment: {str(exc)[:200]}"
    except (OSError, EOFError, zlib.error) as exc:
        return f"cannot read: {exc}"
    if any(a.is_template_hits and a.names for a in alns):
        return ""
    rows = [[_degap(r) for r in a.aligned] for a in alns if not a.is_template_hits]
    queried = [seqs for seqs in rows if any(_hashes(s, wanted) for s in seqs)]
    if not queried:
        return "no alignment of a stored chain's sequence" if any(rows) else "no alignment"
    if any(len(set(filter(None, seqs))) > 1 for seqs in queried):
        return ""
    return _ONLY_QUERY


def _sources_gone(
    root: Path, pdb_dir: Path, msa_dir: Path | None
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The index's entries and MSAs whose source files are gone from ``pdb_dir`` / ``msa_dir``
    (module docstring), as :data:`~featurecache.store.index.REMOVED` rows without ``part`` (an
    MSA's also with ``chains``, the chains that use it). Raises UsageError for a directory that
    holds no input at all while the store has rows recorded from it (an unmounted or emptied
    directory would otherwise remove them all)."""
    # build imports store
    from featurecache.build.discover import (
        StoredEntries,
        input_ids,
        native,
        part_source_dirs,
        present,
        warn_unknown,
    )
    from featurecache.parse.structure import structure_format

    tables = tables_from_rows(root, store_part_rows(root)[0])
    recorded_in = part_source_dirs(root)

    entries = tables["entries"]
    rows = entries.select(["id", "key", "source_path", "part"]).to_pylist()
    gone_entries: list[dict[str, str]] = []
    # a source that cannot be checked (a directory on the way cannot be searched) is not known to
    # be gone: kept, and named in one warning (review R38a s50 #1: the prune crashed)
    unknown: list[Path] = []
    if rows:
        stored = StoredEntries(root, entries)
        inputs = input_ids(pdb_dir, exclude=root, msa_dir=msa_dir, stored=stored)  # the build's ids
        # this directory's: recorded by a build from it, or from a directory renamed or moved to it
        # (gone, and its entries match this directory's files: ``discover.directory_parts``)
        homes = stored.homes(pdb_dir, inputs)
        mine = [e for e in rows if homes(e["part"])]
        # a structure file as the build counts one (``build.run.check_structure_files``), not any
        # file: a README.txt in an unmounted mount point, or only ``1orc.pdb1``, removed every entry
        if mine and not any(structure_format(PurePosixPath(rel).name) for rel in inputs):
            from featurecache.build.run import STRUCTURE_FILE_KINDS  # only here: it imports the build

            others = sorted(inputs)
            held = "no file (hidden files are skipped)" if not others else (
                f"{len(others)} other file{'s' if len(others) != 1 else ''} ({', '.join(others[:3])}"
                f"{', …' if len(others) > 3 else ''})"
            )  # fmt: skip
            raise UsageError(f"--sources-gone {pdb_dir}: no structure file under it (looked for "
                             f"{STRUCTURE_FILE_KINDS}, found {held}), but {len(mine)} stored "
                             f"{'entries were' if len(mine) != 1 else 'entry was'} built from it (not mounted? "
                             "emptied?); nothing removed")  # fmt: skip
        ids = set(inputs.values())
        for e in mine:
            if e["id"] in ids or e["source_path"] in inputs:
                continue  # a file still gives it (the next build rebuilds it if it changed)
            where = pdb_dir / native(e["source_path"])
            there = present(where)
            if there is None:
                unknown.append(where)
            if there is not False:
                continue
            gone_entries.append({
                "kind": "entry", "id": e["id"], "key": e["key"], "source_path": e["source_path"],
                "message": f"its file {e['source_path']} is gone from {pdb_dir}",
            })  # fmt: skip
    gone_msas: list[dict[str, str]] = []
    try:
        _gone_msas(root, tables, msa_dir, gone_entries, gone_msas, recorded_in, unknown)
    finally:
        warn_unknown(unknown, "entries and MSAs built from them are not removed")
    return gone_entries, gone_msas


#: directories that cannot be listed named in :func:`_unlisted_clause`, at most (then how many more)
_UNLISTED_NAMED = 5


def _unlisted_clause(msa_dir: Path, unlisted: list[str]) -> str:
    """The part of ``prune --msa-dir``'s refusal that names the directories under ``msa_dir`` that
    cannot be listed (``unlisted``: their recorded paths, trailing ``/``), each with why (as
    ``os.scandir`` says now): the stored MSAs' files may be there, unseen ("" when there are none;
    review R38a s50 leftovers #3: a directory made unreadable read as an emptied one, unnamed)."""
    from featurecache.build.discover import escaped_path, native
    from featurecache.text import first_named

    if not unlisted:
        return ""
    named = []
    for rel in unlisted:
        where = msa_dir if rel == "./" else msa_dir / native(rel.rstrip("/"))
        try:
            with os.scandir(where):
                why = "listable now"
        except OSError as exc:
            why = exc.strerror or str(exc)
        named.append(f"{escaped_path(str(where))}/ ({why})")
    n = len(unlisted)
    return (f" or under {'a directory' if n == 1 else f'{n} directories'} that cannot be listed: "
            f"{first_named(named, _UNLISTED_NAMED, '; ')}; make {'it' if n == 1 else 'them'} readable and "
            "searchable")  # fmt: skip


def _gone_msas(
    root: Path, tables: dict[str, pa.Table], msa_dir: Path | None, gone_entries: list[dict[str, str]],
    gone_msas: list[dict[str, str]], recorded_in: Callable[[str], str], unknown: list[Path],
) -> None:  # fmt: skip
    """:func:`_sources_gone`'s MSAs: appended to ``gone_msas``; a source file that cannot be
    checked to ``unknown`` (the MSA is kept)."""
    from featurecache.build.discover import directory_parts, native, present
    from featurecache.build.msa_stage import _candidate_files
    from featurecache.parse.hits import MSA_ONLY_SUFFIXES, msa_name_format, sequence_file_name

    msas = tables.get("msas")
    if msa_dir is None or msas is None or not msas.num_rows:
        return
    from_files = [m for m in msas.select(["key", "n_files", "sources", "inputs_key", "part"]).to_pylist()
                  if m["n_files"] > 0 and m["sources"]]  # fmt: skip
    if not from_files:
        return
    unread: dict[str, str] = {}
    listed = {rel for rel, _size, _mtime in _candidate_files(Path(msa_dir), root, warn=False, unread=unread)}
    # directories under --msa-dir that cannot be listed (their path with a trailing /): no file to judge
    unlisted = sorted(rel for rel in unread if rel.endswith("/"))
    # as for entries: the MSAs of this --msa-dir, or of one renamed or moved to it
    matched = [m["part"] for m in from_files if {src.split("#", 1)[0] for src in m["sources"]} & listed]
    msa_homes = directory_parts(root, Path(msa_dir), matched, recorded_in)
    rows = [m for m in from_files if msa_homes(m["part"])]
    if not rows:
        return
    # as for --sources-gone: an input file, not any file (a README, lost+found/...) must be there
    stored_files = {src.split("#", 1)[0] for m in rows for src in m["sources"]}
    # a name of an MSA format (``parse.hits.msa_name_format``: the last suffix, ``.gz`` aside, in
    # any case, as the build reads names): not ``notes.a3m.txt`` (any suffix counted), and
    # ``1PSM_A.A3M`` too; or, as the MSA stage judges a file (content decides:
    # ``parse.hits.sniff_msa_format``), a file whose content it would use (``bfd.a3m.txt``
    # regenerated as ``bfd_v2.a3m.txt``, review RF1 s26 #1), looked at only when no name says so
    # (a README is not one); a ``.fasta`` name alone does not say so (a stray ``queries.fasta``
    # disarmed the guard: review s27 E2 #1)
    if not listed & stored_files and not any(msa_name_format(PurePosixPath(rel).name) for rel in listed):
        wanted = {str(h) for h in tables["chains"].column("sequence_hash").to_pylist()}

        def fasta(rel: str) -> bool:
            return sequence_file_name(PurePosixPath(rel).name)

        files = [rel for rel in listed if rel not in unread]
        looked = sorted(files, key=lambda rel: (not fasta(rel), rel))[:_SNIFF_AT_MOST]
        why_not: dict[str, str] = {}
        for rel in looked:
            why_not[rel] = _msa_by_content(Path(msa_dir), rel, wanted)
            if not why_not[rel]:
                break
        else:
            n = len(rows)
            named = [f"{rel}: {why}" for rel, why in why_not.items() if fasta(rel)]
            found = f"; found {'; '.join(named[:3])}{'; …' if len(named) > 3 else ''}" if named else ""
            only_query = any(why.startswith(_ONLY_QUERY) for why in why_not.values())
            raise UsageError(f"--msa-dir {msa_dir}: no MSA file ({', '.join(MSA_ONLY_SUFFIXES)}, or gzipped; or "
                             f"one whose content the MSA stage reads as an alignment of a stored chain's "
                             f"sequence with a row beyond the query, or as template hits{found}) under it, "
                             f"but {n} stored MSA{'s were' if n != 1 else ' was'} built from it (not mounted? "
                             f"emptied?{_unlisted_clause(Path(msa_dir), unlisted)}); nothing removed" + (
                                 "; if the directory really holds only query-only MSAs, run the prune without "
                                 "--msa-dir (the stored MSAs are kept) or give those files an .a3m name (a name "
                                 "of an MSA format counts)" if only_query else ""))  # fmt: skip
    chains: dict[str, list[str]] = {}
    for c in tables["chains"].select(["entry_id", "auth_id", "label_id", "sequence_hash"]).to_pylist():
        chains.setdefault(c["sequence_hash"], []).append(f"{c['entry_id']}/{c['auth_id'] or c['label_id']}")
    removed_ids = {e["id"] for e in gone_entries}
    for m in rows:
        paths = sorted({src.split("#", 1)[0] for src in m["sources"]})
        if any(p in listed for p in paths):
            continue
        there = [present(Path(msa_dir) / native(p)) for p in paths]
        if None in there:
            unknown += [Path(msa_dir) / native(p) for p, t in zip(paths, there, strict=True) if t is None]
        if any(t is not False for t in there):
            continue
        users = [c for c in chains.get(m["key"], []) if c.split("/", 1)[0] not in removed_ids]
        if not users:
            continue  # used only by entries removed too: the index drops it with them
        gone_msas.append({
            "kind": "msa", "id": m["key"], "key": m["inputs_key"], "source_path": "; ".join(paths),
            "message": f"its files are gone from {msa_dir}", "chains": ", ".join(dict.fromkeys(users)),
        })  # fmt: skip


def _removal_parts(
    root: Path, entries: list[dict[str, str]], msas: list[dict[str, str]]
) -> tuple[dict[str, pa.Table], list[str]]:
    """The :data:`REMOVED` rows of the parts that record these removals (an ``s-`` part for the
    entries, an ``m-`` part for the MSAs, numbered by :func:`next_part_number`) and their names."""
    from featurecache.build.discover import next_part_number

    rows: list[dict[str, str]] = []
    names: list[str] = []
    for prefix, group in ((STRUCTURE_PART_PREFIX, entries), (MSA_PART_PREFIX, msas)):
        if group:
            name = part_name(prefix, next_part_number(root, prefix))
            names.append(name)
            rows += [{**_row(r), "part": name} for r in group]
    return ({REMOVED: pa.Table.from_pylist(rows, schema=REMOVED_SCHEMA)} if rows else {}), names


def _row(r: dict[str, str]) -> dict[str, str]:
    return {k: r[k] for k in REMOVED_SCHEMA.names if k != "part"}


def _differing_tables(a: dict[str, pa.Table], b: dict[str, pa.Table]) -> list[str]:
    """Names of the tables that differ (compared as Arrow IPC bytes: ``Table.equals`` has NaN,
    a resolution not stated, unequal to itself; one without rows equals one that is absent)."""
    names = sorted(set(a) | set(b))
    # a table without rows is the same as none (``removed`` once no removal is in effect: a part
    # whose removals a later build superseded is unused, and without it the table is not derived)
    return [
        n for n in names
        if (n in a and a[n].num_rows) or (n in b and b[n].num_rows)
        if n not in a or n not in b or _ipc_bytes(a[n]) != _ipc_bytes(b[n])
    ]  # fmt: skip


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table.combine_chunks())
    return bytes(sink.getvalue())
