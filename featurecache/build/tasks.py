"""What one Dask task does: featurize the inputs of one part and write the part.

Bad input never raises out of here: each input either becomes an entry or a failure row naming the
file, the stage and the reason. Store-level problems raise (a worker running other code), except a
write to the store that the OS refused (no space, a file-size limit, a read-only file): the task
returns it (:class:`StoreWriteFailed`) and the driver raises it (:func:`raise_store_failure`), so
the build ends with its one line and exit 3, without Dask's "Compute Failed" traceback of the task.
"""

from __future__ import annotations

import errno
import hashlib
import importlib
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from featurecache.build.discover import InputFile, entry_key
from featurecache.errors import InputError, StoreError, UnsupportedFormatError, raised_from
from featurecache.featurize.entry import StageTimer, featurize_bytes
from featurecache.featurize.interfaces import INTERFACE_CUTOFF
from featurecache.parse.ccd import CCDReadError, os_reason, quiet_definition_warnings
from featurecache.store.root import BUILD_TOKEN_PREFIX
from featurecache.store.writer import EntryRecord, PartContents, write_structure_part

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreWriteFailed:
    """What a part task returns when the OS refused its write to the store: the StoreError's
    message (``cannot write the store at FILE: REASON``), for the driver to raise. Not the inputs'
    fault: a full disk is not recorded as a failure of the file being written."""

    message: str


def raise_store_failure(result: object) -> None:
    """Raise the StoreError of a part task's ``result`` when it is a :class:`StoreWriteFailed`."""
    if isinstance(result, StoreWriteFailed):
        raise StoreError(result.message)


@dataclass
class PartResult:
    part: str
    n_entries: int = 0
    n_failed: int = 0
    n_atoms: int = 0
    n_tokens: int = 0
    bytes_written: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    #: per-atom residues built from the file's atoms for want of a component definition, by code
    #: (tokenize.af3.residues_without_definition), and the entries that have any
    undefined_residues: dict[str, int] = field(default_factory=dict)
    n_undefined_entries: int = 0
    #: stored entries whose file's bytes differ from the bytes the build listed: relative path and
    #: sizes; stored as read, so the build names each (``run.changed_inputs_line``)
    changed: list[str] = field(default_factory=list)
    #: the relative paths of inputs whose bytes read differ from the digest they were listed with
    #: (stored or failed): the driver drops their kept digests (``digest_cache.forget_digests``)
    digest_changed: list[str] = field(default_factory=list)


def build_structure_part(
    root: str, part: str, inputs: list[InputFile], config_hash: str, ccd_path: str | None = None,
    interface_cutoff: float = INTERFACE_CUTOFF, versions: dict[str, str] | None = None, source_dir: str = "",
    keep_crystallization_aids: bool = False, ccd_config_hash: str = "", store_token: str = "",
) -> PartResult | StoreWriteFailed:  # fmt: skip
    """Featurize ``inputs`` and write them as part ``part`` of the store at ``root``; ``source_dir``:
    the resolved ``--pdb-dir`` their relative paths belong to (recorded in the part's manifest).
    Each entry's key holds ``config_hash``; its failure rows' hold ``ccd_config_hash`` (with the
    CCD's fingerprint: ``build.ccd_keys``; "": ``config_hash``), and the manifest records the
    component definitions each entry looked up. A write the OS refused: :class:`StoreWriteFailed`,
    nothing of the part committed. ``store_token``: the build's :func:`store_token_file` in ``root``,
    which this worker must read before it writes (:func:`check_versions`)."""
    check_versions(versions, root, store_token)
    # scipy, the featurizer's (featurize.interfaces imports it lazily, so that a build's driver never
    # loads it): here, before any entry's timer starts, so that a worker's first part does not count
    # the import in its first entry's featurize time (index/timings.arrow)
    import scipy.spatial  # noqa: F401

    from featurecache.build.components import component_resolvers
    from featurecache.tokenize.af3 import residues_without_definition

    used: dict[str, str] = {}  # the definitions the input being featurized looked up
    component_atoms, component_bonds = component_resolvers(ccd_path, used)
    definitions: dict[str, dict[str, str]] = {}  # entry id -> used, for each entry built
    result = PartResult(part)
    contents = PartContents(source_dir=source_dir, settings={
        "ccd": ccd_path, "keep_crystallization_aids": keep_crystallization_aids}, ccd_definitions=definitions)  # fmt: skip
    timer = StageTimer()
    for inp in inputs:
        if inp.name_error:  # not read: its path could not be stored with its entry
            contents.failures.append(_failure(inp, "discover", InputError(inp.name_error)))
            continue
        t0 = time.perf_counter()
        timer.start("read")
        try:
            data = Path(inp.path).read_bytes()
        except OSError as exc:
            # a file the driver hashed is not judged by its bytes: keyed "", so the next run
            # retries it (a worker that did not see it, review R27c s45 #5), as a crash is
            retry = "" if inp.sha256 else None
            contents.failures.append(_failure(inp, "read", exc, retry, message=read_failure(inp, exc)))
            continue
        sha = hashlib.sha256(data).hexdigest()
        changed = sha != inp.sha256
        key = inp.key if not changed else entry_key(sha, inp.entry_id, config_hash)
        failure_key = inp.ccd_key or inp.key
        if changed:
            failure_key = entry_key(sha, inp.entry_id, ccd_config_hash or config_hash)
        if changed and inp.sha256:
            result.digest_changed.append(inp.rel)
        used.clear()
        try:
            if not inp.fmt:
                raise UnsupportedFormatError(
                    f"not a structure file name (expected .cif/.mmcif/.pdb/.ent/.bcif, optionally .gz): {Path(inp.rel).name}",
                    stage="read",
                )
            structure = featurize_bytes(data, Path(inp.path).name, inp.entry_id, timer=timer,
                                        component_atoms=component_atoms, component_bonds=component_bonds,
                                        interface_cutoff=interface_cutoff,
                                        keep_crystallization_aids=keep_crystallization_aids)  # fmt: skip
        except Exception as exc:
            if (ccd_error := raised_from(exc, CCDReadError)) is not None:  # the machine's fault: retried
                contents.failures.append(
                    _failure(inp, "ccd", ccd_error, "", message=ccd_read_failure(inp, ccd_error))
                )
                timer.stop()
                continue
            stage = exc.stage if isinstance(exc, InputError) and exc.stage else timer.stage
            if not isinstance(exc, InputError):
                log.debug("unexpected error featurizing %s", inp.rel, exc_info=True)
            note = changed_note(inp, len(data)) if changed and inp.sha256 else ""
            reason = (str(exc) or type(exc).__name__)[: MESSAGE_CHARS - len(note)] + note
            contents.failures.append(_failure(inp, stage, exc, failure_key, message=reason))
            timer.stop()
            continue
        contents.entries.append(
            EntryRecord(structure, key, inp.rel, sha, len(data), inp.fmt, time.perf_counter() - t0)
        )
        definitions[inp.entry_id] = dict(used)
        if changed and inp.sha256:  # a copy still being written may parse as a shorter structure
            result.changed.append(f"{inp.rel} ({len(data)} bytes read, {inp.size} listed)")
        result.n_atoms += len(structure.atoms)
        result.n_tokens += len(structure.tokens)
        undefined = residues_without_definition(structure.tokens, component_atoms)
        if undefined:
            result.n_undefined_entries += 1
            for code, n in undefined.items():
                result.undefined_residues[code] = result.undefined_residues.get(code, 0) + n
    timer.start("write")
    try:
        manifest = write_structure_part(Path(root), part, contents)
    except StoreError as exc:
        return StoreWriteFailed(str(exc))
    timer.stop()
    result.n_entries = len(contents.entries)
    result.n_failed = len(contents.failures)
    result.failures = contents.failures
    result.bytes_written = int(manifest["bytes"])
    result.seconds = dict(timer.seconds)
    return result


#: the key under which a process reports where its featurecache package lives, to name it in a
#: refusal; never compared (the driver and its workers may import the same code from different
#: directories)
PACKAGE_PATH = "featurecache path"


def worker_versions() -> dict[str, str]:
    """What this process runs: featurecache's version, the digest of its source files
    (:func:`featurecache.source_digest`: any edit to the code changes it, the version does not),
    the featurizer, schema and store format versions (:mod:`featurecache.const`), and where the
    package lives (``PACKAGE_PATH``, only for messages). The driver compares every worker's answer
    with its own (:func:`version_differences`) before a build writes anything, and each part task
    does so again on its worker (:func:`check_versions`)."""
    import featurecache
    from featurecache import const

    return {
        "featurecache": featurecache.__version__,
        "featurecache source": featurecache.source_digest(),
        "featurizer": const.FEATURIZER_VERSION,
        "schema": str(const.SCHEMA_VERSION),
        "store format": str(const.STORE_FORMAT_VERSION),
        PACKAGE_PATH: str(featurecache.package_dir()),
    }


def version_differences(theirs: dict[str, str], mine: dict[str, str]) -> dict[str, str]:
    """The entries of ``mine`` (a :func:`worker_versions`) that ``theirs`` does not match, with
    ``theirs``'s value ("?" when it lacks the key); the package path is not compared."""
    return {k: theirs.get(k, "?") for k in mine if k != PACKAGE_PATH and theirs.get(k) != mine[k]}


def describe_difference(theirs: dict[str, str], mine: dict[str, str], who: str) -> str:
    """One phrase for :func:`version_differences`: what ``who`` runs, and, when its code differs,
    that its featurecache source differs from the driver's, naming both package directories."""
    diff = version_differences(theirs, mine)
    text = f"{who} runs " + ", ".join(f"{k} {v}" for k, v in diff.items())
    if "featurecache source" in diff:
        where, driver = theirs.get(PACKAGE_PATH, "?"), mine.get(PACKAGE_PATH, "?")
        text += (
            f" (its featurecache source at {where} differs from the driver's at {driver})"
            if where != driver
            else f" (the driver's directory too: the featurecache source files at {where} changed after it "
            "loaded them; restart it, or run the build again if they changed during the build)"
        )
    return text


def check_versions(expected: dict[str, str] | None, root: str = "", token: str = "") -> None:
    """Refuse to write a part in a process that does not run what the driver runs (``expected``:
    the driver's :func:`worker_versions`; None: no check), or that does not see the store at
    ``root`` (``token``: the build's :func:`store_token_file` there, which this process must read
    back; "": no check). The build checks every worker when it starts; this catches a worker that
    joined the cluster later (autoscaling, a job queue), whose parts would otherwise be stored
    under the driver's keys with another featurizer's arrays (or another featurecache's code
    under the same versions), or written where the driver cannot see them (review R27c s45 #1)."""
    if expected is not None and version_differences(mine := worker_versions(), expected):
        driver = ", ".join(f"{k} {v}" for k, v in expected.items() if k != PACKAGE_PATH)
        raise StoreError(f"refusing to write: {describe_difference(mine, expected, _this_process())}; the driver "
                         f"runs {driver} (it joined the cluster after the build's start check; install the "
                         "driver's featurecache on every worker)")  # fmt: skip
    why = store_unseen(root, token) if token else None
    if why is not None:
        raise StoreError(f"refusing to write: {_this_process()} does not see the store at {root} ({why}; it joined "
                         f"the cluster after the build's start check): {SHARED_PATH_RULE}")  # fmt: skip


def _this_process() -> str:
    """ "worker ADDRESS" inside a Dask worker, else "this process"."""
    try:
        from distributed import get_worker

        return f"worker {get_worker().address}"
    except (ImportError, ValueError):  # not inside a Dask worker
        return "this process"


#: what a worker that does not see the store (or an input) at the driver's path is told to fix
SHARED_PATH_RULE = "the store must be on a filesystem every worker sees at the same path"
#: the name of the file a build writes in its store's root for its workers to read back (this
#: prefix, then the token): a worker that cannot read it does not see the store at that path
STORE_TOKEN_PREFIX = BUILD_TOKEN_PREFIX


def store_token_file(root: str | Path, token: str) -> Path:
    """The file in the store ``root`` that holds ``token`` (a random hex string) while a build runs."""
    return Path(root, STORE_TOKEN_PREFIX + token)


def store_unseen(root: str, token: str) -> str | None:
    """None when this process reads ``token`` from :func:`store_token_file` in ``root``, else why
    not, in words (another filesystem mounted there: the file is not there)."""
    path = store_token_file(root, token)
    try:
        if path.read_text() == token:
            return None
        return f"its {path.name} holds other bytes"
    except FileNotFoundError:
        return f"the file {path.name} the build wrote there is not there: another filesystem at that path?"
    except OSError as exc:
        return f"cannot read the file {path.name} the build wrote there: {exc.strerror or exc}"


def worker_sees(root: str, token: str, inputs: dict[str, str]) -> list[str]:
    """Runs on each worker at a build's start: what it does not see of the store at ``root`` (its
    ``token`` file: :func:`store_unseen`) and of ``inputs`` (option -> path: ``--pdb-dir`` and
    the like, readable and, a directory, listable), one phrase each; [] when it sees them all."""
    problems = []
    why = store_unseen(root, token)
    if why is not None:
        problems.append(f"does not see the store at {root} ({why})")
    for option, path in inputs.items():
        mode = os.R_OK | (os.X_OK if os.path.isdir(path) else 0)
        if not os.access(path, mode):
            reason = "no such file or directory" if not os.path.exists(path) else "permission denied"
            problems.append(f"cannot read {option} {path} ({reason})")
    return problems


#: the packages whose functions :func:`run_part` runs
PART_TASK_MODULES = ("featurecache.build.",)


def part_guard(versions: dict[str, str], root: str = "", token: str = "") -> dict[str, Any]:
    """What :func:`run_part` checks on the worker before a part task runs: the driver's
    :func:`worker_versions` and the store ``root`` with the build's ``token`` (:func:`check_versions`).
    Builtins only: any featurecache unpickles it."""
    return {"versions": versions, "root": root, "token": token}


def stage_guard(root: str | Path) -> dict[str, Any]:
    """:func:`part_guard` for a stage that runs while a build holds the store ``root``: the driver's
    versions, and the token of the build's :func:`store_token_file` there ("" when there is none:
    the store check is left out)."""
    tokens = sorted(p.name[len(STORE_TOKEN_PREFIX) :] for p in Path(root).glob(STORE_TOKEN_PREFIX + "*"))
    return part_guard(worker_versions(), str(root), tokens[-1] if len(tokens) == 1 else "")


def run_part(guard: dict[str, Any], task: str, *args: Any, **kwargs: Any) -> Any:
    """Every part task is submitted through this entry point: it checks its worker
    (:func:`check_versions` with ``guard``: :func:`part_guard`) and then runs ``task``
    ("featurecache.build.MODULE:FUNCTION") with ``args`` and ``kwargs``. Its signature stays as it
    is, so that a worker of another featurecache that joined after the build's start check
    raises the check's StoreError instead of a TypeError of another signature, which the driver
    took for a worker death and recorded as each input's failure (review R27c s45 #6). A task
    that still fails with a TypeError, AttributeError or ImportError (a function it lacks) is read
    by the driver as "a worker runs other code" (``run.other_code_error``). A worker older than
    this function cannot unpickle the task at all: Dask closes its connection, a worker death."""
    guard = guard if isinstance(guard, dict) else {}
    check_versions(guard.get("versions"), str(guard.get("root", "")), str(guard.get("token", "")))
    module, _, name = task.partition(":")
    if not module.startswith(PART_TASK_MODULES) or not name:
        raise ValueError(f"run_part: not a part task: {task!r}")
    with quiet_definition_warnings():  # the driver gives them, formatted (parse.ccd)
        return getattr(importlib.import_module(module), name)(*args, **kwargs)


#: a failure row's message is cut to this many characters
MESSAGE_CHARS = 2000


#: the errors of reading a file the driver read as a file that mean it was replaced since: by a
#: directory (EISDIR), a directory above it by a file (ENOTDIR), on an NFS server (ESTALE)
REPLACED_ERRNOS = frozenset({errno.EISDIR, errno.ENOTDIR, errno.ESTALE})


def read_failure(inp: InputFile, exc: OSError) -> str:
    """The failure message of an input the part task cannot read: the file (its path under
    ``--pdb-dir``) and why, in words, not the OSError's text (which names the resolved path). A file
    the driver read when it listed ``--pdb-dir`` (its digest is known) and this worker cannot read
    now was removed or replaced since (ENOENT, :data:`REPLACED_ERRNOS`), had its permissions
    changed, or this worker does not see it at that path (another filesystem, a mount it lacks): the
    message names the worker and says so. Any other error (EIO, a timeout) is given as it is, with
    no guess at its cause (review R42b s52 #8); each such input is read again by the next build."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    text = f"cannot read {inp.rel}: {reason}"
    if not inp.sha256:  # not readable when the build listed --pdb-dir either
        return text
    where = _this_process()
    on = f" on {where}" if where != "this process" else ""
    listed = "the driver read it when it listed --pdb-dir"
    unseen = f", or not visible to {'that worker' if on else 'this process'} at this path"
    if isinstance(exc, FileNotFoundError):
        return f"cannot read {inp.rel}: the file is gone{on}: {listed}: removed or renamed during the build{unseen}"
    if isinstance(exc, PermissionError):
        return f"{text}{on}: {listed}: its permissions changed during the build{unseen}"
    if exc.errno in REPLACED_ERRNOS:
        return f"{text}{on}: {listed}: replaced or changed during the build"
    return f"cannot read {inp.rel}: {os_reason(exc)}{on}: {listed}; the next build reads it again"


def ccd_read_failure(inp: InputFile, exc: CCDReadError) -> str:
    """The failure message of an input whose CCD definitions could not be read: the CCD file and
    the OS's reason (``exc``), where, and that neither the input nor the definition is at fault, so
    the row is keyed "" and the next build featurizes the input again (review R42b s52 #2). Not
    "fix or replace it": the file may be sound, and read fine a moment later (this worker reads it
    again for its next entry)."""
    where = _this_process()
    on = f" on {where}" if where != "this process" else ""
    return (f"{exc}{on}: a read error of the CCD, not a fault of {inp.rel} or of the definition; "
            "the next build tries this entry again")  # fmt: skip


def changed_note(inp: InputFile, n_read: int) -> str:
    """What a failure message adds for an input whose bytes differ from those the build hashed when
    it listed ``--pdb-dir``: it changed during the build (a copy or download still being written?),
    so the failure is of the bytes read then, not of the file as it ends up."""
    return (f" (the file changed during the build: {n_read} bytes read, {inp.size} when the build listed "
            "--pdb-dir; still being written? the next build reads it again if it changed since)")  # fmt: skip


def _failure(
    inp: InputFile, stage: str, exc: BaseException, key: str | None = None, *, message: str | None = None
) -> dict[str, Any]:
    """A failure row naming the input's file (``path``, relative to ``--pdb-dir``), the ``stage``
    and the reason (``message``; default: the exception's text); ``key``: the row's (None: the
    input's; "": none, the next run retries the input)."""
    message = message or str(exc) or type(exc).__name__
    return {
        "path": inp.rel, "entry_id": inp.entry_id, "stage": stage, "error_class": type(exc).__name__,
        "message": message[:MESSAGE_CHARS], "key": key if key is not None else inp.ccd_key or inp.key,
    }  # fmt: skip
