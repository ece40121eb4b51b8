"""What a command killed while it wrote a store leaves behind, and its removal.

Every writer of a store works under names that readers and the index never look at, then renames
into place. A process killed meanwhile (SIGKILL, a crash, a Ctrl-C that lands before its cleanup)
leaves them:

- ``parts/.tmp-<part>-<hex>`` (and its writer's sentinel file): a part a build was writing;
- ``parts/.tmp-pruned-<part>-<hex>``: a part a prune had set aside to delete. No index row uses it
  (prune moves a part only once none does), so deleting it changes nothing that is served;
- ``parts/.tmp-removing-<hex>``: a directory a cleanup had begun to delete;
- ``STORE/.index-saved-<hex>/``: the index's files as they were before a prune or
  ``verify --repair`` rewrote them, kept to put back after a failed write. They are hard links, so
  they hold a whole old index once the live files are replaced. The index is derived from the parts
  and every build rebuilds it from them, so a copy outlives its use when its writer dies;
- ``zarr.<hex>.partial`` in ``STORE/`` or ``parts/``: zarr's temp file for a group's ``zarr.json``;
- ``index/.<name>.<pid>.tmp`` and ``index/.part-rows/.<name>.<pid>.tmp``: an index file, the
  published record or a kept part-rows file (or manifest) being written (``index.temp_path``), as
  large as the table (review R42b s52 #5: nothing removed them). Their writers hold the build lock,
  but for ``featurecache plan``'s (``index/.plan.arrow.<pid>.tmp``), which takes no lock: it counts
  as left only once it has not changed for :data:`LOCKLESS_TEMP_AGE` seconds (its writer may be on
  another host, where the pid says nothing), and a younger one is neither listed nor removed.

Only a command that holds the build lock removes them (a build, a prune, a repair): while it holds
the lock, whoever wrote them is dead. Orphan workers of a killed build may still be writing a part,
so each part's sentinel goes first (the orphan can then no longer commit it) and each directory is
renamed away in one step before it is deleted (``store.writer``). ``featurecache info`` only
reports them (:func:`leftover_note`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import NamedTuple

from featurecache.store.index import PART_ROWS_DIR, TEMP_NAME
from featurecache.store.layout import (
    INDEX_DIR,
    PARTS_DIR,
    PLAN_TABLE,
    PRUNED_PREFIX,
    REMOVING_PREFIX,
    SAVED_INDEX_PREFIX,
    TMP_PREFIX,
)

log = logging.getLogger(__name__)

#: kind of leftover -> how a log line names them (after a count)
LEFTOVER_KINDS = {
    "build": "incomplete part(s) left by an interrupted build",
    "pruned": "part(s) an interrupted prune had set aside to delete",
    "removing": "director(ies) an interrupted cleanup had begun to delete",
    "saved index": "cop(ies) of the index kept by an interrupted prune or verify --repair",
    "zarr temp": "temp file(s) of an interrupted write of a zarr.json",
    "index temp": "temp file(s) of an interrupted write of the index",
}

#: kinds that are files (removed with unlink), not directories
_FILE_KINDS = ("zarr temp", "index temp")

#: seconds since its last change after which a temp file of a writer that takes no build lock
#: (``featurecache plan``'s ``index/.plan.arrow.<pid>.tmp``) counts as left by a dead one: a plan
#: writes its file in seconds
LOCKLESS_TEMP_AGE = 3600
#: the temp file of ``featurecache plan`` (``planner.write_plan``), written without the build lock
_LOCKLESS_TEMP = re.compile(rf"^\.{PLAN_TABLE}\.arrow\.\d+\.tmp$")

#: zarr's temp name for ``zarr.json`` while it writes it (``zarr.storage._local._atomic_write``)
_ZARR_TEMP = re.compile(r"^zarr\.[0-9a-f]{32}\.partial$")


class Leftover(NamedTuple):
    """One thing a killed command left: a directory, or a zarr temp file."""

    path: Path
    kind: str  # a key of LEFTOVER_KINDS

    @property
    def part(self) -> str:
        """The part a ``pruned`` leftover was ("s-000003" of ``.tmp-pruned-s-000003-1a2b3c4d``)."""
        return self.path.name.removeprefix(PRUNED_PREFIX).rsplit("-", 1)[0]


def find_leftovers(root: Path) -> list[Leftover]:
    """The leftovers in the store at ``root``, sorted by path (a build's sentinel files aside: they
    go with their directory). Reads only."""
    root = Path(root)
    out: list[Leftover] = []
    for where in (root, root / PARTS_DIR):
        with contextlib.suppress(OSError), os.scandir(where) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    is_dir = e.is_dir(follow_symlinks=False)
                    kind = _kind(e.name, is_dir, in_parts=where != root)
                    if kind is not None:
                        out.append(Leftover(Path(e.path), kind))
    index = root / INDEX_DIR
    for where in (index, index / PART_ROWS_DIR):
        with contextlib.suppress(OSError), os.scandir(where) as it:
            for e in it:
                with contextlib.suppress(OSError):
                    left = TEMP_NAME.match(e.name) and e.is_file(follow_symlinks=False)
                    if left and _left(e, where == index):
                        out.append(Leftover(Path(e.path), "index temp"))
    return sorted(out)


def _left(e: os.DirEntry[str], in_index: bool) -> bool:
    """Whether the temp file ``e`` of ``index/`` (``in_index``) or ``index/.part-rows/`` is one its
    writer left: any of a writer under the build lock, one of a writer without it once it is old."""
    if not (in_index and _LOCKLESS_TEMP.match(e.name)):
        return True
    return time.time() - e.stat(follow_symlinks=False).st_mtime > LOCKLESS_TEMP_AGE


def _kind(name: str, is_dir: bool, *, in_parts: bool) -> str | None:
    if not is_dir:
        return "zarr temp" if _ZARR_TEMP.match(name) else None
    if not in_parts:
        return "saved index" if name.startswith(SAVED_INDEX_PREFIX) else None
    if name.startswith(PRUNED_PREFIX):
        return "pruned"
    if name.startswith(REMOVING_PREFIX):
        return "removing"
    return "build" if name.startswith(TMP_PREFIX) else None


def freed_bytes(path: Path) -> int:
    """The bytes that deleting ``path`` (a file or a directory) frees: its files' sizes, leaving out
    a file with another hard link (a saved index's file that is still the live index's)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path) if Path(path).is_dir() else [("", [], [str(path)])]:
        for f in files:
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(dirpath, f), follow_symlinks=False)
                total += st.st_size if st.st_nlink <= 1 else 0
    return total


class Removed(NamedTuple):
    """One leftover :func:`clean_leftovers` deleted, and the bytes that freed."""

    leftover: Leftover
    bytes: int


def clean_leftovers(root: Path) -> list[Removed]:
    """Delete every leftover of the store at ``root`` (call it holding the build lock); what was
    deleted, with one INFO line per kind ("removed 26 part(s) an interrupted prune had set aside to
    delete (1.08 MB)"). A directory a build's orphan worker commits meanwhile is left alone (it is a
    complete part then)."""
    root = Path(root)
    parts = root / PARTS_DIR
    # a build's sentinel files first: an orphan worker can no longer commit a part removed below
    with contextlib.suppress(OSError), os.scandir(parts) as it:
        for e in it:
            with contextlib.suppress(OSError):
                if e.name.startswith(TMP_PREFIX) and not e.is_dir(follow_symlinks=False):
                    os.unlink(e.path)
    removed: list[Removed] = []
    for leftover in find_leftovers(root):
        size = freed_bytes(leftover.path)
        if leftover.kind in _FILE_KINDS:
            with contextlib.suppress(OSError):
                leftover.path.unlink()
            removed.append(Removed(leftover, size))
            continue
        doomed = leftover.path
        if leftover.kind == "build":  # out of an orphan writer's way in one step
            doomed = leftover.path.with_name(f"{REMOVING_PREFIX}{uuid.uuid4().hex[:8]}")
            try:
                os.rename(leftover.path, doomed)
            except FileNotFoundError:
                continue  # committed (or removed) meanwhile by the task writing it
            except OSError:
                doomed = leftover.path
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(Removed(leftover, size))
    for kind, words in LEFTOVER_KINDS.items():
        mine = [r for r in removed if r.leftover.kind == kind]
        if mine:
            names = f": {', '.join(r.leftover.part for r in mine)}" if kind == "pruned" else ""
            log.info("removed %d %s (%.2f MB)%s", len(mine), words, sum(r.bytes for r in mine) / 1e6, names)
    return removed


def remove_leftovers(root: Path) -> int:
    """:func:`clean_leftovers`; returns how many directories it deleted."""
    return sum(r.leftover.kind not in _FILE_KINDS for r in clean_leftovers(root))


def leftover_note(root: Path) -> str | None:
    """One line for ``featurecache info`` when the store holds leftovers, with the bytes deleting
    them frees and what does; None when it holds none, or while a command holds the build lock (what
    it writes meanwhile looks the same)."""
    from featurecache.store.root import lock_holder

    found = find_leftovers(root)
    if not found or lock_holder(root) is not None:
        return None
    size = sum(freed_bytes(f.path) for f in found)
    kinds = [f"{n} {words}" for kind, words in LEFTOVER_KINDS.items()
             if (n := sum(f.kind == kind for f in found))]  # fmt: skip
    import shlex

    return (f"{root}: {size / 1e6:.2f} MB left by interrupted commands ({'; '.join(kinds)}): nothing reads them; "
            f"`featurecache prune {shlex.quote(str(root))}` (or the next build) deletes them")  # fmt: skip
