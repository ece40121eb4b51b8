"""The SHA-256 digests of structure files kept between builds (``STORE/cache/structure_digests.arrow``).

A build keys each entry on its file's digest (:func:`~featurecache.build.discover.entry_key`), so
listing ``--pdb-dir`` used to read every byte of every structure file, a no-op build too: minutes
for a PDB mirror (200k files, tens of GB), more on network storage. A file whose stat is the one
recorded with its digest is taken as unchanged and not read, as the MSA stage's scan cache does
(``msa_stage.ScanCache``) and as make and rsync do.

The stat is (size, mtime_ns, ctime_ns, inode), of the file a symlink leads to. Linux sets a file's
ctime to the current time on every write and on every ``utime`` (it cannot be set back), so a
rewrite that restores size and mtime (``touch -r``, ``os.utime``) is still seen, and a file
replaced by a rename (rsync, ``mv``) has another inode. What is missed: a rewrite within the same
timestamp tick as the stat recorded (a digest is not kept for a file changed within
:data:`RACY_NS` of the listing), and file systems that keep no ctime or reuse it (the clock set
back). A build never stores wrong bytes because of a stale digest: a part task hashes the bytes it
reads and keys the entry on them (``tasks.build_structure_part``), and the driver forgets the
digests those tasks found wrong (:func:`forget_digests`). A stale digest can only make an input
look up to date.

Digests are kept per resolved ``--pdb-dir`` and path relative to it (the path the index records),
so another directory's files, or the same names under another root, are never taken from them;
the rows of other directories are kept as they are. The file is replaced atomically
(``replace_table``); one that does not read, lacks a column or is of another format version is
ignored (a warning) and written again by the build.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from featurecache.store.index import read_table, replace_table

log = logging.getLogger(__name__)

#: Bumped when what a row means changes; a file of another version is ignored (rebuilt).
DIGEST_CACHE_VERSION = "1"
DIGEST_CACHE_DIR = "cache"  # the store's directory of caches (beside the MSA stage's msa_scan.arrow)
DIGEST_CACHE_FILE = "structure_digests.arrow"
#: A file whose mtime or ctime is this close to the listing's start gets no row: a second write in
#: the same timestamp tick (coarse on some file systems: 1-2 s) could leave its stat unchanged.
RACY_NS = 2_000_000_000
#: threads that hash the files whose digest is not kept (reads overlap; hashlib drops the GIL)
HASH_THREADS = 4

SCHEMA = pa.schema(
    [("dir", pa.string()), ("rel", pa.string()), ("size", pa.int64()), ("mtime_ns", pa.int64()),
     ("ctime_ns", pa.int64()), ("inode", pa.uint64()), ("sha256", pa.string())],
    metadata={"version": DIGEST_CACHE_VERSION},
)  # fmt: skip


@dataclass(frozen=True)
class FileStat:
    """What a digest is kept under: a change to any of these reads the file again."""

    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStat:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def cache_path(root: Path) -> Path:
    return Path(root) / DIGEST_CACHE_DIR / DIGEST_CACHE_FILE


class DigestCache:
    """The kept digests of one ``--pdb-dir`` (resolved), by relative path; :meth:`save` writes
    them back with the rows of other directories."""

    def __init__(self, root: Path, pdb_dir: str, table: pa.Table | None) -> None:
        self.root, self.pdb_dir = Path(root), pdb_dir
        self.other_dirs: pa.Table | None = None
        self.rows: dict[str, tuple[FileStat, str]] = {}
        self._changed = False
        if table is not None:
            mine = pc.equal(table.column("dir"), pdb_dir)
            self.other_dirs = table.filter(pc.invert(mine))
            t = table.filter(mine)
            cols = [t.column(c).to_pylist() for c in SCHEMA.names[1:]]
            for rel, size, mtime, ctime, ino, sha in zip(*cols, strict=True):
                self.rows[rel] = (FileStat(size, mtime, ctime, ino), sha)

    @classmethod
    def load(cls, root: Path, pdb_dir: Path) -> DigestCache:
        # a byte of the path that is not UTF-8 written \xNN, as the index writes paths
        # (discover.escaped_path, which imports this module): an Arrow string holds UTF-8 only
        # (review R28c s46 #2: a --pdb-dir named so crashed the build)
        here = os.fsencode(Path(pdb_dir).resolve()).decode("utf-8", "backslashreplace")
        f = cache_path(root)
        if not f.is_file():
            return cls(root, here, None)
        try:
            table = read_table(f, memory_map=False)
            version = (table.schema.metadata or {}).get(b"version", b"").decode(errors="replace")
            if version != DIGEST_CACHE_VERSION:
                log.info("structure digest cache %s is of format %r, not %r: every structure file is read",
                         f, version, DIGEST_CACHE_VERSION)  # fmt: skip
                return cls(root, here, None)
            table = table.select(SCHEMA.names).cast(SCHEMA)
        except Exception as exc:  # a damaged cache only costs reading every file once
            log.warning("ignoring the structure digest cache %s (every structure file is read): %s", f, exc)
            return cls(root, here, None)
        return cls(root, here, table)

    def get(self, rel: str, st: FileStat) -> str | None:
        """The kept digest of ``rel`` when its stat is ``st``, else None (read it)."""
        row = self.rows.get(rel)
        return row[1] if row is not None and row[0] == st else None

    def put(self, rel: str, st: FileStat, sha: str) -> None:
        if self.rows.get(rel) != (st, sha):
            self.rows[rel] = (st, sha)
            self._changed = True

    def keep_only(self, rels: Iterable[str]) -> None:
        """Drop the rows of files that are no longer inputs (gone, or hidden)."""
        keep = set(rels)
        gone = [rel for rel in self.rows if rel not in keep]
        for rel in gone:
            del self.rows[rel]
        self._changed |= bool(gone)

    def forget(self, rels: Iterable[str]) -> None:
        for rel in rels:
            if self.rows.pop(rel, None) is not None:
                self._changed = True

    def save(self) -> None:
        """Write the cache when a row changed (a no-op build rewrites nothing); a write the OS
        refuses is a warning (the next build reads the files again)."""
        if not self._changed:
            return
        rels = sorted(self.rows)
        stats = [self.rows[r][0] for r in rels]
        table = pa.table(
            {"dir": [self.pdb_dir] * len(rels), "rel": rels, "size": [s.size for s in stats],
             "mtime_ns": [s.mtime_ns for s in stats], "ctime_ns": [s.ctime_ns for s in stats],
             "inode": [s.inode for s in stats], "sha256": [self.rows[r][1] for r in rels]},
            schema=SCHEMA,
        )  # fmt: skip
        if self.other_dirs is not None and self.other_dirs.num_rows:
            table = pa.concat_tables([self.other_dirs, table])
        try:
            replace_table(cache_path(self.root), table, compression="zstd")
        except OSError as exc:
            log.warning("cannot write the structure digest cache %s: %s", cache_path(self.root), exc)
            return
        self._changed = False


def hash_file(path: Path) -> tuple[str, int, FileStat | None]:
    """Digest, bytes read, and the stat of the file read (None when it changed while read); ("", 0,
    None) for a file that cannot be read (its build task records why)."""
    h = hashlib.sha256()
    n = 0
    try:
        with open(path, "rb") as f:
            before = os.fstat(f.fileno())
            while chunk := f.read(1 << 20):
                h.update(chunk)
                n += len(chunk)
            after = os.fstat(f.fileno())
    except OSError:
        return "", 0, None
    st = FileStat.of(before)
    same = stat.S_ISREG(before.st_mode) and st == FileStat.of(after) and n == st.size
    return h.hexdigest(), n, st if same else None


def digest_files(
    files: Sequence[Path], rels: Sequence[str], cache: DigestCache | None, progress: bool = False
) -> list[tuple[str, int]]:  # fmt: skip
    """(sha256, size) of each of ``files`` (``rels``: their paths relative to ``--pdb-dir``, the
    cache's keys); ("", 0) for one that cannot be read. With a ``cache``, a file whose stat is the
    one kept is not read, and the cache is saved with the digests read (none for a file changed
    within :data:`RACY_NS` of the start, or while it was read). ``progress``: a bar over the files
    read (log lines without a terminal): a first build over a PDB mirror reads for minutes before
    any stage starts (review R15 s40 #4: 29 s of silence over 9.7 GB)."""
    from featurecache.build.progress import stage_bar

    t_start = time.time_ns()
    out: list[tuple[str, int]] = [("", 0)] * len(files)
    todo: list[int] = []
    for k, (p, rel) in enumerate(zip(files, rels, strict=True)):
        sha = None
        if cache is not None:
            try:
                st = os.stat(p)
            except OSError:
                st = None
            if st is not None and stat.S_ISREG(st.st_mode):
                sha = cache.get(rel, FileStat.of(st))
                if sha is not None:
                    out[k] = (sha, st.st_size)
        if sha is None:
            todo.append(k)
    read: list[tuple[str, int, FileStat | None]] = []
    if todo:  # (every digest kept: no stage to show)
        with (
            ThreadPoolExecutor(max_workers=HASH_THREADS) as pool,
            stage_bar("reading inputs", len(todo), progress) as advance,
        ):
            for got in pool.map(hash_file, [files[k] for k in todo]):
                read.append(got)
                advance(1)
    for k, (sha, n, fst) in zip(todo, read, strict=True):
        out[k] = (sha, n)
        settled = fst is not None and max(fst.mtime_ns, fst.ctime_ns) < t_start - RACY_NS
        if cache is not None and sha and fst is not None and settled:
            cache.put(rels[k], fst, sha)
        elif cache is not None:
            cache.forget([rels[k]])  # its old row, of another stat, is of no use
    if cache is not None:
        log.info("structure files: %d unchanged since their digest was kept, %d read (%.1f MB)",
                 len(files) - len(todo), len(todo), sum(n for _sha, n, _st in read) / 1e6)  # fmt: skip
        cache.keep_only(rels)
        cache.save()
    return out


def forget_digests(root: Path, pdb_dir: Path, rels: Sequence[str]) -> None:
    """Drop the kept digests of ``rels``: files a part task found to hold other bytes than the
    digest the build listed them with (changed during the build, or a stale row), so the next build
    reads them again instead of keying them on that digest once more."""
    if not rels or not cache_path(root).is_file():
        return
    cache = DigestCache.load(root, pdb_dir)
    cache.forget(rels)
    cache.save()
