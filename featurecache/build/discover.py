"""Find input structure files, give each an entry id and a key, and plan the parts still to build."""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import os
import stat
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from featurecache.build.digest_cache import DigestCache, digest_files
from featurecache.const import FEATURIZER_VERSION
from featurecache.errors import MSAError
from featurecache.parse.hits import msa_name_format, sniff_file
from featurecache.parse.structure import entry_stem, structure_format
from featurecache.store.definitions import part_manifest
from featurecache.store.index import WITHDRAWN_STAGE, complete_parts
from featurecache.store.layout import (
    ENTRY_KEY_CHARS,
    INDEX_DIR,
    MSA_PART_PREFIX,
    PART_DONE_FILE,
    PART_INDEX_DIR,
    PARTS_DIR,
    STRUCTURE_PART_PREFIX,
    part_name,
)
from featurecache.store.msa import MSAPartContents, write_msa_part
from featurecache.store.writer import SOURCE_DIR, PartContents, write_structure_part
from featurecache.text import first_named

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputFile:
    path: str  # absolute
    rel: str  # relative to the input directory (what the index records)
    entry_id: str
    fmt: str  # mmcif | pdb | bcif | "" (not a structure file name)
    sha256: str
    size: int
    key: str
    #: why the file is not read, whatever it holds ("": it is read): its name is not valid UTF-8
    #: (:func:`name_error`), it is a broken symbolic link (:func:`broken_link_error`) or not a
    #: regular file (:func:`not_regular_error`: a FIFO, which opening would block on); the build
    #: lists it as a failure of stage ``discover``
    name_error: str = ""
    #: the key that also holds the CCD's fingerprint (``build.ccd_keys``): its failure rows', and
    #: that of an entry built before entries recorded the definitions they used ("": not computed)
    ccd_key: str = ""


#: the reason of the failure row of a file whose path is not valid UTF-8 (:func:`escaped_path`)
NAME_NOT_UTF8 = "file name is not valid UTF-8"


def escaped_path(rel: str) -> str:
    """``rel`` (a path as ``os.fsdecode`` gives it: a byte of a name that is not valid UTF-8 is a
    lone surrogate, which no Arrow table, JSON file or UTF-8 stream can hold) with each such byte
    written ``\\xNN``: ``bad\\xff.cif``; a valid path unchanged. What the index records and
    messages show for a path (review R3: one such name crashed every build of its directory)."""
    return os.fsencode(rel).decode("utf-8", "backslashreplace")


def utf8_name(raw: str) -> bool:
    """Whether the path ``raw`` (as ``os.fsdecode`` gives it) is valid UTF-8 by its bytes, whatever
    the file-system encoding: under an ASCII one (``LC_ALL=C PYTHONUTF8=0``) ``é`` is two lone
    surrogates here, and still valid UTF-8 (review R38a s50 #4: it was rejected as not)."""
    try:
        os.fsencode(raw).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def native(rel: str) -> str:
    """The path text the file system takes for ``rel``, a path as the index records it (UTF-8 text,
    :func:`escaped_path`): itself under a UTF-8 file-system encoding; under an ASCII one its
    non-ASCII bytes as lone surrogates (``os.fsdecode``), which ``os.stat`` encodes back to them
    (``é`` itself cannot be encoded there: UnicodeEncodeError)."""
    return os.fsdecode(rel.encode("utf-8", "surrogateescape"))


def present(path: Path) -> bool | None:
    """Whether anything (a file, a directory, a link, broken or not) is at ``path``, by ``os.lstat``:
    False when the system says nothing is (ENOENT, ENOTDIR, ELOOP); None when it cannot tell
    (EACCES: a directory on the way that cannot be searched; an I/O error): not known to be gone.
    ``Path.exists`` raises on those (review R38a s50 #1: a build, and ``prune --sources-gone``,
    crashed when a failed input's directory could no longer be searched)."""
    try:
        os.lstat(path)
    except OSError as exc:
        return False if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP) else None
    except ValueError:  # a NUL in the name (not a path anything can be at)
        return False
    return True


#: paths :func:`warn_unknown` names, at most (then how many more)
UNKNOWN_NAMED = 5


def warn_unknown(unknown: list[Path], kept: str) -> None:
    """One warning naming the paths whose presence :func:`present` could not tell (``kept``: what
    is kept for them, as if they were there)."""
    if not unknown:
        return
    reasons = []
    for p in unknown:
        try:
            os.lstat(p)
            why = "?"
        except OSError as exc:
            why = exc.strerror or str(exc)
        reasons.append(f"{escaped_path(str(p))} ({why})")
    log.warning(
        "cannot tell whether %d path%s still exist%s: %s; not known to be gone, so kept: %s",
        len(unknown), "s" if len(unknown) != 1 else "", "" if len(unknown) != 1 else "s",
        first_named(reasons, UNKNOWN_NAMED, "; "), kept,
    )  # fmt: skip


def name_error(rel: str) -> str:
    """The failure reason of the input whose escaped path is ``rel`` (:func:`escaped_path`)."""
    return f"{NAME_NOT_UTF8}: {rel} (bytes that are not UTF-8 shown as \\xNN); rename the file to use it"


#: What a file that is not a regular file is, by ``stat.S_IFMT`` of its mode, and why it is not opened.
_FILE_KINDS = {
    stat.S_IFIFO: ("a named pipe (FIFO)", "opening a pipe waits for a writer: the build would hang"),
    stat.S_IFSOCK: ("a socket", "a socket cannot be opened as a file"),
    stat.S_IFCHR: ("a character device", "a device may never end"),
    stat.S_IFBLK: ("a block device", "a device is no structure file"),
}


def not_regular_error(rel: str, mode: int, what: str = "structure") -> str:
    """The failure reason of the input ``rel`` whose mode (``os.stat``, through a symlink) is not a
    regular file's; it is not opened (:data:`_FILE_KINDS`). ``what`` the file was to hold."""
    kind, why = _FILE_KINDS.get(
        stat.S_IFMT(mode), (f"of file type {stat.S_IFMT(mode):#o}", "not a file to read")
    )
    return f"not a regular file: {rel} is {kind}; not opened ({why}): write the {what} to a regular file"


def broken_link_error(rel: str, path: Path, exc: OSError) -> str:
    """The failure reason of the input ``rel`` (at ``path``), a symbolic link whose target
    cannot be reached (``exc``: what ``os.stat`` through it raised): the target as the link has it,
    and where that path does not say, the path it comes to (through relative targets and links to
    links)."""
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    reason = exc.strerror or str(exc)
    end = os.path.realpath(path)
    where = f" (that is {end})" if end != target else ""
    return f"broken symbolic link: {rel} -> {target}{where}: {reason}; not read"


def resolved(path: Path) -> Path:
    """``path.resolve()``, or the absolute path where it cannot be resolved (a symlink loop: the
    input is then kept, and reading it fails with a failure record naming it)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        return path.absolute()


def entry_key(sha256: str, entry_id: str, config_hash: str) -> str:
    doc = json.dumps(
        {"sha256": sha256, "id": entry_id, "config": config_hash, "v": FEATURIZER_VERSION}, sort_keys=True
    )
    return hashlib.sha256(doc.encode()).hexdigest()[:ENTRY_KEY_CHARS]


def _id_forms(rel: str) -> list[str]:
    """Candidate ids of an input, shortest first: the stem, the file name without ``.gz``, the
    relative path without ``.gz`` and the relative path (``/`` written ``__``: ids travel in URLs).
    A directory that cannot be listed (:func:`unlisted_rel`, a failure only) has its path, which
    no file's id can be: it never takes an id from a file."""
    if rel.endswith("/"):
        return [rel]
    name = rel.rsplit("/", 1)[-1]
    no_gz = rel[:-3] if rel.endswith(".gz") else rel
    forms = [entry_stem(name), name[:-3] if name.endswith(".gz") else name, no_gz.replace("/", "__"),
             rel.replace("/", "__")]  # fmt: skip
    return list(dict.fromkeys(forms))


def assign_ids(
    rels: list[str], existing: dict[str, str] | None = None, released: Iterable[str] = ()
) -> dict[str, str]:
    """A unique entry id for each relative path.

    An input the store already holds (same relative path) keeps its id, so ids never change once
    given. Every other input takes the id a fresh build of all of ``rels`` would give it: the
    shortest of :func:`_id_forms` that no other input claims (``7a4d-assembly1.cif.gz`` →
    ``7a4d-assembly1``; ``1A8O.cif`` next to ``1A8O.pdb`` → ``1A8O.cif``; ``a/x.pdb`` next to
    ``b/x.pdb`` → ``a__x.pdb``; ``y.cif`` next to ``y.cif.gz`` → ``y.cif`` and ``y.cif.gz``), or a
    longer form where a stored entry of another path holds that id. So a build killed after some
    parts were written and then resumed gives the ids of a build that was not interrupted (the
    stored inputs take part in the contest as in the fresh build), and ``1A8O.cif`` added next to
    a stored ``1A8O.pdb`` whose id is ``1A8O`` becomes ``1A8O.cif`` while the stored one keeps ``1A8O``.

    A stored id of ``released`` (the ids of this directory's stored entries, :meth:`StoredEntries.released`)
    whose path is not among ``rels`` blocks nothing: its file was moved (``02/102m.cif``, a PDB
    divided layout) or recompressed (``102m.cif.gz``), and the input that claims the id as a fresh
    build would takes it, replacing that entry, instead of becoming a second entry of a suffixed id
    beside it (review R26b s44 #3). Other directories' stored ids keep blocking.
    """
    inputs = set(rels)
    free = set(released)
    existing = {  # id -> source path
        eid: path for eid, path in (existing or {}).items() if eid not in free or path in inputs
    }  # fmt: skip
    kept = {path: eid for eid, path in existing.items()}
    fixed = {rel: kept[rel] for rel in rels if rel in kept}
    forms = {rel: _id_forms(rel) for rel in rels}  # every input contends, as in a fresh build
    level = dict.fromkeys(forms, 0)

    def current(rel: str) -> str:
        if level[rel] < len(forms[rel]):
            return forms[rel][level[rel]]
        # the path flattened still collides (``a__b.cif`` next to ``a/b.cif``): add the path's hash
        return f"{forms[rel][-1]}-{hashlib.sha256(rel.encode()).hexdigest()[:8]}"

    while True:
        ids = {rel: current(rel) for rel in forms}
        claimants: dict[str, list[str]] = {}
        for rel, eid in ids.items():
            claimants.setdefault(eid, []).append(rel)
        bump = []
        for eid, rels_ in claimants.items():
            # held by a stored entry of a path that does not claim it here (a stored path's own id
            # is fixed: it only has to stay clear of the new inputs' ids)
            taken = eid in existing and existing[eid] not in rels_
            if len(rels_) == 1 and not taken:
                continue
            if taken and all(r in fixed for r in rels_):
                continue  # only stored inputs, whose ids are fixed anyway
            movable = [r for r in rels_ if level[r] < len(forms[r]) - 1]
            # one claimant already at its longest form keeps the id when the others can move on
            bump += movable if movable and len(rels_) - len(movable) <= (0 if taken else 1) else rels_
        if not bump:
            return {rel: fixed.get(rel, eid) for rel, eid in ids.items()}
        for rel in bump:
            level[rel] += 1


#: Symlinked directories named in the warning of :func:`walk_inputs` (the count says the rest).
WALK_SKIPPED_SHOWN = 5


def store_skip(top: Path, exclude: Path | None) -> Path | None:
    """The resolved ``exclude`` (the store) that a walk of the directory whose resolved path is
    ``top`` leaves out, or None: no store, or ``top`` lies inside the store (then nothing is left
    out: every file would be)."""
    if exclude is None:
        return None
    skip = resolved(Path(exclude))
    return None if top != skip and top.is_relative_to(skip) else skip


def is_store_root(directory: Path) -> bool:
    """Whether ``directory`` (below an input directory) is a featurecache store's root, laid out as
    ``store.root.init_store`` writes one (every store format has been): its ``zarr.json`` a zarr
    group whose attributes hold an int ``format_version``, an int ``schema_version`` and a
    ``featurizer_version``, next to the directories ``index/`` and ``parts/`` (or links to them). Any zarr
    group with a ``format_version`` (another tool's, ``"1.0"``) is not enough (review R39a s50 #2:
    its directory's files stopped being inputs and their entries were "sources gone"). Stricter
    than ``store.root.check_store_dir``, which refuses to write into any group with a
    ``format_version`` given as ``--out``: here a store wrongly taken for one drops inputs.

    Only a small regular ``zarr.json`` is read, never blocking
    (``store.root.small_group_attributes``): a FIFO or device of that name (or a link to one) is no store, and
    stays an input that is never opened (review R39a s50 #1); links are judged by what they lead
    to, so a store mirrored with ``cp -rs`` is skipped too (review R39b s50 #1)."""
    from featurecache.store.root import small_group_attributes

    for sub in (INDEX_DIR, PARTS_DIR):
        try:
            if not stat.S_ISDIR(os.stat(directory / sub).st_mode):  # a link to a directory too
                return False
        except OSError:
            return False
    attrs = small_group_attributes(directory / "zarr.json")
    return (
        attrs is not None
        and type(attrs.get("format_version")) is int
        and type(attrs.get("schema_version")) is int
        and isinstance(attrs.get("featurizer_version"), str)
    )


#: featurecache stores inside an input directory named in the warning of :func:`walk_inputs`
STORES_SKIPPED_SHOWN = 5


def walk_inputs(
    root: Path, exclude: Path | None = None, aliases: dict[str, list[str]] | None = None, warn: bool = True,
    unlisted: list[tuple[Path, str]] | None = None,
) -> Iterator[Path]:  # fmt: skip
    """Every entry under ``root`` that is not a directory (files, symlinks to files, broken symlinks,
    FIFOs, sockets, devices), as seen from ``root``: no hidden name on the way, symlinked
    directories followed, each real directory read once, the store ``exclude`` left out wherever
    the walk meets it (by resolved path: through a link too; :func:`store_skip`).

    Order (deterministic): the directories reachable without a symlinked directory first (names
    sorted, depth first), so every file keeps its plain path; then each symlinked directory in the
    order met, walked the same way. A symlinked directory whose real directory was already read (a
    link to an ancestor, which would loop, or a second link to one directory) is not read again;
    one warning at the end of the walk names them (``warn=False``: none, for a second walk of one
    directory in a build). A directory below ``root`` that is a featurecache store's root
    (:func:`is_store_root`: another store kept next to the inputs) is left out as the store
    ``exclude`` is, and named in one warning at the end (review R38a s50 #8: each of its files was
    a failed input). A directory that cannot be listed goes to ``unlisted`` (the directory as
    seen, and why), when given, for the caller to record as a failure (review R38a s50 #2); else
    it is a warning.

    ``aliases``, when given, is filled with the other paths by which a directory read once is
    reached: the path it was read as → the symlinked directories (as seen) that were not read again
    for it (posix, relative to ``root``; "" is ``root``); a link to an ancestor (a loop) is none.
    :func:`alias_paths` gives a file's other paths from it.
    """
    root = Path(root)
    top = resolved(root)
    skip = store_skip(top, exclude)
    if skip is not None and top == skip:
        return
    read: dict[Path, Path] = {top: root}  # real directory -> the path it was read as
    again: list[tuple[Path, Path]] = []  # (symlinked directory not read, its real directory)
    links: deque[Path] = deque()
    stack: list[tuple[Path, Path]] = [(root, top)]  # (directory as seen, its real path)
    stores: list[Path] = []  # featurecache stores met below root (as seen): not read

    def walk_plain() -> Iterator[Path]:
        while stack:
            here, real = stack.pop()
            try:
                with os.scandir(here) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                if unlisted is not None:
                    unlisted.append((here, exc.strerror or str(exc)))
                else:
                    log.warning("cannot list %s: %s; its files are not read", here, exc)
                continue
            if here != root and any(e.name == "zarr.json" for e in entries) and is_store_root(here):
                stores.append(here)
                continue
            subdirs: list[tuple[Path, Path]] = []
            for e in entries:
                if e.name.startswith("."):
                    continue
                p = here / e.name
                try:
                    is_dir = e.is_dir()
                except OSError:  # a symlink loop: kept as a file (reading it fails, naming it)
                    is_dir = False
                if is_dir and e.is_symlink():
                    links.append(p)
                elif is_dir:
                    sub = real / e.name
                    if skip is not None and sub.is_relative_to(skip):
                        continue
                    if sub in read:
                        again.append((p, sub))
                        continue
                    read[sub] = p
                    subdirs.append((p, sub))
                elif skip is not None and e.is_symlink() and resolved(p).is_relative_to(skip):
                    continue
                else:
                    yield p
            stack.extend(reversed(subdirs))  # depth first, names in order

    yield from walk_plain()
    while links:
        link = links.popleft()
        real = resolved(link)
        if skip is not None and real.is_relative_to(skip):
            continue
        if real in read:
            again.append((link, real))
            continue
        read[real] = link
        stack.append((link, real))
        yield from walk_plain()
    if aliases is not None:
        for p, real in again:
            _add_alias(aliases, _rel_posix(read[real], root), _rel_posix(p, root))
    if stores and warn:
        log.warning(
            "%s: %d featurecache store%s inside, not read as input%s (as the build's own store is not): %s",
            root, len(stores), "s" if len(stores) != 1 else "", "s" if len(stores) != 1 else "",
            first_named((escaped_path(str(p)) for p in stores), STORES_SKIPPED_SHOWN, "; "),
        )  # fmt: skip
    if again and warn:
        shown = first_named(
            (f"{p} ({real}, read as {read[real]})" for p, real in again), WALK_SKIPPED_SHOWN, "; "
        )
        log.warning(
            "%s: %d director%s not read again: each real directory is read once (a symlink to an ancestor "
            "would loop; a second path to one directory would read its files twice): %s",
            root, len(again), "y" if len(again) == 1 else "ies", shown,
        )  # fmt: skip


def _rel_posix(path: Path, root: Path) -> str:
    """``path`` (under ``root``, as seen) relative to ``root``, posix; "" for ``root`` itself."""
    rel = path.relative_to(root).as_posix()
    return "" if rel == "." else rel


def _add_alias(aliases: dict[str, list[str]], read_as: str, other: str) -> None:
    """Record ``other`` as a second path of the directory read as ``read_as``, unless it lies
    inside that directory (a link to an ancestor: every path through it would loop)."""
    if read_as == "" or other.startswith(read_as + "/"):
        return
    if other not in aliases.setdefault(read_as, []):
        aliases[read_as].append(other)


#: Most other paths :func:`alias_paths` gives for one file (links in cycles could give ever more).
MAX_ALIASES = 32


def alias_paths(rel: str, aliases: dict[str, list[str]]) -> list[str]:
    """The other paths (posix, relative to the walk's root) that reach the file the walk read as
    ``rel``, from ``aliases`` (:func:`walk_inputs`): a leading directory of ``rel`` read once is
    replaced by each other path of it, and so on for the paths that gives, each link used at most
    once in a path; sorted, at most :data:`MAX_ALIASES`. ``[]`` when no directory of it has another
    path (the common case, a few dict look-ups)."""
    if not aliases:
        return []
    out: set[str] = set()
    todo: deque[tuple[str, frozenset[str]]] = deque([(rel, frozenset())])
    while todo and len(out) < MAX_ALIASES:
        path, used = todo.popleft()
        parts = path.split("/")
        for k in range(1, len(parts)):
            prefix = "/".join(parts[:k])
            for other in aliases.get(prefix, ()):
                if other in used:
                    continue
                alt = other + "/" + "/".join(parts[k:])
                if alt != rel and alt not in out and len(out) < MAX_ALIASES:
                    out.add(alt)
                    todo.append((alt, used | {other}))
    return sorted(out)


def input_paths(
    pdb_dir: Path, exclude: Path | None = None, aliases: dict[str, list[str]] | None = None, warn: bool = True,
    unlisted: list[tuple[Path, str]] | None = None,
) -> Iterator[Path]:  # fmt: skip
    """The files a build lists under ``pdb_dir`` (:func:`walk_inputs`: recursive, symlinked
    directories followed, each real directory once): every non-hidden file, every broken symlink
    or symlink loop, and every FIFO, socket or device (kept, so that each is accounted for: the
    build lists it as a failure naming it, :func:`unread_reason`); ``exclude`` (the store itself,
    when the walk meets it) is skipped; ``aliases``, ``warn``, ``unlisted``: as :func:`walk_inputs`
    takes them."""
    yield from walk_inputs(Path(pdb_dir), exclude, aliases, warn, unlisted)


def unlisted_rel(directory: Path, top: Path) -> str:
    """The path a failure records for ``directory`` (under ``top``, as seen), which cannot be
    listed: relative to ``top``, escaped (:func:`escaped_path`), with a trailing ``/`` (``sub/``;
    ``./`` for ``top`` itself), which no file's path has."""
    rel = directory.relative_to(top).as_posix()
    return escaped_path(rel) + "/"


def unlisted_error(rel: str, why: str, built: str = "entries") -> str:
    """The failure reason of the directory ``rel`` (:func:`unlisted_rel`) that cannot be listed;
    ``built``: what the store holds from its files (``entries``, ``MSAs``)."""
    return (f"cannot list the directory {rel}: {why}; none of its files is read (the {built} stored from them "
            "are kept): make it readable (and searchable) and run the build again")  # fmt: skip


def under_unlisted(rel: str, unlisted: Iterable[str]) -> bool:
    """Whether the path ``rel`` lies under one of the directories ``unlisted`` (:func:`unlisted_rel`)."""
    return any(d == "./" or rel.startswith(d) for d in unlisted)


def unread_reason(path: Path, rel: str, what: str = "structure") -> str:
    """Why the input at ``path`` (``rel``: its escaped path) is not read ("": it is read): a broken
    symbolic link (:func:`broken_link_error`) or not a regular file (:func:`not_regular_error`;
    ``what`` the file was to hold). A symlink loop is read (that fails, and the failure names it);
    so is a file ``os.stat`` cannot reach for another reason."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR) and path.is_symlink():
            return broken_link_error(rel, path, exc)
        return ""
    return "" if stat.S_ISREG(mode) else not_regular_error(rel, mode, what)


class MSADirFiles:
    """Which files the MSA stage reads as its inputs (``msa_stage._candidate_files``): every file
    (a symlink to a file counts, a broken one does not) under ``msa_dir`` with no hidden path part
    below it, symlinked directories followed. Directories are compared resolved (``msa_dir`` or the
    structure directory may be named through a symlink); a file is placed by the nearest of its
    directories (as seen) that resolves inside ``msa_dir``, so a symlinked file under ``msa_dir`` is
    the MSA stage's wherever it points to, and so is a file under a symlinked directory there."""

    def __init__(self, msa_dir: Path | None) -> None:
        self.root = resolved(Path(msa_dir)) if msa_dir is not None else None
        self._dirs: dict[Path, Path] = {}

    def _real(self, d: Path) -> Path:
        real = self._dirs.get(d)
        if real is None:
            real = self._dirs[d] = resolved(d)
        return real

    def reads(self, path: Path) -> bool:
        """Whether the MSA stage lists ``path`` (a file found under the structure directory)."""
        if self.root is None or not path.is_file():
            return False
        d = path.parent
        while True:
            real = self._real(d)
            if real.is_relative_to(self.root):
                below = real.relative_to(self.root).parts + path.relative_to(d).parts
                return not any(part.startswith(".") for part in below)
            if d.parent == d:
                return False
            d = d.parent


def msa_file_name(name: str) -> bool:
    """Whether ``name`` names a file of a format the MSA stage's parsers take: ``.a3m``, ``.sto``,
    ``.stockholm``, ``.hhr`` or ``.m8``, each optionally followed by ``.gz``, in any case
    (:func:`~featurecache.parse.hits.msa_name_format`, as
    :func:`~featurecache.parse.hits.sniff_msa_format` reads names)."""
    return bool(msa_name_format(name))


#: formats the MSA stage builds from (``sniff_msa_format``'s other answers, "empty" and "unknown", it skips)
_MSA_CONTENT_FORMATS = frozenset({"a3m", "sto", "hhr", "m8"})


def msa_stage_input(path: Path, msa_files: MSADirFiles) -> bool:
    """Whether a file under the structure directory is the MSA stage's, not a structure input: a
    file the MSA stage reads (under ``--msa-dir``), not of a structure format, that the MSA stage
    uses: its name is an MSA-stage format (:func:`msa_file_name`), or its content is (the stage
    reads every file and its content decides: an aligned ``.fasta``, ``.fa`` or ``.aln`` is read as
    a3m, review R31d s47 #2; only such files' first 4 KB are read here), or it cannot be read (the MSA
    stage lists it as its failure). Structure files there stay
    structure inputs; so does every other file (``1A8O.pdb1``, ``x.cif.bz2``, ``README.txt``):
    neither stage can use it, and as a structure input it is listed as a failure, as with separate
    directories."""
    if structure_format(path.name) or not msa_files.reads(path):
        return False
    if msa_file_name(path.name):
        return True
    try:
        return sniff_file(path) in _MSA_CONTENT_FORMATS
    except (OSError, MSAError):
        # unreadable (a damaged .gz, no permission): the MSA stage, which reads every file under
        # --msa-dir, lists it as its failure naming the reason; listed once (review R32a s47 #1)
        return True


def discover(
    pdb_dir: Path, config_hash: str, existing_ids: dict[str, str] | None = None, exclude: Path | None = None,
    msa_dir: Path | None = None, cache_root: Path | None = None, progress: bool = False,
    stored: StoredEntries | None = None,
) -> list[InputFile]:  # fmt: skip
    """Every non-hidden file under ``pdb_dir`` (recursive), sorted by relative path, with a unique
    entry id each (:func:`assign_ids`; ``existing_ids``: id → source path of the store's entries;
    ``stored``, in its place: the store's entries, whose ids of this directory a file moved within
    it, or recompressed, takes over: :meth:`StoredEntries.released`)
    and the SHA-256 of its bytes: read, unless ``cache_root`` (the store) keeps the digest of a file
    whose stat has not changed since (:mod:`~featurecache.build.digest_cache`); without it every
    file is read.

    Files whose names are not structure formats are kept too: the build records them as failures,
    so every file is accounted for; except MSA-stage files (:func:`msa_file_name`: ``.a3m``,
    ``.sto``, ``.stockholm``, ``.hhr``, ``.m8``, optionally ``.gz``) under ``msa_dir`` (the same
    directory as ``pdb_dir``, or one inside it): they are the MSA stage's inputs, which accounts
    for them (:func:`msa_stage_input`). ``exclude`` (the store itself, when it lies inside
    ``pdb_dir``) is skipped. A broken symbolic link, a FIFO or a device is kept unread (no digest; a FIFO is never
    opened: that would block): its ``name_error`` says why (:func:`unread_reason`); so is a
    directory that cannot be listed, by its path with a trailing ``/`` (:func:`unlisted_rel`).

    A file the walk reads through one path of a directory reachable by several (symlinked
    directories, :func:`walk_inputs`) takes the path a stored entry records for it where there is
    one (:func:`stored_paths`), so a second link to a stored directory, or a stored directory
    turned into a link, neither changes its id nor makes it a second entry.
    """
    pdb_dir = Path(pdb_dir)
    files, rels, ids, bad, unlisted = _walk(pdb_dir, existing_ids, exclude, msa_dir, stored=stored)
    # a FIFO is never opened (that would wait for a writer): only regular files have a digest
    reasons = [unlisted.get(rel) or unread_reason(p, rel) for p, rel in zip(files, rels, strict=True)]
    todo = [k for k, reason in enumerate(reasons) if not reason]
    cache = DigestCache.load(cache_root, pdb_dir) if cache_root is not None else None
    read = digest_files([files[k] for k in todo], [rels[k] for k in todo], cache, progress)
    digests: list[tuple[str, int]] = [("", 0)] * len(files)
    for k, digest in zip(todo, read, strict=True):
        digests[k] = digest
    out = []
    for p, rel, (sha, size), reason in zip(files, rels, digests, reasons, strict=True):
        entry_id = ids[rel]
        fmt = "" if rel in unlisted else structure_format(p.name) or ""
        out.append(InputFile(str(resolved(p)), rel, entry_id, fmt, sha, size,
                             entry_key(sha, entry_id, config_hash), name_error(rel) if rel in bad else reason))  # fmt: skip
    return out


def _walk(
    pdb_dir: Path, existing_ids: dict[str, str] | None, exclude: Path | None, msa_dir: Path | None,
    warn: bool = True, stored: StoredEntries | None = None,
) -> tuple[list[Path], list[str], dict[str, str], set[str], dict[str, str]]:  # fmt: skip
    """:func:`discover`'s files, their paths relative to ``pdb_dir`` (sorted; :func:`escaped_path`)
    and ids, unread; the paths among them that are not valid UTF-8 (escaped; by their bytes,
    :func:`utf8_name`, whatever the file-system encoding); and the directories that cannot be
    listed (:func:`unlisted_rel` → :func:`unlisted_error`), which are among the files. ``warn``: as
    :func:`walk_inputs` takes it; ``stored``: the store's entries (then ``existing_ids`` is theirs),
    whose ids of this directory a moved file may take (:func:`assign_ids`): not those of a stored
    entry under a directory that cannot be listed (its file is not known to be gone)."""
    if stored is not None:
        existing_ids = stored.paths
    msa_files = MSADirFiles(msa_dir)
    aliases: dict[str, list[str]] = {}
    unlisted_dirs: list[tuple[Path, str]] = []
    walked = [p for p in input_paths(pdb_dir, exclude, aliases, warn, unlisted_dirs)
              if not msa_stage_input(p, msa_files)]  # fmt: skip
    raw = stored_paths([p.relative_to(pdb_dir).as_posix() for p in walked], aliases,
                       set((existing_ids or {}).values()))  # fmt: skip
    rels = [escaped_path(r) for r in raw]
    bad = {rel for rel, r in zip(rels, raw, strict=True) if not utf8_name(r)}
    unlisted: dict[str, str] = {}
    for d, why in unlisted_dirs:
        rel = unlisted_rel(d, pdb_dir)
        unlisted[rel] = unlisted_error(rel, why)
        walked.append(d)
        rels.append(rel)
    order = sorted(range(len(walked)), key=lambda k: pdb_dir / rels[k])
    files, rels = [walked[k] for k in order], [rels[k] for k in order]
    kept = [path for path in (existing_ids or {}).values() if under_unlisted(path, unlisted)]
    released = stored.released(pdb_dir, rels + kept) if stored is not None else set()
    return files, rels, assign_ids(rels, existing_ids, released), bad, unlisted


def input_ids(
    pdb_dir: Path, existing_ids: dict[str, str] | None = None, exclude: Path | None = None,
    msa_dir: Path | None = None, warn: bool = True, stored: StoredEntries | None = None,
) -> dict[str, str]:  # fmt: skip
    """Path (relative to ``pdb_dir``) → entry id of the inputs :func:`discover` finds, without
    reading the files (``featurecache prune --sources-gone``; the build's check of the settings it
    leaves out, ``warn=False``: the build's own walk warns of what it does not read again);
    ``stored``: as :func:`discover` takes it."""
    _files, rels, ids, _bad, _unlisted = _walk(Path(pdb_dir), existing_ids, exclude, msa_dir, warn, stored)
    return {rel: ids[rel] for rel in rels}


def stored_paths(rels: list[str], aliases: dict[str, list[str]], stored: set[str]) -> list[str]:
    """``rels`` (the paths the walk read files as), each replaced by the stored path of the same
    file where the store holds the file under another path (one of :func:`alias_paths`; of several,
    the first in order) and not under this one; a stored path is taken once and never from a path
    the walk read. A fresh store (``stored`` empty) keeps the walk's paths."""
    if not stored or not aliases:
        return list(rels)
    taken = set(rels)
    out = []
    for rel in rels:
        if rel not in stored:
            alt = next((a for a in alias_paths(rel, aliases) if a in stored and a not in taken), None)
            if alt is not None:
                taken.add(alt)
                rel = alt
        out.append(rel)
    return out


def part_source_dir(root: Path, part: str) -> str:
    """The directory (resolved) that part ``part`` recorded for its rows' relative paths (its
    manifest's ``source_dir``): a structure part's ``--pdb-dir``, an MSA part's ``--msa-dir``; ""
    when it recorded none (a part written before session 19, an MSA part of a build without
    ``--msa-dir``) or its manifest cannot be read."""
    value = part_manifest(root, part).get(SOURCE_DIR, "")
    return value if isinstance(value, str) else ""


def part_source_dirs(root: Path) -> Callable[[str], str]:
    """:func:`part_source_dir` of ``root``'s parts by part name, each part's manifest read once
    (the calls' cache lives as long as the returned function)."""
    return functools.cache(functools.partial(part_source_dir, root))


@dataclass(frozen=True)
class DirectoryParts:
    """Which parts of a store hold rows of one input directory (``here``: its resolved path): a part
    whose manifest records ``here`` (``recorded_in``: :func:`part_source_dir` by part), or records
    one of ``moved``, directories that no longer exist whose rows this directory's inputs match (it
    was renamed or moved: :func:`directory_parts`). Called with a part's name. A part recording no
    directory (written before session 19) is no directory's."""

    here: str
    moved: frozenset[str]
    recorded_in: Callable[[str], str]

    def __call__(self, part: str) -> bool:
        recorded = self.recorded_in(part)
        return recorded == self.here or (bool(recorded) and recorded in self.moved)


def directory_parts(
    root: Path, directory: Path, matched: Iterable[str], recorded_in: Callable[[str], str] | None = None
) -> DirectoryParts:
    """The parts of the store ``root`` whose rows are of the input directory ``directory`` (a
    ``--pdb-dir`` or ``--msa-dir``): those recording it, and every part recording a directory that
    no longer exists when one of them is among ``matched`` (the parts holding a row that an input
    of ``directory`` matches: an entry of the same relative path, an MSA of one of the same
    files). A part records the directory it was built from only when it is written, so after
    ``mv pdb pdb_renamed`` every stored entry was of a directory that no longer exists, and the
    files removed after that were never reported nor prunable (review R26b s44 #2): such a
    directory's rows are this directory's now (re-homed). A directory that still exists keeps its
    own rows (a store extended from several). The one rule of the build's ``sources gone``, of
    ``prune --sources-gone`` (entries and MSAs) and of the build's withdrawn failures."""
    here = str(resolved(Path(directory)))
    recorded_in = recorded_in or part_source_dirs(root)
    others = {recorded_in(part) for part in set(matched)} - {here, ""}
    return DirectoryParts(here, frozenset(d for d in others if not os.path.isdir(d)), recorded_in)


class StoredEntries:
    """The entries of a store's index as the inputs of one ``--pdb-dir`` meet them: ``paths`` (id →
    source path, relative to the directory its part records) and ``parts`` (id → part). Each part's
    manifest is read once for all its calls (``recorded_in``)."""

    def __init__(self, root: Path, entries: pa.Table) -> None:
        self.root = Path(root)
        self.paths = existing_entry_ids(entries)
        ids = entries.column("id").to_pylist()
        parts = entries.column("part").to_pylist() if "part" in entries.column_names else []
        self.parts: dict[str, str] = dict(zip(ids, parts, strict=True)) if parts else {}
        self.recorded_in = part_source_dirs(self.root)

    def released(self, pdb_dir: Path, rels: Iterable[str]) -> set[str]:
        """The ids :func:`assign_ids` may give to other inputs of ``pdb_dir`` (``rels``): those of
        its stored entries (:meth:`homes`) whose source path is not among ``rels``."""
        inputs = set(rels)
        homes = self.homes(pdb_dir, inputs)
        return {
            eid for eid, path in self.paths.items()
            if path not in inputs and eid in self.parts and homes(self.parts[eid])
        }  # fmt: skip

    def homes(self, pdb_dir: Path, rels: Iterable[str]) -> DirectoryParts:
        """:func:`directory_parts` of ``pdb_dir``, whose inputs are ``rels`` (relative paths): a
        stored entry matches an input of its source path, which the build takes it for whatever
        its part records (:func:`assign_ids` keeps a stored path's id). Not by id alone: a file
        of another directory that shares a stem (``x/1psm.cif``) would take a gone directory's
        entries for its own."""
        inputs = set(rels)
        matched = {
            self.parts[eid] for eid, path in self.paths.items() if eid in self.parts and path in inputs
        }
        return directory_parts(self.root, pdb_dir, matched, self.recorded_in)


#: the stage of an MSA file's failure (``msa_stage``); its path is relative to ``--msa-dir``
MSA_STAGE = "msa"


def withdraw_failures(
    root: Path, pdb_dir: Path, msa_dir: Path | None, inputs: list[InputFile], failures: pa.Table,
    homes: Callable[[str], bool] | None = None,
) -> list[dict[str, str]]:  # fmt: skip
    """Withdraw the listed failures of paths that are no longer inputs of this build; writes
    :data:`~featurecache.store.index.WITHDRAWN_STAGE` rows, those of structure failures in one
    failure-only structure part, those of MSA failures in one failure-only MSA part (the index then
    lists them in ``withdrawn``, not ``failures``); returns those rows (none: nothing written).
    Three reasons:

    - the MSA stage reads the file (:func:`msa_stage_input`): a build before session 18 took every
      file under ``--pdb-dir``, so a ``--msa-dir`` inside it left a ``not a structure file name``
      failure per MSA file, and the store kept listing them;
    - the path is no longer an input under ``--pdb-dir`` (its file was deleted or moved away), and
      the failure was recorded by a build from this same directory: the part that holds it
      recorded ``source_dir`` (:func:`part_source_dir`), the resolved ``--pdb-dir``, or one
      renamed or moved to it (``homes``: :meth:`StoredEntries.homes`, when given). The index
      records paths relative to ``--pdb-dir`` only, so a failure of another directory (a store
      extended from several) is not withdrawn because this build did not see its path; nor is
      one in a part that recorded no directory (written before session 19): neither can be told
      from a file of this directory that is gone. Entries are never withdrawn: a stored entry
      whose file is gone stays in the store (``featurecache prune`` does not drop it either);
    - an MSA file's failure (stage ``msa``, its path relative to ``--msa-dir``) whose path the MSA
      stage no longer lists under ``--msa-dir`` (``msa_stage.lists_msa_file``: deleted, moved
      away, hidden), recorded by a build from this same ``--msa-dir``, with the same care: its MSA
      part recorded the resolved ``--msa-dir`` as ``source_dir``; a build without ``--msa-dir``
      withdraws none. A stored MSA built from a file that is gone stays.

    A path that cannot be checked (:func:`present`: a directory on the way cannot be searched) is
    not known to be gone: its failure stays listed, and one warning names it; so does the failure
    of a file under a directory this build cannot list (``inputs``' :func:`unlisted_rel` paths).
    A directory that could not be listed and can be now has its failure withdrawn (its files are
    inputs again).

    ``failures``: the index's failures table; ``inputs``: this build's structure inputs. The
    withdrawn row keeps the failure's key, so the file is built (scanned) again should it come
    back, and its failure listed again."""
    if not failures.num_rows:
        return []
    pdb_dir = Path(pdb_dir)
    here = str(resolved(pdb_dir))
    msa_here = str(resolved(Path(msa_dir))) if msa_dir is not None else ""
    msa_files = MSADirFiles(msa_dir)
    current = {i.rel for i in inputs}
    unlisted = [rel for rel in current if rel.endswith("/")]
    unknown: list[Path] = []  # paths that cannot be checked: kept listed
    recorded_in = part_source_dirs(root)
    listed: list[set[str]] = []  # the MSA stage's listing of --msa-dir, walked once when first needed

    def msa_listing() -> set[str]:
        from featurecache.build.msa_stage import _candidate_files  # msa_stage imports this module

        if not listed:
            # quiet: the MSA stage walks --msa-dir again and warns of what it does not read again
            files = _candidate_files(Path(msa_dir), root, warn=False) if msa_dir is not None else []
            listed.append({rel for rel, _size, _mtime in files})
        return listed[0]

    rows: list[dict[str, str]] = []
    msa_rows: list[dict[str, str]] = []
    for f in failures.select(["path", "entry_id", "stage", "key", "part"]).to_pylist():
        if f["stage"] == WITHDRAWN_STAGE:
            continue
        if f["stage"] == MSA_STAGE:
            why = _withdrawn_msa_failure(root, msa_dir, msa_here, f, recorded_in, msa_listing, unknown)
            if why:
                msa_rows.append(_withdrawn_row(f, why))
            continue
        if f["path"] in current:
            continue
        where = pdb_dir / native(f["path"])
        there = present(where)
        if there and msa_dir is not None and msa_stage_input(where, msa_files):
            why = (f"no longer a structure input: a file under --msa-dir {msa_dir} that the MSA stage reads is its "
                   f"input; its failure in part {f['part']} is withdrawn")  # fmt: skip
        else:
            if not (homes(f["part"]) if homes is not None else recorded_in(f["part"]) == here):
                continue  # another directory's path, or a part that did not record its directory
            if there is None:
                unknown.append(where)  # not known to be gone (an unsearchable directory on the way)
                continue
            if under_unlisted(f["path"], unlisted):
                continue  # its directory cannot be listed now (that is a failure of its own)
            if not there:
                reason = "no such file"
            elif f["path"].endswith("/"):
                reason = "the directory can be listed now (its files are inputs)"
            else:
                reason = "the file is not read (hidden or inside the store)"
            why = (f"no longer an input: {reason} under --pdb-dir {pdb_dir}; its failure in part {f['part']} "
                   "is withdrawn")  # fmt: skip
        rows.append(_withdrawn_row(f, why))
    warn_unknown(unknown, "failures listed for them stay listed")
    if rows:
        name = part_name(STRUCTURE_PART_PREFIX, next_part_number(root, STRUCTURE_PART_PREFIX))
        write_structure_part(root, name, PartContents(failures=rows, source_dir=here))
        log.info("%d listed structure failure(s) withdrawn in part %s: their paths are no longer structure "
                 "inputs under --pdb-dir %s", len(rows), name, pdb_dir)  # fmt: skip
    if msa_rows:
        # an MSA part: its rows are of the MSA failures' kind (index._latest_failures), and a failure
        # of the file put back, written by a later MSA part, supersedes them
        name = part_name(MSA_PART_PREFIX, next_part_number(root, MSA_PART_PREFIX))
        write_msa_part(root, name, MSAPartContents(failures=msa_rows, source_dir=msa_here))
        log.info("%d listed MSA failure(s) withdrawn in part %s: their files are no longer under --msa-dir %s",
                 len(msa_rows), name, msa_dir)  # fmt: skip
    return rows + msa_rows


def _withdrawn_row(f: dict[str, str], why: str) -> dict[str, str]:
    """The :data:`WITHDRAWN_STAGE` row that withdraws failure ``f`` (an index failures row)."""
    return {
        "path": f["path"], "entry_id": f["entry_id"], "stage": WITHDRAWN_STAGE, "error_class": "",
        "message": why, "key": f["key"],  # the withdrawn failure's: not up to date should it be an input again
    }  # fmt: skip


def _withdrawn_msa_failure(
    root: Path, msa_dir: Path | None, msa_here: str, f: dict[str, str], recorded_in: Callable[[str], str],
    listing: Callable[[], set[str]] | None = None, unknown: list[Path] | None = None,
) -> str:  # fmt: skip
    """Why MSA failure ``f`` is withdrawn ("": it is not): its path is no longer an MSA-stage input
    under ``msa_dir``, and its part recorded that directory (resolved: ``msa_here``). ``listing``:
    the MSA stage's listing of ``msa_dir`` (``msa_stage.lists_msa_file``), walked once per build.
    A path that cannot be checked (:func:`present`) is not withdrawn; ``unknown`` gets it. An
    escaped path (a name that is not UTF-8) and a directory's (trailing ``/``: one that could not
    be listed) are asked of the listing first: it lists them as recorded."""
    from featurecache.build.msa_stage import lists_msa_file  # msa_stage imports this module

    if msa_dir is None or not f["path"] or recorded_in(f["part"]) != msa_here:
        return ""  # no --msa-dir, a failure naming no file, or another directory's (or unrecorded)
    if "\\" in f["path"]:
        # maybe a name that is not UTF-8, recorded escaped (\\xNN): native() of it names no file, so
        # only the walk's listing knows whether it is still there (review R39a s50 #3: it was
        # withdrawn as "no such file" and listed again by every build)
        if lists_msa_file(Path(msa_dir), f["path"], root, listing):
            return ""
        # under a directory that cannot be listed now (a failure row of its own, ``sub/``): not
        # known to be gone, kept as a plain name there is (review R39b s50 #2)
        parents = f["path"].split("/")[:-1]
        for i in range(1, len(parents) + 1):
            if lists_msa_file(Path(msa_dir), "/".join(parents[:i]) + "/", root, listing):
                return ""
        return (f"no longer an MSA input: --msa-dir {msa_dir} no longer lists it (gone, or not read: hidden, "
                f"inside the store, or its directory is read through another path); its failure in part "
                f"{f['part']} is withdrawn")  # fmt: skip
    where = Path(msa_dir) / native(f["path"])
    if f["path"].endswith("/") and lists_msa_file(Path(msa_dir), f["path"], root, listing):
        return ""  # a directory that still cannot be listed
    there = present(where)
    if there is None:
        if unknown is not None:
            unknown.append(where)
        return ""
    if there and not f["path"].endswith("/") and lists_msa_file(Path(msa_dir), f["path"], root, listing):
        return ""
    if not there:
        reason = "no such file"
    elif f["path"].endswith("/"):
        reason = "the directory can be listed now (its files are inputs)"
    else:
        reason = (
            "the file is not read (hidden, inside the store, or its directory is read through another path)"
        )
    return f"no longer an MSA input: {reason} under --msa-dir {msa_dir}; its failure in part {f['part']} is withdrawn"


def done_keys(root: Path, withdrawn: pa.Table | None = None) -> set[str]:
    """Keys (entries and failures) of every complete structure part: what a re-run skips; but for
    the keys of ``withdrawn`` (the index's table of that name: failures withdrawn because the file
    was no longer a structure input, :func:`withdraw_failures`; should it be one again, it is built
    again and its failure listed)."""
    keys: set[str] = set()
    for part in complete_parts(root):
        if not part.name.startswith(STRUCTURE_PART_PREFIX):
            continue
        manifest = part / PART_INDEX_DIR / PART_DONE_FILE
        try:
            keys.update(json.loads(manifest.read_text())["keys"])
        except (OSError, ValueError, KeyError):
            log.warning("part %s has no readable manifest; its entries will be rebuilt", part.name)
    if withdrawn is not None and withdrawn.num_rows:
        keys -= set(withdrawn.column("key").to_pylist())
    return keys


def existing_entry_ids(entries: pa.Table) -> dict[str, str]:
    """id → source path of the entries of an index ``entries`` table."""
    return dict(zip(entries.column("id").to_pylist(), entries.column("source_path").to_pylist(), strict=True))


def next_part_number(root: Path, prefix: str) -> int:
    """The number of the next part of ``prefix``: after every complete part's, and after every part
    the store has recorded, on disk or not (the index's last rebuild, the chem stage's scans). A part
    deleted by hand keeps its number: a part written under its name was taken for it, by the index
    (its kept rows) and by the chem stage (which scans a structure part once, by name: the new part's
    components were never computed)."""
    from featurecache.store.components import every_scanned_part_name
    from featurecache.store.index import recorded_part_names

    names = {p.name for p in complete_parts(root)} | recorded_part_names(root)
    if prefix == STRUCTURE_PART_PREFIX:
        names |= every_scanned_part_name(root)
    numbers = [int(n[len(prefix) :]) for n in names if n.startswith(prefix) and n[len(prefix) :].isdigit()]
    return max(numbers, default=-1) + 1


def plan_parts(root: Path, pending: list[InputFile], part_size: int) -> list[tuple[str, list[InputFile]]]:
    """Split pending inputs (already sorted) into parts of ``part_size``, numbered after existing ones."""
    start = next_part_number(root, STRUCTURE_PART_PREFIX)
    return [
        (part_name(STRUCTURE_PART_PREFIX, start + k), pending[i : i + part_size])
        for k, i in enumerate(range(0, len(pending), part_size))
    ]
