"""The one store a service process serves, reopened when the store on disk changes.

A build extends a store in place (new parts, then ``index/*.arrow`` swapped in with ``os.replace``)
or, after ``rm -rf``, writes it again from scratch with the same part names. A reader opened
before either keeps its old index (read into memory, not mapped: :meth:`StoreHolder._open_locked`)
and its cached zarr array metadata, and reads the parts by path: stale answers after an
extension, and after a rebuild zarr errors or, worse, zero-filled arrays read from parts that are
gone. So :meth:`StoreHolder.get` compares cheap
``stat`` signatures with the ones taken when the reader was opened:

- every request: the root ``zarr.json`` (one ``stat``). Removing the store, replacing it by a
  rename, and starting a build (which rewrites the root attributes) all change it, so no request
  reads a store that was taken away from under its reader; and once more after the read
  (:meth:`StoreHolder.current`): a store swapped *during* a read (a large entry, a streamed batch)
  is a 503, or a cut stream, not another build's rows under the id asked for;
- at most every ``check_seconds``: the index directory and every index table (inode, mtime, size;
  ``os.replace`` gives a new inode). An extension only adds parts, so until the check the old
  index still answers correctly, just without the new entries.

A changed signature reopens the store; the swap is one attribute assignment, so a request holds
either the old reader or the new one, never a mix.

Each opened index has an id (:func:`index_id`, sent as the ``x-featurecache-index`` header of
every answer, :mod:`services.lookup.middleware`): the index tables' names, sizes and ``mtime_ns``
as stamped before opening, so every worker process serving the same index files gives the same id,
and a rebuild or extension that writes new tables gives a new one. It starts with the newest
``mtime_ns`` (hex), so a client can tell an older index from a newer one (a worker that has not
looked again yet, during a swap).

A store of a format this code does not read (a newer featurecache rebuilt it in place, or wrote the
copy swapped in) is no state that waiting ends: requests answer 500 without ``retry-after``, saying
the store's format and that the server must be upgraded (:class:`StoreNotReadable`; review R28c s46
#10: it was the generic 503 "cannot be opened now", which ``LookupClient`` retried until its
deadline). It is opened again when its files change, as any store that failed to open.

A store is served only once it has a finished build's index: while its first build runs (after
``rm -rf``, or resumed after a kill) the index it publishes as it goes is flagged unfinished
(``featurecache.store.index.UNFINISHED_KEY``) and every request, ``/v1/ready`` included, answers
503 with ``retry-after``, as for a store with no index or a missing index file (``LocalStore``
refuses those), until the build ends.

An index whose files are of different generations (``featurecache.store.index.GENERATION_KEY``: a
rebuild killed while it renamed them into place, or one slow to) is not served: it is read again
for :data:`INDEX_RETRY_S` (a rename takes milliseconds), then the reader open before keeps being
served (one WARNING) and the store is opened again once its index files change, or every
``retry_seconds``. Without a reader open before, requests answer 503 as for a store not built.

The served directory itself removed (``st_nlink`` 0 when stat'ed by its path) is a state no
rebuild ends: the path still leads to the old, deleted directory because something pins it, a
bind mount of the store directory into a container (``-v /srv/store:/store``) above all, so the
store rebuilt or renamed into place at the host's path is never seen (review R26d s44 #1).
:meth:`StoreHolder.removed` says so (one ERROR), requests answer 503 and ``/v1/health`` 503 too,
so the container's HEALTHCHECK fails and a restart remounts the new directory. On the host the
path leads to the new directory (or to nothing while it is gone): no such state.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from featurecache.errors import FeatureCacheError, StoreError, StoreVersionError
from featurecache.store.layout import INDEX_DIR, PARTS_DIR, TABLES
from featurecache.store.reader import LocalStore, MixedIndexError, StoreBeingWritten
from services.lookup.sizes import size_count

log = logging.getLogger(__name__)

#: ``(inode, mtime_ns, size)`` of one file, None when it cannot be stat'ed
FileStamp = tuple[int, int, int] | None

#: the response header naming the index that answered (:func:`index_id`)
INDEX_HEADER = "x-featurecache-index"

#: seconds an open reads the index files again while they are of different generations (the
#: reader's own default, 5 s, held the holder's lock, and so every request, that long at each retry)
INDEX_RETRY_S = 0.5


#: what a client reads while the served directory is a removed one (:meth:`StoreHolder.removed`)
REMOVED_ROOT = (
    "the store directory was removed under the server, which cannot see one made in its place (a bind mount "
    "of the store directory itself): the server must be restarted"
)


#: what a client reads for each reason the store cannot be opened (the reason itself, which can name
#: paths, a build's host, pid and command line, is in the server's log: review R26d s44 #4)
NO_STORE = "the store does not exist (yet): it is not built, was removed or is being rebuilt"
FIRST_BUILD = "the store's first build has not finished: it is served once the build ends"
INDEX_BEING_REPLACED = "the store's index is being replaced: try again shortly"
CANNOT_OPEN = (
    "the store cannot be opened now (not built yet, being rebuilt, or unreadable): the reason is in the "
    "server's log"
)


class StoreUnavailable(StoreError):
    """The store cannot be read now (not built yet, removed, being rebuilt); answered 503 with
    ``retry-after``. Messages are fixed texts per cause: never the server's paths, nor what the
    library's message says of a build running (its host, pid and command line)."""


class StoreNotReadable(StoreError):
    """The store is of a format this server does not read: answered 500 without ``retry-after``
    (asking again cannot help until the server is upgraded). The message is
    :attr:`StoreVersionError.public <featurecache.errors.StoreVersionError>`: no path."""


def _stamp(path: str) -> FileStamp:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def link_note(path: Path) -> str:
    """`` (a link to TARGET)`` when ``path`` or a directory above it is a symbolic link (the store
    it leads to now, for the log: the server follows the link, so a store swapped in by replacing the
    link is served: review R36b s49 #2), else ``""``."""
    try:
        target = os.path.realpath(path)
    except OSError:
        return ""
    return f" (a link to {target})" if target != os.path.abspath(path) else ""


def index_id(stamps: tuple[FileStamp, ...]) -> str | None:
    """The id of the index whose tables (``TABLES``, in order) had these stamps: ``<newest mtime_ns,
    16 hex digits>-<16 hex digits of a hash of each table's name, size and mtime_ns>``. The inode is
    left out: a copy of the store that keeps sizes and mtimes (``rsync -a``) serves the same id. None
    when a table could not be stat'ed."""
    if len(stamps) != len(TABLES) or any(s is None for s in stamps):
        return None
    h = hashlib.blake2b(digest_size=8)
    newest = 0
    for name, stamp in zip(TABLES, stamps, strict=True):
        assert stamp is not None
        _, mtime_ns, size = stamp
        newest = max(newest, mtime_ns)
        h.update(f"{name}\0{size}\0{mtime_ns}\n".encode())
    return f"{newest:016x}-{h.hexdigest()}"


@dataclass(frozen=True)
class _Opened:
    """What one open attempt produced: the reader (None if it failed) and the stamps it saw."""

    reader: LocalStore | None
    root: FileStamp  # zarr.json, stamped before opening
    index: tuple[FileStamp, ...]  # index dir + each index table, stamped before opening
    error: str | None  # why the store could not be opened, for the log
    index_id: str | None = None  # :func:`index_id` of the index read (None when no reader)
    public: str = CANNOT_OPEN  # why, for a client (a fixed text per cause)
    #: the index on disk (``root`` / ``index``) is of mixed generations; ``reader`` is the one open
    #: before, kept: why it was not replaced
    torn: str | None = None
    #: the ``parts`` directory, as last looked at by :meth:`StoreHolder.unchanged` (stamped before
    #: opening): part directories deleted or added since change it
    parts: FileStamp = None
    #: the store is of a format this code does not read (``public`` says which): not retryable
    version_refused: bool = False


class StoreHolder:
    """Holds the reader. ``get()`` returns the reader of the store as it is now on disk, or raises
    :class:`StoreUnavailable` (:class:`StoreNotReadable` for a store of a format it does not read).

    A store that failed to open (not built yet, mount missing) is tried again at once when its
    files change, else at most every ``retry_seconds``, so a server started before its store
    becomes ready without a restart.
    """

    def __init__(self, path: Path, retry_seconds: float = 5.0, check_seconds: float = 1.0) -> None:
        self.path = path
        self.retry_seconds = retry_seconds
        self.check_seconds = check_seconds
        self._root_meta = str(path / "zarr.json")
        self._parts_dir = str(path / PARTS_DIR)
        index = path / INDEX_DIR
        self._index_files = [str(index)] + [str(index / f"{name}.arrow") for name in TABLES]
        self._opened = _Opened(None, None, (), "not opened yet")
        self._next_check = -float("inf")  # monotonic time of the next index check
        self._last_attempt = -float("inf")
        self._lock = threading.Lock()
        self._removed_logged = False

    def open(self) -> None:
        """Open the store now (called at startup)."""
        with self._lock:
            self._open_locked(_stamp(self._root_meta), self._index_stamps())

    def get(self) -> LocalStore:
        return self.snapshot()[0]

    def snapshot(self) -> tuple[LocalStore, str | None]:
        """:meth:`get`, with the id of the reader's index (:func:`index_id`; one attribute read,
        so the id is always the one of the reader returned)."""
        opened = self._opened
        if time.monotonic() < self._next_check and _stamp(self._root_meta) == opened.root:
            if opened.reader is None:
                raise self._unavailable(opened)
            return opened.reader, opened.index_id
        with self._lock:
            return self._refresh_locked()

    @property
    def index_id(self) -> str | None:
        """The id of the index open now (no look at the disk), None when none is open."""
        return self._opened.index_id

    def recheck(self) -> None:
        """A read failed: compare every stamp on the next ``get()`` instead of waiting for the
        next scheduled check."""
        self._next_check = -float("inf")

    def unchanged(self, reader: LocalStore | None) -> bool:
        """Whether ``reader`` is the reader open now and the store on disk is still as it was when
        it was opened (every stamp taken afresh). A read that failed on such a reader failed on the
        data itself (a damaged part), not on a store changing under it: retrying will not help.

        The ``parts`` directory counts from the last look: a store removed part directories first
        (``rm -rf`` lists ``parts`` before ``zarr.json`` on some file systems) read as a damaged one, a
        500 the client does not retry (review R12 s39 M1). A change there is answered once as a
        change (503, retried) and recorded; a part deleted by hand under an unchanged root and
        index is then damage (500) on the retry, as before."""
        opened = self._opened
        same = self.current(reader) and self._index_stamps() == opened.index
        parts = _stamp(self._parts_dir)
        if parts != opened.parts:
            with self._lock:
                if self._opened is opened:
                    self._opened = replace(opened, parts=parts)
            return False
        return same

    def current(self, reader: LocalStore | None) -> bool:
        """Whether ``reader`` is still the reader open now and the store's root ``zarr.json`` is as
        when it was opened (one ``stat``): asked *after* a read, so an answer read while the store
        was removed, rebuilt or swapped (every one rewrites the root) is not sent as data (review
        R12 s39 H1, H2: zero-filled entries, another build's atoms under the id asked for)."""
        opened = self._opened
        return reader is not None and opened.reader is reader and _stamp(self._root_meta) == opened.root

    @property
    def error(self) -> str | None:
        return self._opened.error

    def close(self) -> None:
        with self._lock:
            if self._opened.reader is not None:
                self._opened.reader.close()
            self._opened = _Opened(None, None, (), "closed")

    # ------------------------------------------------------------------ internals
    def _index_stamps(self) -> tuple[FileStamp, ...]:
        return tuple(_stamp(f) for f in self._index_files)

    def _refresh_locked(self) -> tuple[LocalStore, str | None]:
        now = time.monotonic()
        opened = self._opened
        root = _stamp(self._root_meta)
        if now >= self._next_check or root != opened.root:  # another thread may have just refreshed
            index = self._index_stamps()
            changed = root != opened.root or index != opened.index
            retry = (opened.reader is None or opened.torn is not None) and (
                now - self._last_attempt >= self.retry_seconds
            )
            if changed or retry:
                self._open_locked(root, index)
            self._next_check = now + self.check_seconds
        opened = self._opened
        if opened.reader is None:
            raise self._unavailable(opened)
        return opened.reader, opened.index_id

    def _open_locked(self, root: FileStamp, index: tuple[FileStamp, ...]) -> None:
        """Open the store as stamped by ``root`` / ``index`` (stamps taken *before* opening, so a
        change while opening shows at the next check) and swap it in."""
        self._last_attempt = time.monotonic()
        parts = _stamp(self._parts_dir)
        previous = self._opened.reader
        t0 = time.perf_counter()
        reader: LocalStore | None = None
        error: str | None = None
        public = CANNOT_OPEN
        unfinished = version_refused = False
        try:
            # the index read into memory, not mapped: a copy written in place over the store (cp -r
            # new/* store/) truncates and rewrites the files, which changed a mapped index's values
            # under the requests (zeros, 413 "677765546570172342847 array bytes", 500
            # UnicodeDecodeError) and crashed the server (SIGSEGV/SIGBUS); now requests read the index
            # read at the open until the next check sees the files changed (review R36b s49 #1)
            reader = LocalStore(self.path, index_retry_s=INDEX_RETRY_S, memory_map=False)
        except MixedIndexError as exc:
            if previous is not None:  # keep serving the consistent index it had
                self._keep_locked(root, index, str(exc))
                return
            error, public = f"{type(exc).__name__}: {exc}", INDEX_BEING_REPLACED
        except StoreBeingWritten as exc:
            error, public = f"{type(exc).__name__}: {exc}", exc.public
        except StoreVersionError as exc:
            error, public, version_refused = f"{type(exc).__name__}: {exc}", exc.public, True
        except (FeatureCacheError, OSError, ValueError) as exc:
            # ValueError: an index file read while a build swaps it (pyarrow's ArrowInvalid)
            error, public = f"{type(exc).__name__}: {exc}", NO_STORE if root is None else CANNOT_OPEN
        if reader is None and self.removed() is not None:
            error = public = REMOVED_ROOT  # (logged by removed(), once)
            version_refused = False
        if reader is not None and not reader.finished:
            # the first build's index so far (store.index.UNFINISHED_KEY): serving it would answer
            # "ready" with a part of the store and 404 for the entries still to come
            error = (f"the store's first build has not finished (its index lists {len(reader)} entries so "
                     "far); it is served once the build ends")  # fmt: skip
            public = FIRST_BUILD
            reader.close()
            reader = None
            unfinished = True
        # the stamps were taken before opening: an index swapped in meanwhile is read, under the old
        # id, and the next check reopens it under its own (an id never names a newer index than read)
        read_id = index_id(index[1:]) if reader is not None else None
        self._opened = _Opened(
            reader, root, index, error, read_id, public, parts=parts, version_refused=version_refused
        )
        if reader is not None:
            log.info("store %s%s %s: %d entries (%.0f ms)", self.path, link_note(self.path),
                     "reopened" if previous else "open", len(reader), 1e3 * (time.perf_counter() - t0))  # fmt: skip
            # /v1/info's sizes walk the parts not sized before (seconds on a 200k-entry store): start
            # now, in the background; /v1/info answers without them until they are counted
            size_count(reader)
        elif unfinished:
            log.warning("not serving store %s yet: %s", self.path, error)
        elif error == REMOVED_ROOT:
            log.debug("cannot open store %s: %s", self.path, error)
        else:
            log.error("cannot open store %s: %s", self.path, error)
        if previous is not None:
            # requests still holding it finish on it (close only drops cached array handles)
            previous.close()

    def _keep_locked(self, root: FileStamp, index: tuple[FileStamp, ...], why: str) -> None:
        """The index on disk (stamped ``root`` / ``index``) is of mixed generations: keep the reader
        open now, recorded with these stamps, so that the next change of the files (or
        ``retry_seconds``) opens the store again, and requests meanwhile do not."""
        opened = self._opened
        if opened.torn is None:
            log.warning("store %s: its index files are of different builds; still serving the index open "
                        "before (%s, %d entries) until they agree: %s", self.path, opened.index_id,
                        len(opened.reader) if opened.reader is not None else 0, why)  # fmt: skip
        else:
            log.debug("store %s: index files still of different builds: %s", self.path, why)
        self._opened = replace(opened, root=root, index=index, torn=why)

    def removed(self) -> str | None:
        """Why the store can never be served again by this process, or None: the directory its
        path leads to was removed (``st_nlink`` 0), so the path is pinned to a deleted directory (a
        bind mount of the store directory itself) and a new store at the host's path stays unseen.
        Logged once as an ERROR. One ``stat``: ``/v1/health`` asks on every probe."""
        try:
            removed = os.stat(self.path).st_nlink == 0
        except OSError:  # gone from the path (the host's rm -rf): a rebuild there is served
            return None
        if not removed:
            return None
        if not self._removed_logged:
            self._removed_logged = True
            log.error("store %s: the served directory was removed and its path still leads to it (a bind mount of "
                      "the store directory itself?): a store rebuilt or moved into place there is never seen; "
                      "restart the server (a container: mount the store's parent directory instead)",
                      self.path)  # fmt: skip
        return REMOVED_ROOT

    def _unavailable(self, opened: _Opened) -> StoreUnavailable | StoreNotReadable:
        if opened.version_refused:
            return StoreNotReadable(opened.public)
        return StoreUnavailable(f"the store is not open: {opened.public}")

    def redact(self, text: str) -> str:
        """``text`` without the store's path on this machine (the store is called ``STORE``)."""
        path = str(self.path)
        return text.replace(f"in store {path}", "in this store").replace(path, "STORE")
