"""The build driver: discover → plan parts → run them on Dask → rebuild the index → summary.

Runs on an embedded ``LocalCluster`` by default, or on an existing cluster (``scheduler=``); the
store directory must then be visible to every worker at the same path (shared filesystem).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import copy
import functools
import hashlib
import logging
import os
import re
import shlex
import signal
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

import featurecache
from featurecache.build.ccd_keys import (
    PER_ENTRY_DEFINITIONS,
    changed_definitions,
    summary_reasons,
    warn_mixed_definitions,
    with_ccd_keys,
)
from featurecache.build.config import UNSET, BuildConfig, Unset, refuse_settings_left_out
from featurecache.build.digest_cache import forget_digests
from featurecache.build.discover import (
    DirectoryParts,
    InputFile,
    StoredEntries,
    discover,
    done_keys,
    existing_entry_ids,
    input_paths,
    native,
    next_part_number,
    part_source_dir,
    plan_parts,
    present,
    resolved,
    under_unlisted,
    withdraw_failures,
)
from featurecache.build.progress import stage_bar
from featurecache.build.tasks import (
    PACKAGE_PATH,
    SHARED_PATH_RULE,
    STORE_TOKEN_PREFIX,
    PartResult,
    describe_difference,
    part_guard,
    raise_store_failure,
    run_part,
    store_token_file,
    version_differences,
    worker_sees,
    worker_versions,
)
from featurecache.errors import FeatureCacheError, InputError, StoreError, UsageError
from featurecache.parse.ccd import CCDReadError, check_ccd, os_reason
from featurecache.parse.structure import structure_format
from featurecache.store.index import (
    REMOVED,
    WITHDRAWN,
    complete_parts,
    first_build_finished,
    rebuild_index,
    sorted_index_table,
    store_bytes,
    store_writes,
)
from featurecache.store.info import BUILD_INPUTS_KEY
from featurecache.store.layout import STRUCTURE_PART_PREFIX, part_name
from featurecache.store.root import BuildLock, check_store_dir, init_store, mark_updated, remove_leftovers
from featurecache.store.versions import downgrade_line, extension_notes
from featurecache.store.writer import PartContents, write_structure_part
from featurecache.text import first_named

if TYPE_CHECKING:
    from featurecache.build.msa_stage import MSAStageResult  # imported where the stage runs, as before

log = logging.getLogger(__name__)

INDEX_REFRESH_S = 15.0  # rebuild the index this often during a build, so progress is readable
#: ...but at most this share of the driver's time (a refresh that takes long waits longer for the next)
INDEX_REFRESH_SHARE = 0.1
#: ...and, extending a finished store (whose index holds the new parts back until the publish
#: anyway), only once the parts written since hold this many entries and failures: a refresh
#: rewrites the whole index, ~6 s and 0.75 GB at 198k entries (review R26a s44 #5)
INDEX_REFRESH_MIN_ENTRIES = 1000
#: how long a build on an external scheduler waits for its first worker
WAIT_FOR_WORKERS_S = 60.0
#: how long connecting to an external scheduler may take (TCP connect retries), and its answer in all
SCHEDULER_CONNECT_S = 15.0
SCHEDULER_ANSWER_S = 20.0
#: how long the build waits for a worker's answer to the start-up calls (the version check) before
#: it warns, naming the worker (busy with another client's task, stopped, swapping); again after
#: twice as long, and so on, at most every NO_WORKER_WARN_MAX_S; it keeps waiting (a busy worker
#: answers once its task ends); the variable overrides it
WORKER_ANSWER_S = 30.0
WORKER_ANSWER_ENV = "FEATURECACHE_WORKER_ANSWER_S"
#: how long a build on an external scheduler waits for results with no worker connected before it
#: warns, naming the scheduler; again after twice as long, and so on, at most every
#: NO_WORKER_WARN_MAX_S (a worker back is told once); the variable overrides it
NO_WORKER_WARN_S = 30.0
NO_WORKER_WARN_ENV = "FEATURECACHE_NO_WORKER_WARN_S"
NO_WORKER_WARN_MAX_S = 600.0


@dataclass
class BuildSummary:
    store: str
    n_inputs: int = 0
    n_built: int = 0
    n_skipped: int = 0
    n_failed: int = 0  # inputs that failed in this run
    n_failed_earlier: int = 0  # inputs skipped because an earlier run recorded their failure
    n_msa_failed_earlier: int = 0  # of those, MSA files (unchanged since their listed failure)
    n_replaced: int = 0  # inputs whose id was in the store with other content (new bytes)
    n_rebuilt: int = 0  # inputs whose id was in the store with the same bytes (new CCD/featurizer/config)
    #: of those, the entries rebuilt because a component definition they used changed, and the
    #: codes (``build.ccd_keys.summary_reasons``); entry id -> changed codes, of every input checked
    rebuilt_for_definitions: dict[str, Any] = field(default_factory=dict)
    ccd_changed: dict[str, list[str]] = field(default_factory=dict)
    #: the keys of the components this build's chem stage computed
    components_computed: list[str] = field(default_factory=list)
    n_kept: int = 0  # inputs whose id was in the store that failed in this run: the stored entry stays
    #: entries written from a file of another path than the stored entry of their id (moved within
    #: --pdb-dir, recompressed), as "id (old path → new path)" (:func:`moved_line`)
    moved: list[str] = field(default_factory=list)
    #: the --pdb-dir the store's previous build read, when it is not this build's (replaced entries
    #: then come from another directory, not from a file rewritten in place)
    previous_pdb_dir: str | None = None
    failed_by_stage: dict[str, int] = field(default_factory=dict)
    n_atoms: int = 0
    n_tokens: int = 0
    #: bytes of the structure files listed under --pdb-dir (built or up to date): the structure
    #: inputs only, as since the first build; the MSA and CCD inputs are the next two (review R31b s47 #3)
    input_bytes: int = 0
    #: bytes of the files the MSA stage lists under --msa-dir that are not structure inputs
    #: (:func:`msa_input_bytes`; 0 without one)
    msa_input_bytes: int = 0
    #: bytes of the --ccd file, or of a --ccd directory's definition files (:func:`ccd_input_bytes`)
    ccd_bytes: int = 0
    bytes_written: int = 0
    store_bytes: int = 0
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    workers: int = 0
    dashboard: str | None = None
    #: extra stage summaries (msa, chem): name -> {label: value}
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: failures recorded in this run, for the summary table
    failures: list[dict[str, Any]] = field(default_factory=list)
    #: per-atom residues built this run from the file's atoms for want of a component
    #: definition, by code, and the entries that have any (:func:`undefined_residues_line`)
    undefined_residues: dict[str, int] = field(default_factory=dict)
    n_undefined_entries: int = 0
    #: stored entries whose structure file is gone from this build's --pdb-dir (kept), their ids;
    #: stored MSAs whose files are all gone from its --msa-dir (kept): :func:`sources_gone_line`
    entries_gone: list[str] = field(default_factory=list)
    n_msas_gone: int = 0
    #: the chains of each of those MSAs ("1psm/A", or "7a4d/A, 7a4d/B" for one sequence of two chains)
    msas_gone: list[str] = field(default_factory=list)
    #: entries the index listed whose part is gone (deleted) and that no input gives, by that part:
    #: the rebuild of the index drops them, so the build records them as removed (:func:`_record_lost`)
    entries_lost: dict[str, list[str]] = field(default_factory=dict)
    #: structure files stored as read whose bytes changed after the build listed them
    #: (:func:`changed_inputs_line`)
    changed_inputs: list[str] = field(default_factory=list)
    #: structure files whose bytes were not those of the digest the build listed them with: their
    #: kept digests are dropped after the structure stage (``digest_cache.forget_digests``)
    digest_changed: list[str] = field(default_factory=list)
    #: the warnings this run's parts recorded (rows of index/warnings.arrow: a kept duplicate atom,
    #: a second data block ignored, atoms without a reference conformer …), by stage; the entries
    #: they name; those that name none (the MSA stage's unmatched alignments: ``store.warnings``);
    #: and up to :data:`SHOWN_WARNINGS` of those rows (:func:`_new_warnings`)
    warnings_by_stage: dict[str, int] = field(default_factory=dict)
    n_warning_entries: int = 0
    n_warnings_without_entry: int = 0
    #: the store's polymer chains with no MSA from files (they get the single-sequence MSA), and
    #: their entries (:func:`no_msa_dir_line`)
    n_single_sequence_chains: int = 0
    n_single_sequence_entries: int = 0
    #: the store's polymer chains with an MSA from files (stored by this build or an earlier one)
    n_msa_chains: int = 0
    #: a build without --msa-dir: the --msa-dir(s) the MSA parts of the stored MSAs from files
    #: recorded (:func:`no_msa_dir_line`)
    kept_msa_dirs: list[str] = field(default_factory=list)
    warning_examples: list[dict[str, str]] = field(default_factory=list)
    #: the workers the cluster lost while the build ran, as "ADDRESS (why)" (:func:`_workers_lost`)
    workers_lost: list[str] = field(default_factory=list)

    @property
    def n_warnings(self) -> int:
        return sum(self.warnings_by_stage.values())

    @property
    def all_input_bytes(self) -> int:
        """Every input's bytes: structure files, MSA files and the CCD (what the store is made from)."""
        return self.input_bytes + self.msa_input_bytes + self.ccd_bytes


def _previous_pdb_dir(out: Path) -> str | None:
    """The ``--pdb-dir`` the store's latest build recorded (:func:`build_inputs`), or None: no
    store yet, or one built before builds recorded it."""
    from featurecache.store.info import recorded_build_inputs
    from featurecache.store.root import group_attributes

    meta = Path(out) / "zarr.json"
    if not meta.is_file():
        return None
    pdb_dir: str | None = recorded_build_inputs(group_attributes(meta))["pdb_dir"]
    return pdb_dir


def build_inputs(pdb_dir: Path, msa_dir: Path | None, ccd: Path | None, ccd_fp: str) -> dict[str, Any]:
    """What a build records of its inputs in the store's root attributes (:data:`BUILD_INPUTS_KEY`),
    beside its options (``config``): ``pdb_dir``, ``msa_dir`` (None without one) and ``ccd``
    (``{"path", "fingerprint"}``, None without ``--ccd``), paths absolute as given (symlinks kept).
    ``featurecache info`` shows them; the rebuild command ``verify`` prints passes the recorded
    ``--ccd`` when that path still holds a CCD of the same fingerprint (:func:`ccd_fingerprint`)."""
    return {
        "pdb_dir": str(pdb_dir),
        "msa_dir": str(msa_dir) if msa_dir is not None else None,
        "ccd": {"path": str(ccd), "fingerprint": ccd_fp} if ccd is not None else None,
    }


def ccd_fingerprint(path: Path | None) -> str:
    """Content hash of the CCD input (file, or every file of a directory); "" for None. A read the
    OS refuses (EIO, a stale NFS handle) raises its OSError, named after the file it could not read
    (a failed ``read`` names none): a build stops on it with one line (:func:`ccd_unreadable`),
    ``verify`` says the recorded CCD "cannot be read"."""
    if path is None:
        return ""
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(f.name.encode())
        try:
            data = f.read_bytes()
        except OSError as exc:
            if exc.filename is not None or exc.errno is None:
                raise
            raise OSError(exc.errno, exc.strerror, str(f)) from exc  # (its subclass: PermissionError, ...)
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()[:16]


#: what a build stopped by a CCD file it cannot read says after the file and the OS's reason
#: (:func:`ccd_unreadable`): before it started, and after its start but before it built anything
CCD_STOPPED_AT_START = (
    "the build stopped before it started (nothing was written): run the same command again once it reads"
)
CCD_STOPPED_BEFORE_WORK = (
    "the build stopped before it built anything: run the same command again once it reads"
)


def ccd_unreadable(exc: OSError | CCDReadError, ccd: Path, then: str) -> StoreError:
    """The one-line StoreError (exit 3) of a build whose driver could not read a file of the CCD
    ``ccd`` (``exc``: the OS refused the read: EIO, a stale NFS handle, EACCES), naming the file
    and the OS's reason, and ``then``: what the build did and that the same command can be run
    again (review R42b s52 #2: the read of the CCD's fingerprint was a Python traceback, exit 1,
    the "no chemical component definitions found" of check_ccd a usage error, exit 2, and the
    definitions' hashes of a later build a traceback too). Not the CCD's fault: its content is
    checked where it is parsed."""
    if isinstance(exc, CCDReadError):
        what = str(exc)
    else:
        f = Path(os.fsdecode(exc.filename)) if isinstance(exc.filename, (str, bytes)) else Path(ccd)
        what = f"cannot read {'the CCD' if f == Path(ccd) else 'the CCD file'} {f}: {os_reason(exc)}"
    return StoreError(f"{what}; {then}")


_fingerprint = ccd_fingerprint  # its earlier name


def msa_input_bytes(
    msa_dir: Path | None, listed: Iterable[tuple[str, int, int]], structure_inputs: Iterable[Path] = ()
) -> int:
    """Bytes of the files under ``msa_dir`` that the MSA stage listed as its candidates (``listed``:
    ``MSAStageResult.listed``, relative path, size, mtime: every non-hidden file, those of the store
    aside), less those that are this build's structure inputs (``structure_inputs``: their paths as
    ``discover`` lists them, ``--pdb-dir`` / ``rel``, symlinks kept; ``input_bytes`` counts them).
    With ``--msa-dir`` at ``--pdb-dir`` or inside it, both stages list the structure files there (and
    the other files that are not the MSA stage's): each file is counted once, under what it is
    (review R32a s47 #2). Two paths are one file when they give the same name in the same directory,
    resolved (either directory may be reached through a symlink): one ``resolve`` per directory, no
    file read or listed again. 0 without ``--msa-dir``. ``listed``'s paths are as recorded (UTF-8
    text); ``structure_inputs`` are file-system paths (``discover.native`` of an input's ``rel``)."""
    if msa_dir is None:
        return 0
    from featurecache.build.discover import resolved

    real_dirs: dict[Path, Path] = {}

    def place(path: Path) -> tuple[Path, str]:
        d = path.parent
        real = real_dirs.get(d)
        if real is None:
            real = real_dirs[d] = resolved(d)
        return real, path.name

    counted = {place(p) for p in structure_inputs}
    msa_dir = Path(msa_dir)
    # ``rel`` as recorded (UTF-8 text): the file system's name for it (``discover.native``; under an
    # ASCII file-system encoding a non-ASCII name crashed resolve: review R38a s50 leftovers #2)
    return sum(
        size for rel, size, _mtime in listed if not counted or place(msa_dir / native(rel)) not in counted
    )


def ccd_input_bytes(ccd: Path | None) -> int:
    """Bytes of the ``--ccd`` file, or of the definition files (``*.cif``, ``*.cif.gz``) of a
    ``--ccd`` directory, those ``parse.ccd.check_ccd`` lists; 0 without ``--ccd``."""
    if ccd is None:
        return 0
    path = Path(ccd)
    try:
        files = (
            [f for f in path.iterdir() if f.name.lower().endswith((".cif", ".cif.gz")) and f.is_file()]
            if path.is_dir()
            else [path]
        )
    except OSError:  # (a listing the OS refuses now, EIO: a count for the summary is no reason to stop)
        return 0
    total = 0
    for f in files:
        with contextlib.suppress(OSError):  # gone since it was checked: nothing of it is read
            total += f.stat().st_size
    return total


def has_dashboard() -> bool:
    """Whether Dask's dashboard can be served here: its pages need bokeh (an optional dependency)."""
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


#: Dask settings of an embedded cluster that differ from Dask's defaults: its periodic diagnostics run
#: less often. Each is an event-loop callback: the profiler samples each worker's task thread every
#: 10 ms; the tick (loop responsiveness) and the system monitor run in every server (scheduler,
#: nannies, workers). An idle 2-worker cluster cost 14.7 % of a core with Dask's defaults and 3.7 %
#: with these (``benchmarks/cluster_overhead.py``). Dask's own test clusters turn the profiler off
#: too; on Python 3.11 Dask's dashboard shows no profile anyway (a CPython 3.11 deadlock,
#: dask/distributed#8616), on later Pythons its Profile page stays empty. A setting the user made is
#: kept (:func:`embedded_dask_config`): a ``DASK_*`` variable (``DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=True``
#: turns the profiler back on), a Dask config file, or a ``dask.config.set`` to a value other than
#: Dask's default (one equal to it cannot be told from no setting).
EMBEDDED_DASK_CONFIG: dict[str, Any] = {
    "distributed.worker.profile.enabled": False,  # Dask: True (sampled every 10 ms)
    "distributed.admin.tick.interval": "1s",  # Dask: 20ms (it warns of a loop blocked over tick.limit, 3s)
    "distributed.admin.system-monitor.interval": "2s",  # Dask: 500ms (the dashboard's CPU/memory plots)
}


def embedded_dask_config() -> dict[str, Any]:
    """:data:`EMBEDDED_DASK_CONFIG` less every key the user set: one a ``DASK_*`` variable or a
    Dask config file names, or whose value differs from Dask's default (``dask.config.set``; a set
    to Dask's default value is not seen). Where Dask passes its whole config on to a process
    (``DASK_INTERNAL_INHERIT_CONFIG``, e.g. under an SSHCluster) every key counts as set: nothing
    is changed."""
    import dask.config
    import distributed  # noqa: F401 (its import adds its defaults to Dask's)

    user = dask.config.collect()  # config files and DASK_* variables, without Dask's defaults
    shipped = dask.config.merge(*dask.config.defaults)
    missing = object()
    kept = {}
    for key, value in EMBEDDED_DASK_CONFIG.items():
        if dask.config.get(key, missing, config=user) is not missing:
            continue
        if dask.config.get(key, missing) != dask.config.get(key, missing, config=shipped):
            continue
        kept[key] = value
    return kept


#: the levels the build gives Dask's loggers (:func:`_make_client`; distributed configures its own
#: at import): the build's output is its progress and summary. distributed.utils and .client log
#: tracebacks for the client's failed reconnects to a lost scheduler; the build reports that loss
#: itself, in one line (StoreError). run_build puts the program's levels back (review R35b s49 #5).
DASK_LOGGER_LEVELS: dict[str, int] = {
    **dict.fromkeys(("distributed", "distributed.scheduler", "distributed.nanny", "distributed.worker",
                     "distributed.core", "distributed.http.proxy", "tornado"), logging.WARNING),
    **dict.fromkeys(("bokeh", "bokeh.server.util"), logging.ERROR),
    **dict.fromkeys(("distributed.utils", "distributed.client"), logging.CRITICAL),
    # its one line, "Cluster closed without starting up", came before the build's own line naming
    # why (review R38a s50 #5)
    "distributed.deploy.spec": logging.ERROR,
}  # fmt: skip


#: the embedded clusters this process started (:func:`_make_client`) and has not let go of: an
#: address of one given as ``scheduler=`` is reached with its credentials (:func:`_own_cluster_security`)
_EMBEDDED: weakref.WeakSet[Any] = weakref.WeakSet()


def _embedded_security() -> Any:
    """The TLS credentials of one embedded cluster (review R42c s52 #3): a self-signed certificate
    and its key, made in memory for this cluster (``Security.temporary()``; Dask's TLS settings of
    ciphers and versions still apply). Its scheduler, nannies and workers listen on ``tls://`` and
    require the peer's certificate signed by that key, both ways, so only this process and the
    cluster's own processes (which get the credentials from their nanny through multiprocessing's
    pipe, never argv or the environment) can connect. Plain ``tcp://`` on 127.0.0.1 let every other
    local user of a shared node connect and run Python in the scheduler and the workers as the
    build's user. StoreError when ``cryptography`` (which makes the certificate) is not installed."""
    from distributed.security import Security

    try:
        return Security.temporary()
    except ImportError as exc:
        raise StoreError("the build's embedded Dask cluster runs on TLS with credentials made for the build, which "
                         "needs the cryptography package: pip install 'featurecache[build]' (or pip install "
                         f"cryptography) ({exc})") from exc  # fmt: skip


def _own_cluster_security(scheduler: str) -> Any:
    """The credentials of the embedded cluster of this process whose scheduler is at ``scheduler``
    (one :func:`_make_client` started and not yet closed: a caller that keeps such a cluster for
    several builds, as the test suite's shared clusters do, passes its address), else None: Dask's
    own security settings, for a cluster the user runs (``tls://`` with ``distributed.comm.tls.*``)."""
    return next((c.security for c in list(_EMBEDDED) if c.scheduler_address == scheduler), None)


def _make_client(
    workers: int | None, scheduler: str | None, dashboard: bool = False, levels: dict[str, int] | None = None,
    security: Any = None,
) -> tuple[Any, Any]:  # fmt: skip
    """A client of the external ``scheduler``, or of an embedded LocalCluster of ``workers``
    processes (and the cluster); ``dashboard``: its scheduler serves Dask's dashboard (bokeh must
    be importable: :func:`has_dashboard`). The embedded cluster runs on TLS with credentials of its
    own (:func:`_embedded_security`; ``security``: a ``distributed.Security`` with TLS credentials
    to use instead, e.g. one a caller shares between clusters it keeps); the client made here holds
    them. Dask's loggers get :data:`DASK_LOGGER_LEVELS`; ``levels``: the levels they had are added
    to it (those it holds are kept), for the caller to put back (:func:`_loggers_put_back`)."""
    import dask.config
    from distributed import Client, LocalCluster

    for name, level in DASK_LOGGER_LEVELS.items():
        logger = logging.getLogger(name)
        if levels is not None:
            levels.setdefault(name, logger.level)
        logger.setLevel(level)
    if scheduler:
        if workers is not None:
            log.warning("--workers %d is ignored with --scheduler %s: the cluster's own workers run the build",
                        workers, scheduler)  # fmt: skip
        # None (Dask's settings) but for an embedded cluster of this process, reused by address
        security = _own_cluster_security(scheduler)
        # Client() waits without a bound for the handshake of whatever answers the address
        _probe_scheduler(scheduler, security)
        try:
            # not the process's default client: the caller's own Dask work stays on its own client
            # (review R35b s49 #2); every stage passes this one (as_completed its loop)
            return Client(scheduler, timeout="20s", set_as_default=False, security=security), None
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--scheduler {scheduler!r} is not a Dask scheduler address ({exc}); "
                             "expected e.g. tcp://host:8786") from exc  # fmt: skip
        except OSError as exc:
            raise StoreError(f"cannot connect to the Dask scheduler at {scheduler}: {exc}") from exc
    n = workers if workers is not None else default_workers()
    from featurecache.build.worker_plugin import IgnoreInterrupt
    from featurecache.signals import sigint_blocked, sigterm_held

    if security is None:
        security = _embedded_security()
    elif not (security.require_encryption and security.get_connection_args("client")["ssl_context"]):
        raise ValueError("_make_client: security must hold TLS credentials and require encryption")
    cluster = client = None
    try:
        # the workers start with SIGINT blocked, until the plugin ignores it (worker_plugin's
        # module doc): a Ctrl-C while they import killed them with a KeyboardInterrupt traceback
        # each; here it is delivered when the block ends (the cluster is then closed below), and
        # a SIGTERM raises then too: raised inside LocalCluster(), it left a cluster half started
        # that no one closed but Dask's exit handler, which failed on it with a traceback
        # the scheduler and each nanny read the settings when they are made
        with sigint_blocked(), sigterm_held(), dask.config.set(embedded_dask_config()):
            cluster = LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, silence_logs=logging.WARNING,
                memory_limit="auto",
                # tls:// with this cluster's own credentials, not tcp:// that any local user could
                # reach (review R42c s52 #3); the client below gets them from the cluster
                security=security,
                # the scheduler's HTTP server (health, metrics; the dashboard's pages when it is on) on
                # a free local port: without an address it takes :8787, whoever else uses that port
                dashboard_address="127.0.0.1:0", scheduler_kwargs={"dashboard": dashboard},
                # the nannies' copy of the distributed settings, passed to every worker process they
                # start (by default a nanny holds the global ones by reference, which the block
                # restores on leaving: a restarted worker got Dask's). Only Nanny takes ``config``
                # (processes=True); only this section: the rest may hold objects that do not copy
                config={"distributed": copy.deepcopy(dask.config.get("distributed"))},
            )  # fmt: skip
        _EMBEDDED.add(cluster)
        client = Client(cluster, set_as_default=False)  # not the process's default (see above)
        client.register_plugin(IgnoreInterrupt(), name="featurecache-ignore-sigint")
    except BaseException as exc:
        if cluster is not None:  # a client made before the failure is closed with it
            _shutdown(client, cluster, stopped=exc)
        if isinstance(exc, RuntimeError) and "Nanny failed to start" in str(exc):
            # each worker printed its own error (stderr is the program's); distributed's two nested
            # RuntimeErrors say nothing more (review R36c s49 #3; run_build names the likely cause)
            raise WorkersNotStarted(f"the build's Dask workers could not start ({exc}); a worker's own "
                                    f"error, when it has one, is above{_main_not_from_a_file()}") from exc  # fmt: skip
        if isinstance(exc, RuntimeError) and str(exc).startswith("Cluster failed to start"):
            # distributed's wrapper of the scheduler's own error (e.g. its scratch directory could not
            # be made): two chained tracebacks and exit 1, "some inputs failed" (review R38a s50 #5)
            raise StoreError(cluster_not_started(exc.__cause__ or exc)) from exc
        raise
    return client, cluster


def cluster_not_started(cause: BaseException) -> str:
    """The line for an embedded cluster that could not start because of ``cause``; an OSError
    about a path under Dask's temporary directory (its ``dask-scratch-space``, which the scheduler
    and every worker make there) names that directory and where its setting came from."""
    import tempfile

    import dask.config

    line = f"the build's embedded Dask cluster could not start: {cause}"
    tmp = str(dask.config.get("temporary-directory", None) or tempfile.gettempdir())
    named = os.fsdecode(getattr(cause, "filename", None) or "")
    if isinstance(cause, OSError) and named.startswith(tmp.rstrip("/")):
        source = ("DASK_TEMPORARY_DIRECTORY" if os.environ.get("DASK_TEMPORARY_DIRECTORY")
                  else "Dask's temporary-directory setting" if dask.config.get("temporary-directory", None)
                  else "the system's temporary directory: TMPDIR")  # fmt: skip
        line += (f"; Dask's temporary directory is {tmp} ({source}): it must be a directory this user "
                 "can write; fix it, or set DASK_TEMPORARY_DIRECTORY to one")  # fmt: skip
    return line


class WorkersNotStarted(StoreError):
    """The embedded cluster's worker processes did not start (distributed's "Nanny failed to
    start"): each one's own error went to stderr."""


#: run_build's refusal of a call from a spawned worker's run of the program's main module (one line)
UNGUARDED_LINE = ("run_build() was called while a spawned process (one of a build's workers) ran the "
                  "program's main module to start: call it under `if __name__ == \"__main__\":`")  # fmt: skip


def _quiet_workers_soon(client: Any) -> None:
    """From the driver's SIGINT handler: have the embedded cluster's workers silence their Dask
    loggers (:func:`featurecache.signals.quiet_loggers`), without waiting (scheduled on the
    client's IO loop, thread-safe). Each worker does it on its own SIGINT too, but one whose
    SIGINT went to a C++ library's handler of its own (RDKit's substructure search) does not."""
    from featurecache.signals import quiet_loggers

    async def broadcast() -> None:
        with contextlib.suppress(BaseException):
            await client._run(quiet_loggers, on_error="ignore")

    client.loop.add_callback(broadcast)


#: what an address that is not a Dask scheduler most likely is (the end of the probe's messages)
NOT_DASK_HINT = ("another service on that port (an HTTP server? the dashboard, usually :8787, instead of "
                 "the scheduler, usually :8786)?")  # fmt: skip


def _check_scheduler_address(scheduler: str) -> None:
    """UsageError (exit 2) for an address distributed cannot parse (unknown scheme, no port), read
    as its ``connect`` reads it, before any connection: so that a ValueError the probe meets later
    comes from the other side's bytes, not from the address."""
    from distributed.comm import registry
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(scheduler)
        registry.get_backend(scheme)
        if scheme in ("tcp", "tls"):
            parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--scheduler {scheduler!r} is not a Dask scheduler address ({exc}); "
                         "expected e.g. tcp://host:8786") from exc  # fmt: skip


#: how long :func:`_check_reachable` waits for a TCP connection to the scheduler's address
SCHEDULER_REACH_S = 1.5
#: the pause between two of its attempts
SCHEDULER_REACH_RETRY_S = 0.25


def _check_reachable(scheduler: str) -> None:
    """StoreError (exit 3) within ``SCHEDULER_REACH_S`` for a ``tcp://`` address that no connection
    can be opened to: a host name that does not resolve, a port nothing listens on (refused), a
    network or host that is not reachable. distributed's connect retried those for its whole
    timeout (15 s) and then said "Timed out trying to connect ... after 15 s", also for a refused
    port. Plain connections (each closed at once) are tried again for ``SCHEDULER_REACH_S`` (a
    scheduler that is just starting); the first that opens ends the check, and so does one that
    only times out (a slow or filtering network: left to distributed's connect and its retries, as
    before). Other schemes (``tls://``, ``inproc://``, ``ucx://``) are left to distributed too."""
    import socket

    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(scheduler)
    if scheme != "tcp":
        return
    host, port = parse_host_port(location)
    deadline = time.monotonic() + SCHEDULER_REACH_S
    while True:
        try:
            failures = _connect_once(host, port, max(0.1, deadline - time.monotonic()))
        except (socket.gaierror, UnicodeError) as exc:
            reason = f"the host name {host} does not resolve ({exc.strerror if isinstance(exc, socket.gaierror) else exc})"
            error: BaseException = exc
        else:
            if not failures:
                return
            error = failures[-1]
            if all(isinstance(e, ConnectionRefusedError) for e in failures):
                reason = f"connection refused: nothing listens on port {port} of {host} (is the scheduler running there?)"
            else:
                reason = "; ".join(sorted({e.strerror or str(e) for e in failures}))
        if time.monotonic() + SCHEDULER_REACH_RETRY_S >= deadline:
            raise StoreError(f"cannot connect to the Dask scheduler at {scheduler}: {reason}") from error
        time.sleep(SCHEDULER_REACH_RETRY_S)


def _connect_once(host: str, port: int, timeout_s: float) -> list[OSError]:
    """Open (and close) one TCP connection to ``host:port``, trying each address the name resolves
    to: [] once one opens or one times out, else why each failed. Raises ``socket.gaierror`` for a
    name that does not resolve."""
    import socket

    failures: list[OSError] = []
    for family, kind, proto, _name, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(timeout_s)
                sock.connect(sockaddr)
            return []
        except TimeoutError:
            return []
        except OSError as exc:
            failures.append(exc)
    return failures


def _probe_scheduler(scheduler: str, security: Any = None) -> None:
    """Ask ``scheduler`` who it is, within ``SCHEDULER_ANSWER_S`` in all, before ``Client()`` is
    made: distributed's connect waits without a bound for the other side's handshake, so an
    address that accepts connections but is not Dask (an HTTP server, the dashboard port, a port
    forward to nothing) hung the build. StoreError (exit 3) naming the address and the likely
    reason, also when nothing accepts the connection; UsageError (exit 2) for a malformed address.
    ``security``: the credentials to connect with (None: Dask's security settings).

    Once the address parses, distributed's connect retries every failure to open the connection
    until its timeout (one OSError); what fails after that is the exchange with the other side:
    silence (the answer window runs out), a close before an answer (CommClosedError), or bytes
    that are not Dask's frames (an HTTP reply read as a frame length: MemoryError for exabytes,
    or a ValueError/struct/msgpack error). Those say what happened, not the decoder's error."""
    import asyncio
    import concurrent.futures

    from distributed.comm import connect
    from distributed.comm.addressing import parse_address
    from distributed.comm.core import CommClosedError, FatalCommClosedError
    from distributed.security import Security

    _check_scheduler_address(scheduler)
    _check_reachable(scheduler)
    tls = parse_address(scheduler)[0] == "tls"
    try:
        connection_args = (security or Security()).get_connection_args("client")
    except (OSError, ValueError) as exc:  # a certificate or key that does not load (ssl.SSLError: an OSError)
        raise StoreError(f"cannot connect to the Dask scheduler at {scheduler}: Dask's TLS settings for a client "
                         f"do not load: {exc}") from exc  # fmt: skip
    if tls and connection_args.get("ssl_context") is None:
        # distributed's TypeError, "TLS expects a `ssl_context` argument", read as an answer that was
        # not Dask's; an embedded cluster's credentials exist only in the build that made them
        raise StoreError(f"cannot connect to the Dask scheduler at {scheduler}: a tls:// address needs Dask's TLS "
                         "settings for a client, distributed.comm.tls.ca-file and distributed.comm.tls.client.cert "
                         "(and .key, unless the certificate's file holds it), in a Dask config file or the "
                         "DASK_DISTRIBUTED__COMM__TLS__CA_FILE, ..._TLS__CLIENT__CERT and ..._TLS__CLIENT__KEY "
                         "variables; they are not set here")  # fmt: skip

    async def ask() -> Any:
        comm = await connect(scheduler, timeout=SCHEDULER_CONNECT_S, **connection_args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def run() -> Any:  # a loop of its own, also when the caller runs one (a notebook)
        return asyncio.run(asyncio.wait_for(ask(), SCHEDULER_ANSWER_S))

    # a daemon thread, not a pool: a Ctrl-C while the probe waits ends the build at once (a pool's
    # exit joined its thread, so the interrupt waited out the answer window, ~20 s: review R4)
    pending: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def probe() -> None:
        try:
            pending.set_result(run())
        except BaseException as exc:  # handed to the waiting caller, which raises it
            pending.set_exception(exc)

    threading.Thread(target=probe, name="featurecache-scheduler-probe", daemon=True).start()
    try:
        answer = pending.result(timeout=SCHEDULER_ANSWER_S + 10)
    except (TimeoutError, concurrent.futures.TimeoutError) as exc:
        raise StoreError(f"the address {scheduler} accepts connections but did not answer as a Dask scheduler "
                         f"within {SCHEDULER_ANSWER_S:.0f} s: {NOT_DASK_HINT}") from exc  # fmt: skip
    except FatalCommClosedError as exc:  # e.g. a TLS handshake that failed: no connection
        raise StoreError(f"cannot connect to the Dask scheduler at {scheduler}: {exc}") from exc
    except CommClosedError as exc:  # connected, then closed by the other side before an answer
        log.debug("probe of %s: %r", scheduler, exc)
        if tls:  # TLS 1.3: a server's refusal of the client's certificate may come after the handshake
            raise StoreError(f"cannot connect to the Dask scheduler at {scheduler}: it closed the TLS connection "
                             "before answering, most likely refusing this client's certificate (Dask's "
                             f"distributed.comm.tls.client.cert and .key): {exc}") from exc  # fmt: skip
        raise StoreError(f"the address {scheduler} accepted the connection but closed it without answering "
                         f"as a Dask scheduler: {NOT_DASK_HINT}") from exc  # fmt: skip
    except OSError as exc:  # nothing accepts the connection (refused, unreachable, unknown host)
        raise StoreError(f"cannot connect to the Dask scheduler at {scheduler}: {exc}") from exc
    except Exception as exc:  # an answer, but not in Dask's wire format (the decoder's error is no news)
        log.debug("probe of %s: %r", scheduler, exc)
        raise StoreError(f"the address {scheduler} answered, but not in Dask's protocol: "
                         f"{NOT_DASK_HINT}") from exc  # fmt: skip
    kind = answer.get("type") if isinstance(answer, dict) else None
    if not isinstance(kind, str) or "Scheduler" not in kind:
        what = f"a Dask {kind}" if isinstance(kind, str) else f"something that answered {answer!r}"[:200]
        raise StoreError(f"the address {scheduler} is not a Dask scheduler: it is {what}; give the "
                         "scheduler's address (dask scheduler prints it; usually port 8786)")  # fmt: skip


#: ``--workers`` above this many worker processes per CPU is refused (:func:`max_workers`)
WORKERS_PER_CPU = 4
#: the memory one embedded worker process takes before it does any work (its imports: Dask, gemmi,
#: RDKit, zarr, numpy; review R3 measured 192-216 MB resident), rounded up
WORKER_START_BYTES = 256 * 2**20


def max_workers(cpus: int, memory_bytes: int) -> int:
    """The most embedded worker processes ``--workers`` may ask for on a machine of ``cpus`` CPUs and
    ``memory_bytes`` of memory: :data:`WORKERS_PER_CPU` per CPU (more only take turns on the CPUs),
    and no more than the memory holds at :data:`WORKER_START_BYTES` each (more are killed by the
    kernel's OOM killer while they start, taking the machine with them); at least 1."""
    return max(1, min(WORKERS_PER_CPU * cpus, memory_bytes // WORKER_START_BYTES))


def usable_cpus() -> int:
    """The CPUs this process may run on: its CPU affinity (``taskset``, Slurm's binding) and its
    cgroup's CPU quota (``cpu.max``: a Kubernetes pod's limit) taken into account, as Dask counts
    them (``dask.system.CPU_COUNT``). ``os.cpu_count()`` is the host's: 128 in a pod limited to 4
    (review R31d s47 #4)."""
    from dask.system import CPU_COUNT

    return max(1, int(CPU_COUNT))


def default_workers() -> int:
    """The embedded worker processes a build without ``--workers`` starts: one per usable CPU
    (:func:`usable_cpus`), fewer when the memory (or the cgroup's limit) holds fewer
    (:func:`max_workers`, the bound an explicit ``--workers`` is refused above): a default is never
    refused, it is lowered, and a warning says so."""
    from distributed.system import MEMORY_LIMIT  # the machine's memory, or its cgroup's limit

    cpus = usable_cpus()
    n = min(cpus, max_workers(cpus, MEMORY_LIMIT))
    if n < cpus:
        log.warning("starting %d worker process(es), not one per CPU (%d): %.1f GiB of memory holds about %d of "
                    "%d MiB each; --workers sets the count", n, cpus, MEMORY_LIMIT / 2**30, n,
                    WORKER_START_BYTES // 2**20)  # fmt: skip
    else:
        log.info("starting %d worker process(es): one per usable CPU", n)
    return n


def check_workers(workers: int) -> None:
    """Refuse (UsageError, exit 2) a ``--workers`` this machine cannot run (:func:`max_workers`),
    before any worker process is started: ``--workers 1000`` on a 2-CPU machine started 1000
    processes of 200 MB each and the kernel killed the build (review R3). Refused, not lowered: a
    build runs with the worker count it was given or not at all; the line says the most allowed."""
    from distributed.system import MEMORY_LIMIT  # the machine's memory, or its cgroup's limit

    cpus = usable_cpus()
    limit = max_workers(cpus, MEMORY_LIMIT)
    if workers <= limit:
        return
    gib = MEMORY_LIMIT / 2**30
    by_memory = MEMORY_LIMIT // WORKER_START_BYTES < WORKERS_PER_CPU * cpus
    why = (
        f"{gib:.1f} GiB of memory holds about {limit} worker processes of {WORKER_START_BYTES // 2**20} MiB each"
        if by_memory
        else f"{WORKERS_PER_CPU} per CPU, {cpus} CPU{'s' if cpus != 1 else ''}"
    )
    raise UsageError(f"workers={workers} (--workers {workers}) is more than this machine runs: at most {limit} "
                     f"({why}); leave it out for one per CPU")  # fmt: skip


def check_arguments(
    *, pdb_dir: Path, msa_dir: Path | None, ccd: Path | None, workers: int | None, part_size: int,
    config: BuildConfig, scheduler: str | None = None,
) -> None:  # fmt: skip
    """Refuse invalid arguments before anything is started or written (UsageError: exit 2), each
    named as run_build's argument and as ``featurecache build``'s option (review R35b s49 #9).
    ``workers`` is checked against this machine only for an embedded cluster (no ``scheduler``:
    with one, it is ignored)."""
    for option, directory in (("pdb_dir (--pdb-dir)", pdb_dir), ("msa_dir (--msa-dir)", msa_dir)):
        if directory is not None and not Path(directory).is_dir():
            # exists() follows links: a broken link, too, points at nothing there
            what = "not a directory" if Path(directory).exists() else "does not exist"
            raise UsageError(f"{option} {directory}: {what}")
    if ccd is not None:
        try:
            there = Path(ccd).exists()
        except OSError as exc:  # a stat the OS refuses (EIO, ESTALE): exit 3, as a read
            raise ccd_unreadable(exc, Path(ccd), CCD_STOPPED_AT_START) from exc
        if not there:
            raise UsageError(f"ccd (--ccd) {ccd}: no such file or directory")
        try:
            check_ccd(ccd)  # a garbage CCD would silently turn every ligand's bonds into perceived ones
        except CCDReadError as exc:  # the OS refused a read (EIO): no argument's fault, exit 3
            raise ccd_unreadable(exc, Path(ccd), CCD_STOPPED_AT_START) from exc
        except InputError as exc:
            raise UsageError(f"ccd (--ccd): {exc}") from exc
    if workers is not None and workers < 1:
        raise UsageError(f"workers (--workers) must be ≥ 1 (got {workers}; leave it out for one per CPU)")
    if workers is not None and not scheduler:
        check_workers(workers)
    if part_size < 1:
        raise UsageError(f"part_size (--part-size) must be ≥ 1 (got {part_size})")
    from featurecache.store.root import max_open_arrays

    try:  # read by the chem stage's and the index's readers, at the end of a build
        max_open_arrays()
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    if config.msa_depth_cap < 1:
        raise UsageError(
            f"msa_depth_cap (--msa-depth) must be ≥ 1 (got {config.msa_depth_cap}; row 0 is the query)"
        )
    if not 0 < config.conformer_timeout_s <= MAX_CONFORMER_TIMEOUT_S:  # also refuses nan and inf
        raise UsageError(f"conformer_timeout_s (--conformer-timeout) must be > 0 and ≤ {MAX_CONFORMER_TIMEOUT_S} "
                         f"seconds (RDKit's limit; got {config.conformer_timeout_s})")  # fmt: skip


#: RDKit's embedding timeout is an unsigned 32-bit count of seconds: past it every embedding
#: raised OverflowError, and each component was stored as failed, for good
MAX_CONFORMER_TIMEOUT_S = 2**32 - 1

#: what ``--pdb-dir`` must hold at least one of (names as :func:`structure_format` reads them)
STRUCTURE_FILE_KINDS = "mmCIF (.cif, .mmcif), PDB (.pdb, .ent) or BinaryCIF (.bcif), each optionally .gz"


def check_structure_files(pdb_dir: Path, out: Path) -> None:
    """Refuse a ``--pdb-dir`` without a single structure file among the files the build would read
    (non-hidden, recursive, the store itself skipped): UsageError (exit 2), before a Dask cluster
    starts or a store is created. Stops at the first structure file. ``--out`` naming the
    ``--pdb-dir`` itself is refused as that (its files would all be skipped as the store's)."""
    pdb_dir = Path(pdb_dir)
    if resolved(Path(out)) == resolved(pdb_dir):
        raise UsageError(f"out (--out) {out} is the pdb_dir (--pdb-dir): a store is a directory of its own; give "
                         f"a new or existing store's directory, e.g. {Path(out).resolve().parent / 'store'}")  # fmt: skip
    others: list[str] = []
    for p in input_paths(pdb_dir, out):  # what the build would read
        if structure_format(p.name):
            return
        others.append(p.relative_to(pdb_dir).as_posix())
    held = "no file (hidden files are skipped)" if not others else (
        f"{len(others)} other file{'s' if len(others) != 1 else ''} ({', '.join(sorted(others)[:3])}"
        f"{', …' if len(others) > 3 else ''})"
    )  # fmt: skip
    raise UsageError(f"pdb_dir (--pdb-dir) {pdb_dir}: no structure file to build from: looked for "
                     f"{STRUCTURE_FILE_KINDS}, found {held}")  # fmt: skip


def run_build(
    *,
    pdb_dir: Path,
    out: Path,
    msa_dir: Path | None = None,
    ccd: Path | Unset | None = UNSET,
    workers: int | None = None,
    scheduler: str | None = None,
    part_size: int = 16,
    config: BuildConfig | None = None,
    progress: bool = True,
    dashboard: bool = True,
    fork_server: bool = False,
    allow_downgrade: bool = False,
) -> BuildSummary:
    """Build (or extend) the store ``out``; see the module doc. A Ctrl-C raises KeyboardInterrupt
    (a SIGTERM its subclass :class:`BuildTerminated`) once the cluster is closed and the index
    rebuilt from the finished parts (flagged unfinished when the store had no finished build:
    ``store.index.UNFINISHED_KEY``); from the interrupt
    on, Dask's own logging is silenced here and in the embedded cluster's workers
    (:func:`featurecache.signals.quiet_on_sigint`): its shutdown of the cancelled tasks is not news.
    ``ccd``: a ``components.cif[.gz]`` or a directory of per-component files; None builds without
    CCD definitions (``--no-ccd``). Left out, and ``config``'s ``msa_depth_cap`` and
    ``keep_crystallization_aids`` left out (:class:`~featurecache.build.config.BuildConfig`), the
    build runs at their defaults, but over a store that records another value it is refused as
    ``featurecache build`` without the option is (:class:`~featurecache.build.config.SettingsLeftOut`,
    a UsageError naming each argument and its option; nothing written): give the value to keep the
    store's entries, or the default (None for ``ccd``) to rebuild them at it.
    ``fork_server`` (what ``featurecache build`` passes): the embedded cluster's workers are forked
    by a fork server that imports the build's modules once, not spawned each with its own imports
    (:mod:`featurecache.build.fork_server`: the server lives as long as this process, and a later
    build reuses it only while the package's files and the environment are as they were).
    It is the process's multiprocessing fork server: whatever the program later starts with the
    ``forkserver`` method is forked from it, with SIGINT blocked, the build's modules preloaded and
    the environment of its start. It is not taken where the program already runs a fork server or
    has ``forkserver`` as its start method (Python 3.14's default on Linux): the workers are
    spawned then, and a log line says why.
    ``allow_downgrade``: rebuild entries and MSAs a newer featurecache built, as this one's
    featurizer; without it such a build is refused (UsageError, nothing written:
    :func:`~featurecache.store.versions.downgrade_line`).
    A script that calls it must do so under ``if __name__ == "__main__":``: each worker process a
    build spawns runs the main module's top level again: a call there ends that worker with one
    line on stderr, and the build, its workers not started, raises UsageError naming the guard."""
    from featurecache.build import fork_server as server
    from featurecache.signals import quiet_on_sigint

    _refuse_in_spawned_bootstrap()
    top_level = _unguarded_call(sys._getframe(1))  # the program's main module, outside the guard
    _note_ignored_signals()
    levels: dict[str, int] = {}  # of Dask's loggers, before the build set them (_make_client)
    with (
        _environ_undone(),
        _loggers_put_back(levels),
        quiet_on_sigint(sigterm=BuildTerminated) as on_interrupt,
    ):
        try:
            return _run_build(
                pdb_dir=pdb_dir, out=out, msa_dir=msa_dir, ccd=ccd, workers=workers, scheduler=scheduler,
                part_size=part_size, config=config, progress=progress, on_interrupt=on_interrupt,
                dashboard=dashboard, fork_server=fork_server, allow_downgrade=allow_downgrade, logger_levels=levels,
            )  # fmt: skip
        except WorkersNotStarted:
            if not top_level:
                raise
            # the likely cause: each worker re-ran this call, was refused (its one line, above) and
            # exited; raised from here, the script's uncaught error is a short traceback (review R36c s49 #3)
            error = UsageError("the build's Dask workers could not start: a script that calls run_build() at its "
                               "top level must do so under `if __name__ == \"__main__\":` (each worker runs the "
                               "main module again; their own lines are above)")  # fmt: skip
        finally:
            server.stop()  # Dask's start method as it was (a no-op when this build changed nothing)
    raise error from None


def _unguarded_call(frame: Any) -> bool:
    """Whether ``frame`` (run_build's caller) is the top level of the program's main module, read
    from a file, outside an ``if __name__ == "__main__":`` block: the call each spawned worker makes
    again. A call inside the guard is at the top level too, and its workers may fail for another
    reason (review R37 s49 #2: it was blamed on the guard); a main module not read from a file
    (``python -c``, standard input) is not blamed either."""
    if frame.f_code.co_name != "<module>" or frame.f_globals.get("__name__") != "__main__":
        return False
    try:
        tree = ast.parse(Path(frame.f_code.co_filename).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    line = frame.f_lineno
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and _is_main_test(node.test)
            and node.lineno <= line <= (node.end_lineno or 0)
        ):
            return False
    return True


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    consts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and consts == ["__main__"]


def _main_not_from_a_file() -> str:
    """`` (...)`` naming the main module's source when spawned workers cannot run it again (a
    program read from standard input: review R37 s49 #3), else ``""``."""
    main = sys.modules.get("__main__")
    source = getattr(main, "__file__", None)
    if isinstance(source, str) and not os.path.isfile(source):
        return (f"; the program's main module was not read from a file ({source}): spawned workers "
                "cannot run it again, run the program from a file")  # fmt: skip
    return ""


@contextlib.contextmanager
def _loggers_put_back(levels: dict[str, int]) -> Iterator[None]:
    """On leaving, each logger of ``levels`` (name -> the level it had before the build set it:
    :func:`_make_client`) that still has the build's level (:data:`DASK_LOGGER_LEVELS`; one the
    program set meanwhile keeps its own) gets its level back (review R35b s49 #5)."""
    try:
        yield
    finally:
        for name, level in levels.items():
            logger = logging.getLogger(name)
            if logger.level == DASK_LOGGER_LEVELS.get(name):
                logger.setLevel(level)


def _build_environ() -> dict[str, str]:
    """The variables a build sets in this process's environment, with their values: each Nanny of
    its cluster sets its pre-spawn environment (``distributed.nanny.pre-spawn-environ``: one BLAS
    thread, malloc trimming) and a hash seed before it starts a worker (``os.environ.update``),
    distributed marks this process as the workers' parent, and RDKit's first import (the chem
    stage's) sets ``RDBASE`` to its own data directory."""
    env: dict[str, str] = {}
    paths = sys.modules.get("rdkit.RDPaths")  # rdkit.RDConfig sets RDBASE to its _share when unset
    if isinstance(getattr(paths, "_share", None), str):
        env["RDBASE"] = paths._share  # type: ignore[union-attr]
    if "distributed" not in sys.modules:  # no cluster started
        return env
    from featurecache.build.fork_server import pre_spawn_environ

    env.update(pre_spawn_environ())
    env["__DASK_PARENT_PID"] = str(os.getpid())  # distributed.proctitle
    return env


@contextlib.contextmanager
def _environ_undone() -> Iterator[None]:
    """On leaving, each variable of :func:`_build_environ` that holds the value the build set, and
    held another one (or none) before, is put back: every process the program started after a build
    ran with one BLAS thread and Dask's hash seed (review R35b s49 #4). A variable the program
    changed meanwhile keeps its value, unless the program set the same value as the build's
    (``OMP_NUM_THREADS=1`` during a build is put back as if the build had set it: the two cannot
    be told apart; review R36c s49 #7)."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for key, value in _build_environ().items():
            if os.environ.get(key) != value or before.get(key) == value:
                continue
            if key in before:
                os.environ[key] = before[key]
            else:
                os.environ.pop(key, None)


def _refuse_in_spawned_bootstrap() -> None:
    """One line on stderr and the process ends (status 2) when called while a spawned process runs
    the program's main module to start
    (multiprocessing's bootstrapping, which runs it as ``__mp_main__``; the flag is the one CPython's
    own check reads, ``spawn._check_not_importing_main``; ``parent_process()`` is set only after
    it): a script that calls run_build at its top level, without ``if __name__ == "__main__":``,
    ran it again in every worker the build spawned, where a second build failed with ~45 lines of
    Dask and multiprocessing tracebacks (review R35b s49 #12)."""
    import multiprocessing.process

    bootstrapping = getattr(multiprocessing.process.current_process(), "_inheriting", False)
    if bootstrapping and "__mp_main__" in sys.modules:
        # one line, and the process ends: raised, it was a traceback through multiprocessing's
        # bootstrapping, and a script that caught it went on to start as a worker anyway; the
        # worker can do nothing else (review R36c s49 #3). The build that spawned it then says
        # its workers did not start (WorkersNotStarted: UsageError from a script's top level).
        with contextlib.suppress(Exception):
            sys.stderr.write(f"featurecache: error: {UNGUARDED_LINE}\n")
            sys.stderr.flush()
        os._exit(2)


def _note_ignored_signals() -> None:
    """One line per stop signal this process ignores, worded as ``train``'s: a process started with
    SIGINT ignored (``cmd &`` in a script: the shell sets it so) inherits that across exec, and
    Ctrl-C (or ``kill -INT``) sent to the build then does nothing; --help promises 130 for it. The
    build leaves an ignored signal alone (:func:`featurecache.signals.quiet_on_sigint`)."""
    from featurecache.signals import ignored_signal_note

    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(sig) is signal.SIG_IGN:
            log.info("%s", ignored_signal_note(sig, "the build"))


class BuildTerminated(KeyboardInterrupt):
    """SIGTERM during a build (what ``timeout``, Slurm and Kubernetes send): raised where Ctrl-C's
    KeyboardInterrupt is and handled as it is (the finished parts kept, the index rebuilt, the
    cluster closed quietly); the CLI says the same line and exits 143 instead of 130."""

    exit_status = 143


def _run_build(
    *,
    pdb_dir: Path,
    out: Path,
    msa_dir: Path | None,
    ccd: Path | Unset | None,
    workers: int | None,
    scheduler: str | None,
    part_size: int,
    config: BuildConfig | None,
    progress: bool,
    on_interrupt: list[Callable[[], None]],
    dashboard: bool = True,
    fork_server: bool = False,
    allow_downgrade: bool = False,
    logger_levels: dict[str, int] | None = None,
) -> BuildSummary:
    given_config, given_ccd = config, ccd
    config = config or BuildConfig()
    ccd = None if ccd is UNSET else ccd
    t_start = time.perf_counter()
    pdb_dir, out = Path(pdb_dir), Path(out)
    check_arguments(pdb_dir=pdb_dir, msa_dir=msa_dir, ccd=ccd, workers=workers, part_size=part_size,
                    config=config, scheduler=scheduler)  # fmt: skip
    check_structure_files(pdb_dir, out)
    check_store_dir(out)
    # a setting the store records that this call leaves out would rebuild its entries at the default
    # (review R15 s40 #2): refused, nothing written, as `featurecache build` is (review R35b s49 #1)
    refuse_settings_left_out(out, given_ccd, given_config, msa_dir, pdb_dir)
    for name, default in ((WORKER_ANSWER_ENV, WORKER_ANSWER_S), (NO_WORKER_WARN_ENV, NO_WORKER_WARN_S)):
        _seconds_setting(name, default)  # a bad value is a usage error before anything starts
    if fork_server and scheduler is None:
        # now: the server's imports run while this process reads the inputs and the store
        from featurecache.build import fork_server as server

        server.start()
    # workers of an external cluster run in another working directory: every path the stages
    # send them (part paths under out, input, MSA and CCD paths) must be absolute
    pdb_dir, out = _absolute(pdb_dir), _absolute(out)
    msa_dir = _absolute(msa_dir) if msa_dir is not None else None
    ccd = _absolute(ccd) if ccd is not None else None
    try:  # every file of the CCD read: one the OS refuses stops the build now, in one line
        ccd_fp = ccd_fingerprint(Path(ccd) if ccd else None)
    except OSError as exc:
        assert ccd is not None
        raise ccd_unreadable(exc, Path(ccd), CCD_STOPPED_AT_START) from exc
    # the CCD is in no entry key: each entry records the definitions it used (build.ccd_keys); the
    # key with the fingerprint is its failures', and that of entries built before that record
    entry_config = config.entry_config_hash(PER_ENTRY_DEFINITIONS)
    ccd_config = config.entry_config_hash(ccd_fp)
    summary = BuildSummary(store=str(out))
    # the workers are compared with the package as it is now (a long test session or a notebook
    # outlives edits to it; an embedded cluster's new workers import the files as they are now)
    featurecache.source_digest(refresh=True)
    # the lock before the cluster starts (seconds): meanwhile `info` and `prune` on a new store name
    # this build, not "no store there" (review R35a s49 #7); a refused build costs no cluster start,
    # and one that ends before it wrote the store leaves no OUT or lock file it made (tidy)
    locked = contextlib.ExitStack()
    locked.enter_context(BuildLock(out, tidy=True))
    try:
        dashboard = dashboard and has_dashboard()  # its pages need bokeh
        client, cluster = _make_client(workers, scheduler, dashboard, logger_levels)
    except BaseException:
        locked.close()
        raise
    if cluster is not None:  # an external cluster's workers are not ours to silence
        on_interrupt.append(lambda: _quiet_workers_soon(client))
    stopped_by: BaseException | None = None
    try:
        with _cluster_errors(client, scheduler):
            if scheduler:
                _wait_for_workers(client, scheduler)
            _check_worker_versions(client, scheduler)
            _forget_parsed_ccd(client, scheduler)
        with contextlib.ExitStack() as held:
            # every worker must see the store (and the inputs) at the driver's paths, or its parts
            # land where the driver cannot see them (review R27c s45 #1): checked before anything
            # of this build is written (the probe file is gone again before init_store)
            with _cluster_errors(client, scheduler), _store_token(out) as probe:
                _check_worker_paths(client, scheduler, out, probe,
                                    {"--pdb-dir": pdb_dir, "--msa-dir": msa_dir, "--ccd": ccd})  # fmt: skip
            # a store without a finished build's index (new, removed and built again from scratch,
            # or its first build killed) publishes its index flagged unfinished until this build
            # ends, so the lookup service keeps answering 503 instead of serving a part of it as
            # the whole; a finished store's extension publishes as it goes, as it always did
            finished = first_build_finished(out)
            # before anything is written: data of a newer featurecache taken back to this one's
            downgrade = downgrade_line(out, pdb_dir, msa_dir)
            if downgrade is not None and not allow_downgrade:
                raise UsageError(f"{downgrade}; nothing was written")
            if downgrade is not None:
                log.warning("--allow-downgrade: %s", downgrade)
            previous = _previous_pdb_dir(out)
            if previous is not None and resolved(Path(previous)) != resolved(
                pdb_dir
            ):  # (spelled or linked otherwise: the same)
                summary.previous_pdb_dir = previous
            init_store(
                out,
                {"config_hash": config.hash(), "entry_config_hash": ccd_config, "config": config.as_dict(),
                 BUILD_INPUTS_KEY: build_inputs(pdb_dir, msa_dir, ccd, ccd_fp)},
            )  # fmt: skip
            # each part task reads it back before it writes (a worker that joined later)
            token = held.enter_context(_store_token(out))
            with store_writes(out / "parts"):
                remove_leftovers(out)
                # what this build writes is the parts not here now (one build at a time: BuildLock);
                # the summary counts the warnings of those only, not those an earlier run recorded
                parts_before = {p.name for p in complete_parts(out)}
                deleted = _parts_may_be_gone(out)
                # the components the index lists of parts deleted by hand: the rebuild below drops
                # them; a rescan part has this build's chem stage compute them again
                if deleted:
                    _rescan_for_gone_components(out)
            # the entries the index lists of parts deleted by hand: the rebuild below drops them
            listed = _listed_of_gone_parts(out) if deleted else []
            # from the parts: repairs an index left stale or damaged by a killed build
            start_index = rebuild_index(out, finished=finished)
            stored = start_index["entries"]
            # files under --msa-dir (when it is --pdb-dir or lies inside it) are the MSA stage's; a
            # file moved within --pdb-dir (or recompressed) takes the id of its stored entry
            known = StoredEntries(out, stored)
            inputs = discover(pdb_dir, entry_config, exclude=out, msa_dir=msa_dir, cache_root=out,
                              progress=progress, stored=known)  # fmt: skip
            inputs = with_ccd_keys(inputs, ccd_config)
            summary.entries_lost = _record_lost(out, pdb_dir, listed, inputs, stored)
            if summary.entries_lost:  # the index with their removal
                start_index = rebuild_index(out, finished=finished)
                stored = start_index["entries"]
                known = StoredEntries(out, stored)
            # the parts of this --pdb-dir: those recording it, or a directory renamed or moved to it
            homes = known.homes(pdb_dir, [i.rel for i in inputs])
            _note_moved(homes, pdb_dir)
            _warn_twins(inputs)
            # listed failures of paths no longer inputs here (an MSA stage's file, a file removed)
            just_withdrawn = withdraw_failures(out, pdb_dir, msa_dir, inputs, start_index["failures"], homes)
            done = done_keys(out, start_index.get(WITHDRAWN)) - {r["key"] for r in just_withdrawn}
            if start_index.get(REMOVED) is not None:  # removed by prune --sources-gone: built again if back
                done -= set(start_index[REMOVED].column("key").to_pylist())
            withdrawn_paths = {r["path"] for r in just_withdrawn}
            if start_index.get(WITHDRAWN) is not None:
                withdrawn_paths.update(start_index[WITHDRAWN].column("path").to_pylist())
            try:  # (reads the definitions its entries used: a read the OS refuses stops the build)
                summary.ccd_changed = changed_definitions(out, stored, inputs, ccd)
            except CCDReadError as exc:
                assert ccd is not None
                raise ccd_unreadable(exc, Path(ccd), CCD_STOPPED_BEFORE_WORK) from exc
            pending = _pending(
                inputs, done, stored, start_index["failures"], withdrawn_paths, summary.ccd_changed.keys()
            )
            summary.n_inputs = len(inputs)
            summary.entries_gone = _entries_gone(inputs, stored, homes, pdb_dir)
            # entries of another featurizer kept (not those an input of this build takes: rebuilt)
            for note in extension_notes(out, stored, pdb_dir, homes, (i.entry_id for i in inputs)):
                log.warning("%s", note)
            summary.n_skipped = len(inputs) - len(pending)
            summary.input_bytes = sum(i.size for i in inputs)
            summary.ccd_bytes = ccd_input_bytes(ccd)
            log.info(
                "%d input files, %d up to date, %d to build", len(inputs), summary.n_skipped, len(pending)
            )
            summary.workers = len(client.scheduler_info().get("workers", {}))
            # the embedded cluster's own dashboard only (its HTTP server runs without one, and an
            # external cluster's link is its operator's business)
            summary.dashboard = client.dashboard_link if cluster is not None and dashboard else None
            if summary.dashboard:
                log.info("Dask dashboard: %s", summary.dashboard)
            lost_since = _last_event_time(client)
            try:
                with _cluster_errors(client, scheduler), _warn_without_workers(client, scheduler):
                    _run_structure_parts(
                        client, out, pdb_dir, pending, part_size, entry_config, ccd, config, summary, progress,
                        finished, ccd_config=ccd_config, token=token,
                    )  # fmt: skip
                    forget_digests(out, pdb_dir, summary.digest_changed)
                    # (counted once the inputs are built: one that failed replaced nothing)
                    failed = {f["path"] for f in summary.failures}
                    summary.n_replaced, summary.n_rebuilt, summary.n_kept = _count_replaced(
                        pending, stored, failed
                    )
                    summary.moved = _moved(pending, stored, failed)
                    summary.rebuilt_for_definitions = summary_reasons(summary.ccd_changed, pending, failed)
                    msa = _run_extra_stages(client, out, msa_dir, ccd, config, summary, progress, finished)
                    summary.msa_input_bytes = msa_input_bytes(
                        msa_dir, msa.listed, (Path(pdb_dir) / native(i.rel) for i in inputs)
                    )
                    summary.workers_lost = _workers_lost(client, lost_since)
                finished = True  # every stage ran to its end (failed inputs are listed, not unfinished)
            except BaseException as stopped:
                # the parts are the truth: the index is rebuilt whatever happened above (still
                # flagged unfinished when this build did not finish a store that had none); when the
                # store refuses that too (a full disk), the error that stopped the build is the one told
                try:
                    _publish(out, finished)
                except StoreError as exc:
                    if str(exc) != str(stopped):
                        log.warning("the index was not rebuilt after the build stopped (%s); the next build "
                                    "rebuilds it", exc)  # fmt: skip
                raise
            # every stage ran after the parts this build wrote: their entries are published now
            tables = _publish(out, finished, publish=True)
            if msa_dir is None and summary.n_msa_chains:
                summary.kept_msa_dirs = _msa_dirs_of(out, tables.get("msas"))
            _new_warnings(summary, tables.get("warnings"), parts_before)
            warn_mixed_definitions(out, tables, summary.components_computed, ccd, pdb_dir)
            summary.n_failed_earlier = _failed_earlier(tables["failures"], inputs, summary)
            summary.n_failed_earlier += summary.n_msa_failed_earlier
    except BaseException as exc:
        stopped_by = exc  # what the shutdown follows (not the caller's ambient sys.exc_info())
        raise
    finally:
        try:
            _shutdown(client, cluster, stopped=stopped_by)
        finally:
            locked.close()
    summary.store_bytes = store_bytes(out)
    summary.seconds = time.perf_counter() - t_start
    lines = (undefined_residues_line(summary, ccd), no_msa_dir_line(summary, msa_dir),
             sources_gone_line(summary, detail=True), changed_inputs_line(summary))  # fmt: skip
    for line in lines:
        if line is not None:
            log.warning("%s", line)
    if summary.moved:
        log.info("%s", moved_line(summary))
    log.debug("index rebuilt: %s", {k: v.num_rows for k, v in tables.items()})
    return summary


def _publish(out: Path, finished: bool, publish: bool = False) -> dict[str, Any]:
    """Rebuild the index from the parts and stamp the store updated; returns the index tables. A
    write the OS refuses is a StoreError naming the file (exit 3). ``publish``: the structure parts
    this build wrote are published (its MSA and chem stages have run after them); else they stay
    held back from the index (:func:`rebuild_index`), for the next build to finish and publish."""
    tables = rebuild_index(out, finished=finished, publish=publish)
    with store_writes(out / "zarr.json"):
        mark_updated(out)
    return tables


def _absolute(path: Path | str) -> Path:
    """``path`` made absolute against the driver's cwd (symlinks kept, as the user named them)."""
    return Path(os.path.abspath(path))


@contextlib.contextmanager
def _cluster_errors(client: Any, scheduler: str | None) -> Iterator[None]:
    """Cluster calls inside: an exception that says the cluster failed them becomes the one-line
    StoreError of :func:`_cluster_failure`; our own errors and anything else (a bug) pass unchanged."""
    try:
        yield
    except FeatureCacheError:
        raise
    except Exception as exc:
        lost = _cluster_failure(client, scheduler, exc)
        if lost is None:
            raise
        raise lost from exc


def _cluster_failure(client: Any, scheduler: str | None, exc: Exception) -> StoreError | None:
    """A one-line StoreError (exit 3) for a build stage that failed because of the cluster (the
    scheduler went away, a task was cancelled, a worker lacks featurecache), else None (a bug:
    the traceback is kept). The parts already written are kept either way."""
    from asyncio import CancelledError as AsyncCancelled
    from concurrent.futures import CancelledError as FuturesCancelled

    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError

    where = f"the Dask scheduler at {scheduler}" if scheduler else "the embedded Dask cluster"
    resume = "every finished part is kept; run the same command again to resume"
    status = getattr(client, "status", "running")
    cancelled = (FutureCancelledError, AsyncCancelled, FuturesCancelled, CommClosedError)
    if isinstance(exc, cancelled) or status != "running":
        return StoreError(
            f"lost {where} during the build ({type(exc).__name__}: {exc}"[:500] + f"); {resume}"
        )
    if isinstance(exc, ImportError) and "featurecache" in str(exc):
        return StoreError(f"a worker of {where} cannot import featurecache ({type(exc).__name__}: {exc}); "
                          f"install the driver's featurecache on every worker; {resume}")  # fmt: skip
    return None


def _wait_for_workers(client: Any, scheduler: str) -> None:
    """An external scheduler without a worker would let the build wait forever: StoreError (exit 3).
    A worker Dask paused counts (``client.wait_for_workers`` counts running ones only, and refused
    a cluster of paused workers as one without any): the build starts, and says what holds it back
    (:func:`_warn_without_workers`)."""
    deadline = time.monotonic() + WAIT_FOR_WORKERS_S
    while not client.scheduler_info().get("workers"):
        if time.monotonic() > deadline:
            raise StoreError(f"the Dask scheduler at {scheduler} has no worker (waited {WAIT_FOR_WORKERS_S:.0f} s); "
                             "start one with: dask worker " + scheduler)  # fmt: skip
        time.sleep(0.2)


@dataclass
class _Nag:
    """When to warn again about a condition that goes on: first after ``first`` s, then after
    twice as long, and so on, at most every ``NO_WORKER_WARN_MAX_S``."""

    first: float
    since: float | None = None  # when the condition was first seen
    warn_at: float = 0.0  # seconds since then
    interval: float = 0.0
    warned: bool = False

    def due(self, now: float) -> float | None:
        """The seconds the condition has lasted when a warning is due now, else None."""
        if self.since is None:
            self.since, self.warn_at, self.interval = now, self.first, self.first
        waited = now - self.since
        if waited < self.warn_at:
            return None
        self.warned = True
        self.interval = min(self.interval * 2, max(self.first, NO_WORKER_WARN_MAX_S))
        self.warn_at = waited + self.interval
        return waited

    def reset(self) -> bool:
        """The condition is over: whether it was warned about."""
        warned, self.since, self.warned = self.warned, None, False
        return warned


def _paused_stall(client: Any, workers: dict[str, Any]) -> list[str]:
    """The workers that hold the build back because Dask's memory manager paused them (a paused
    worker starts no task, and the build waits for it without limit: review R27c s45 #3), each
    as "worker ADDR is paused at N MiB of its M MiB memory limit"; [] when the build is not held
    back: some worker runs, and no task of this client sits on a paused worker while none runs
    on a running one. ``workers``: the scheduler's (``client.scheduler_info()["workers"]``)."""
    paused = {a: w for a, w in workers.items() if w.get("status") == "paused"}
    if not paused:
        return []
    if len(paused) < len(workers):
        ours = {str(k) for k in client.futures}
        held = {a: {str(k) for k in keys} & ours for a, keys in client.processing().items()}
        if not any(held.get(a) for a in paused) or any(held.get(a) for a in workers if a not in paused):
            return []
    mib = 2**20
    return [
        f"worker {a} is paused at {w.get('metrics', {}).get('memory', 0) / mib:.0f} MiB of its "
        f"{(w.get('memory_limit') or 0) / mib:.0f} MiB memory limit"
        for a, w in sorted(paused.items())
    ]


@contextlib.contextmanager
def _warn_without_workers(client: Any, scheduler: str | None) -> Iterator[None]:
    """Meanwhile, a thread asks the scheduler about its workers while the build waits for
    results (the client holds futures):

    - on an external scheduler without a worker for ``NO_WORKER_WARN_S``, it logs a warning
      naming the scheduler and the command that starts a worker; again after twice as long, and
      so on (at most every ``NO_WORKER_WARN_MAX_S``), and one line when workers are back. The
      build keeps waiting: workers that come back take the work up. Before, every worker gone
      mid-build left it silent, without limit (review R1 s27 #1). An embedded cluster's workers
      are restarted by their nannies: nothing to watch there.
    - on any cluster whose workers Dask's memory manager paused, so that the build's tasks wait
      on them (:func:`_paused_stall`), after as long: a warning naming each, its memory and its
      limit, and what to do, at the same intervals, and one line when they run again. Before,
      such a build hung silently, without limit (review R27c s45 #3)."""
    first = _seconds_setting(NO_WORKER_WARN_ENV, NO_WORKER_WARN_S)
    poll_s = min(first / 4, 5.0)
    stop = threading.Event()
    where = _cluster_name(scheduler)

    def watch() -> None:
        no_worker, paused = _Nag(first), _Nag(first)
        while not stop.wait(poll_s):
            try:
                workers = client.scheduler_info().get("workers", {})
                n = len(workers)
                stalled = _paused_stall(client, workers) if n and client.futures else []
            except Exception:  # a lost scheduler: the build's own calls say so
                continue
            now = time.monotonic()
            if not stalled and paused.reset():
                log.info("the build's tasks run again on %s; the build goes on", where)
            if n and no_worker.reset() and scheduler:
                log.info("the Dask scheduler at %s has %d worker%s again; the build goes on", scheduler, n,
                         "s" if n > 1 else "")  # fmt: skip
            if stalled:
                waited = paused.due(now)
                if waited is not None and not stop.is_set():
                    log.warning("the build has waited %.0f s for paused workers of %s: %s (Dask pauses a worker "
                                "at distributed.worker.memory.pause, %s of its limit, until its memory falls); "
                                "the build waits for them: %s",
                                waited, where, "; ".join(stalled), _pause_fraction(), _pause_remedy(scheduler, n))  # fmt: skip
            if n or not scheduler:
                continue
            waited = no_worker.due(now) if client.futures else None
            if waited is not None and not stop.is_set():
                log.warning("the Dask scheduler at %s has had no worker for %.0f s; the build waits for one "
                            "(start one with: dask worker %s)", scheduler, waited, scheduler)  # fmt: skip

    thread = threading.Thread(target=watch, name="featurecache-worker-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=poll_s + 1.0)


#: the variable that sets Dask's ``distributed.worker.memory.pause``
PAUSE_ENV = "DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE"


def _pause_remedy(scheduler: str | None, n_workers: int) -> str:
    """What to do about paused workers: a larger memory limit on an external cluster's, fewer
    --workers on an embedded cluster of several (not with one already: review R38a s50 #9), and
    a higher pause fraction, naming :data:`PAUSE_ENV` when that variable set it."""
    if scheduler:
        first = "restart it with a larger --memory-limit (dask worker --memory-limit), or "
    elif n_workers > 1:
        first = "run the build with fewer --workers (each gets a larger share of the memory), or "
    else:
        first = ""
    env = os.environ.get(PAUSE_ENV)
    where = f" (set to {env} by {PAUSE_ENV})" if env is not None else ""
    return f"{first}raise distributed.worker.memory.pause{where}"


def _pause_fraction() -> str:
    """Dask's ``distributed.worker.memory.pause`` as this process reads it ("80 %")."""
    import dask

    value = dask.config.get("distributed.worker.memory.pause", 0.8)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value * 100:.0f} %"


#: why the scheduler removed a worker, by the start of its stimulus id (Dask's words are its own)
WORKER_REMOVED_BECAUSE = {
    "handle-worker-cleanup": "its connection closed: the process ended (killed, out of memory, or restarted by "
    "its nanny: see its log)",
    "check-worker-ttl": "it stopped answering (Dask's worker-ttl)",
    "worker-send-comm-fail": "the scheduler could not reach it",
}


def _last_event_time(client: Any) -> float:
    """The time of the scheduler's latest cluster event (its clock, not ours), or 0.0: where
    :func:`_workers_lost` starts reading."""

    def latest(dask_scheduler: Any) -> float:
        return max((float(t) for t, _ in dask_scheduler.get_events("all")), default=0.0)

    try:
        return float(client.run_on_scheduler(latest))
    except Exception:  # no answer now: every removal the scheduler still lists is counted
        return 0.0


def _workers_lost(client: Any, since: float) -> list[str]:
    """The workers the scheduler removed after ``since`` (:func:`_last_event_time`), as
    "ADDRESS (why)": a worker killed, restarted by its nanny (out of memory), or gone silent.
    Their tasks ran again elsewhere; before, the build said nothing of it (review R27c s45 #8).
    A worker closed on purpose (retired, scaled down) is named as such. The events are read on the
    scheduler and only these fields sent: ``client.get_events("all")`` sends every event, and
    Dask's own "replicate" event (a ``scatter(..., broadcast=True)``, which the MSA scan makes) holds
    WorkerState objects that cannot be sent: the scheduler logged two tracebacks and the call
    failed, so the row was silently empty (CI rehearsal 98, session 45)."""

    def removals(dask_scheduler: Any) -> list[tuple[float, str, str, bool]]:
        return [(float(t), str(m.get("worker", "?")), str(m.get("stimulus_id", "")), bool(m.get("expected")))
                for t, m in dask_scheduler.get_events("all")
                if isinstance(m, dict) and m.get("action") == "remove-worker"]  # fmt: skip

    try:
        events = client.run_on_scheduler(removals)
    except Exception as exc:  # e.g. a scheduler that refuses to run functions (distributed.scheduler.pickle)
        log.warning("the summary names no lost worker: the Dask scheduler did not list its removed workers "
                    "(%s: %s)", type(exc).__name__, str(exc)[:200])  # fmt: skip
        return []
    lost: dict[str, str] = {}
    for t, worker, stimulus, expected in events:
        if t <= since:
            continue
        why = next((w for prefix, w in WORKER_REMOVED_BECAUSE.items() if stimulus.startswith(prefix)), None)
        if expected:
            why = "closed or retired on purpose"
        lost[worker] = why or stimulus.rsplit("-", 1)[0] or "no reason given"
    return [f"{address} ({why})" for address, why in lost.items()]


def _describe(versions: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in versions.items())


def _seconds_setting(name: str, default: float) -> float:
    """``default``, or the environment variable ``name`` when set: seconds > 0 (else a UsageError
    naming it)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise UsageError(f"{name}={raw!r}: not a number of seconds > 0")
    return value


def _ask_workers(
    client: Any, function: Callable[[], Any], what: str, scheduler: str | None
) -> dict[str, Any]:
    """``function`` run on every worker the scheduler lists (``client.run``), each worker asked
    apart: ``{address: its result, or the exception it raised or met (a CommClosedError / OSError:
    it went away)}``. ``client.run`` over all of them waited silently, without a limit, for a
    worker that was stopped (SIGSTOP, a host swapping) until the scheduler dropped it
    (``worker-ttl``: 5 minutes), and could not say which worker kept it waiting (review R1 s27
    #1). Now a worker that has not answered ``what`` after ``WORKER_ANSWER_S`` is named in a
    warning, again after twice as long and so on, and the build keeps waiting: a worker of a
    shared cluster busy with another client's task (which holds its GIL: it cannot answer until
    the task ends) answers then, and refusing it failed builds that used to succeed (review RF2
    s27 #2); Ctrl-C stops the wait, nothing written."""
    first_s = _seconds_setting(WORKER_ANSWER_ENV, WORKER_ANSWER_S)
    addresses = sorted(client.scheduler_info().get("workers", {}))
    where = _cluster_name(scheduler)

    async def one(address: str) -> Any:
        task = asyncio.ensure_future(client._run(function, workers=[address], on_error="return"))
        waited, interval = 0.0, first_s
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                break
            waited += interval
            log.warning("worker %s of %s has not answered %s for %.0f s (busy with another client's task, "
                        "stopped or swapping?); still waiting for it (Ctrl-C stops the build; nothing is "
                        "written yet)", address, where, what, waited)  # fmt: skip
            interval = min(interval * 2, NO_WORKER_WARN_MAX_S)
        if waited:
            log.warning("worker %s of %s answered %s after %.0f s", address, where, what, waited)
        try:
            answers = task.result()
        except OSError as exc:  # the scheduler could not pass it on
            return exc
        return answers.get(address, ConnectionError("no answer from the worker"))

    async def ask() -> list[Any]:
        return await asyncio.gather(*(one(a) for a in addresses))

    return dict(zip(addresses, client.sync(ask), strict=True))


def _cluster_name(scheduler: str | None) -> str:
    return f"the Dask scheduler at {scheduler}" if scheduler else "the embedded Dask cluster"


def _went_away(answer: Any) -> bool:
    """An answer that says the worker is gone (its connection closed or refused: killed, restarted
    by its nanny, its host gone), not that it runs other code. CommClosedError and tornado's
    StreamClosedError are OSErrors."""
    return isinstance(answer, OSError)


def _check_worker_versions(client: Any, scheduler: str | None = None) -> None:
    """Refuse workers that do not run the driver's featurecache (StoreError, exit 3), before
    anything is written: their entries would be stored under the driver's keys with another
    featurizer's arrays. Code counts, not only versions: a worker whose featurecache source
    differs (:func:`featurecache.source_digest`) is refused too, naming both package directories.
    A worker that cannot answer (no featurecache, an older one without :func:`worker_versions`) is
    refused too; one slow to answer is waited for, with warnings naming it (:func:`_ask_workers`).

    A worker that went away meanwhile (:func:`_went_away`; review R1 s27 #2: it was refused with the
    install advice) is left out when another answered with the driver's code: a worker that joins
    later (its nanny's new process) is checked by each task it runs (``versions=``); when none
    answered, the build is refused with that reason and no install advice."""
    mine = worker_versions()
    answers = _ask_workers(client, worker_versions, "the featurecache version check", scheduler)
    bad: list[str] = []
    gone: list[str] = []
    good = 0
    for address, answer in sorted(answers.items()):
        if _went_away(answer):
            gone.append(f"{address} ({type(answer).__name__}: {answer})"[:300])
        elif isinstance(answer, BaseException):
            bad.append(f"worker {address} cannot report its featurecache ({type(answer).__name__}: {answer})")
        elif not isinstance(answer, dict):
            bad.append(f"worker {address} runs {answer!r}")
        elif version_differences(answer, mine):
            bad.append(describe_difference(answer, mine, f"worker {address}"))
        else:
            good += 1
    if bad:
        shown = {k: v for k, v in mine.items() if k != PACKAGE_PATH}
        raise StoreError(f"refusing to build: {'; '.join(bad)}; the driver runs {_describe(shown)} "
                         "(install the same featurecache on every worker)")  # fmt: skip
    if not gone:
        return
    which = f"worker{'s' if len(gone) > 1 else ''} {'; '.join(gone)}"
    if not good:
        raise StoreError(f"{which} of {_cluster_name(scheduler)} went away during the featurecache version "
                         "check, and no worker answered it; nothing was written; run the build again (once "
                         "the workers are back)")  # fmt: skip
    log.warning("%s went away during the featurecache version check; the build goes on with the %d that "
                "answered (a worker that joins later is checked by each task it runs)", which, good)  # fmt: skip


@contextlib.contextmanager
def _store_token(out: Path) -> Iterator[str]:
    """A random token written to its :func:`~featurecache.build.tasks.store_token_file` in the
    store ``out`` (whose BuildLock this build holds: a token file of a killed build is deleted),
    deleted when the block ends; a write the OS refuses is a StoreError (exit 3)."""
    import secrets

    for stale in out.glob(STORE_TOKEN_PREFIX + "*"):
        with contextlib.suppress(OSError):
            stale.unlink()
    token = secrets.token_hex(16)
    path = store_token_file(out, token)
    try:
        path.write_text(token)
    except OSError as exc:
        raise StoreError(f"cannot write the store at {out}: {exc.strerror or exc}") from exc
    try:
        yield token
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def _check_worker_paths(
    client: Any, scheduler: str | None, out: Path, token: str, inputs: dict[str, Path | None]
) -> None:
    """Refuse (StoreError, exit 3; nothing written) when a worker does not read ``token`` back
    from the store ``out`` (:func:`~featurecache.build.tasks.worker_sees`: another filesystem at
    that path, node-local disk, a mount the workers lack) or cannot read one of ``inputs``
    (option -> path, None: not given), naming each such worker and why. Its parts would be written
    where the driver cannot see them, reported built, and later read as damaged (review R27c s45
    #1). A worker that went away meanwhile is left out, as by :func:`_check_worker_versions`."""
    paths = {option: str(path) for option, path in inputs.items() if path is not None}
    answers = _ask_workers(client, functools.partial(worker_sees, str(out), token, paths),
                           "the check that it sees the store and the inputs", scheduler)  # fmt: skip
    bad: list[str] = []
    inputs_unseen = False
    for address, answer in sorted(answers.items()):
        if _went_away(answer):
            continue
        if isinstance(answer, BaseException):
            bad.append(f"worker {address} cannot run it ({type(answer).__name__}: {answer})"[:300])
        elif answer:
            bad.append(f"worker {address} " + ", and ".join(answer))
            inputs_unseen = inputs_unseen or any(not a.startswith("does not see the store") for a in answer)
    if bad:
        rule = SHARED_PATH_RULE + (", and every input readable by every worker at the same path" if inputs_unseen
                                   else "")  # fmt: skip
        raise StoreError(f"refusing to build: {'; '.join(bad)}: {rule}; nothing was written")


def _forget_parsed_ccd(client: Any, scheduler: str | None = None) -> None:
    """Parsed CCD definitions are cached per path in each process; a CCD edited in place since
    the last build this driver or a long-lived worker served must be read again (the entries whose
    definitions changed are rebuilt, ``build.ccd_keys``: they must not get the old definitions).
    A worker slow to answer is waited for, with warnings naming it (:func:`_ask_workers`); one that
    went away keeps no cache (its replacement starts empty)."""
    from featurecache.chem.library import clear_component_caches

    clear_component_caches()
    answers = _ask_workers(client, clear_component_caches, "the call that clears its cached CCD definitions",
                           scheduler)  # fmt: skip
    for answer in answers.values():
        if isinstance(answer, BaseException) and not _went_away(answer):
            raise answer


def _pending(
    inputs: list[InputFile],
    done: set[str],
    entries: Any,
    failures: Any,
    withdrawn_paths: Set[str] = frozenset(),
    ccd_changed: Set[str] = frozenset(),
) -> list[InputFile]:
    """The inputs to build: those whose key is not the latest outcome the store holds for them.
    A failure's key and an entry's keyed before session 44 hold the CCD's fingerprint
    (:attr:`InputFile.ccd_key`); an entry keyed since, none: it is up to date unless a definition
    it used changed (``ccd_changed``: entry ids, ``build.ccd_keys.changed_definitions``).

    An input is up to date when its key is that of its path's listed failure (the index lists a
    failure only when it is newer than every entry built from that path), else that of the live
    entry of its id, else (neither: e.g. a part without an index row) when some part holds the key.
    So an input put back to an earlier version (whose key an older, superseded part still holds)
    is built again: skipping it by that older part left the store serving the newer version. Nor
    does that fallback count for a path whose listed failure was withdrawn (``withdrawn_paths``):
    a failing file put back at an earlier failing version, or moved within --pdb-dir, is built and
    listed again instead of hidden by a superseded part. An input that took the id of a stored
    entry of another path (moved, :func:`~featurecache.build.discover.assign_ids`) is built: its
    entry records the new path."""
    live = dict(zip(entries.column("id").to_pylist(), entries.column("key").to_pylist(), strict=True))
    # a file moved within --pdb-dir takes its stored entry's id (discover.assign_ids): the entry is
    # written again, recording its new path, though its key (bytes, id, config) is the same
    path_of = existing_entry_ids(entries) if entries.num_rows else {}
    failed: dict[str, str] = {}
    if failures.num_rows:
        # an MSA file's failure is not its structure outcome (the same path when --msa-dir is --pdb-dir)
        rows = failures.select(["path", "key", "stage"]).to_pylist()
        failed = {r["path"]: r["key"] for r in rows if r["stage"] != "msa"}

    def current(i: InputFile) -> bool:
        if i.rel in failed:
            return failed[i.rel] == (i.ccd_key or i.key)
        if i.entry_id in live:
            if path_of.get(i.entry_id, i.rel) != i.rel:
                return False  # moved: written again with its new path
            if live[i.entry_id] == i.key:
                return i.entry_id not in ccd_changed
            return bool(i.ccd_key) and live[i.entry_id] == i.ccd_key
        return i.rel not in withdrawn_paths and (i.key in done or (bool(i.ccd_key) and i.ccd_key in done))

    return [i for i in inputs if not current(i)]


def _count_replaced(pending: list[InputFile], stored: Any, failed: set[str]) -> tuple[int, int, int]:
    """(replaced, rebuilt, kept): pending inputs whose entry id the store holds for the same path,
    built with other bytes (replaced) or the same bytes (rebuilt: the CCD, the featurizer or the
    config changed), or failed (``failed``: their paths; the entry the store holds stays as it
    was). An input that took the id of an entry of another path is :func:`_moved`'s."""
    if not stored.num_rows:
        return 0, 0, 0
    sha_of = dict(
        zip(stored.column("id").to_pylist(), stored.column("source_sha256").to_pylist(), strict=True)
    )
    path_of = existing_entry_ids(stored)
    again = [i for i in pending if i.entry_id in sha_of and path_of[i.entry_id] == i.rel]
    kept = sum(1 for i in again if i.rel in failed)
    built = [i for i in again if i.rel not in failed]
    rebuilt = sum(1 for i in built if i.sha256 == sha_of[i.entry_id])
    return len(built) - rebuilt, rebuilt, kept


def _moved(pending: list[InputFile], stored: Any, failed: set[str]) -> list[str]:
    """The entries this build wrote from a file of another path than the stored entry of its id (a
    file moved within --pdb-dir, or recompressed: it took the id, :func:`~featurecache.build.
    discover.assign_ids`), each as ``"id (old path → new path)"``; a failed one is not (its stored
    entry stays)."""
    if not stored.num_rows:
        return []
    path_of = existing_entry_ids(stored)
    return [
        f"{i.entry_id} ({path_of[i.entry_id]} → {i.rel})" for i in pending
        if i.entry_id in path_of and path_of[i.entry_id] != i.rel and i.rel not in failed
    ]  # fmt: skip


def moved_line(summary: BuildSummary) -> str:
    """The build's line about the entries it wrote again from a moved file (:func:`_moved`)."""
    n = len(summary.moved)
    return (f"moved: {n} entr{'y' if n == 1 else 'ies'} (same id, new path: the file was moved within --pdb-dir "
            f"or recompressed; the stored entry is replaced): {first_named(summary.moved, SHOWN_GONE)}")  # fmt: skip


def _failed_earlier(failures: Any, inputs: list[InputFile], summary: BuildSummary) -> int:
    """Inputs of this run that were skipped because an earlier run recorded them as failed (same
    bytes, same config): they still fail, and the exit status says so."""
    if not failures.num_rows:
        return 0
    this_run = {f["path"] for f in summary.failures}
    current = {(i.rel, k) for i in inputs for k in (i.key, i.ccd_key) if k}
    rows = failures.select(["path", "key"]).to_pylist()
    return sum(1 for r in rows if (r["path"], r["key"]) in current and r["path"] not in this_run)


def _quiet_workers_now(client: Any, timeout_s: float = 5.0) -> None:
    """Have the embedded cluster's workers silence their Dask loggers, and wait (``timeout_s`` at
    most) until they have: called once the build's work is done, before the cluster is closed."""
    from featurecache.signals import quiet_loggers

    async def broadcast() -> None:
        await asyncio.wait_for(client._run(quiet_loggers, on_error="ignore"), timeout_s)

    with contextlib.suppress(Exception):
        client.sync(broadcast)


def _shutdown(client: Any, cluster: Any, stopped: BaseException | None = None) -> None:
    """Close the client and the embedded cluster; a slow shutdown (loaded machine) is not an error.
    The build's work is done by now (its errors were shown): Dask's loggers are silenced first,
    here and in the embedded cluster's workers. Closing the cluster stops the workers and then
    the scheduler, and a worker whose heartbeat was under way when the scheduler dropped it logged
    "Failed to communicate with scheduler during heartbeat" with a CommClosedError traceback
    (about 1 build in 5). The driver's loggers are silenced before the workers are asked: with a
    worker already gone, the scheduler in this process logs the failed broadcast to it
    ("broadcast to tcp://... failed: CommClosedError"). The levels are put back once it is closed.
    A Ctrl-C (or SIGTERM) meanwhile waits for its end (:func:`~featurecache.signals.interrupts_deferred`;
    each close is bounded by its timeout): a second Ctrl-C cut the cluster's close short, leaving
    its IO-loop thread and sockets behind (review R35b s49 #7). After an interrupt it is dropped;
    after a finished build it is raised then. ``stopped``: the exception that stopped the build
    (None: it finished), passed by the caller: the ambient ``sys.exc_info()`` is the program's own
    when run_build is called inside an ``except`` block, and a Ctrl-C during a finished build's
    shutdown was dropped for it (review R36c s49 #1)."""
    from featurecache.signals import interrupts_deferred, quiet_loggers, restore_loggers

    interrupted = isinstance(stopped, KeyboardInterrupt)  # the workers were asked then
    with interrupts_deferred(drop=stopped is not None):
        previous = quiet_loggers()
        try:
            if client is not None and cluster is not None and not interrupted:
                _quiet_workers_now(client)
            _close(client, cluster)
        finally:
            restore_loggers(previous)


def _close(client: Any, cluster: Any) -> None:
    for closer in (
        client.close if client is not None else None,
        cluster.close if cluster is not None else None,
    ):
        if closer is None:
            continue
        try:
            closer(timeout=30)
        except (TimeoutError, OSError, RuntimeError) as exc:
            log.warning("Dask shutdown did not finish cleanly (%s: %s); the build itself is complete",
                        type(exc).__name__, exc)  # fmt: skip


def _run_structure_parts(
    client: Any, out: Path, pdb_dir: Path, pending: list[InputFile], part_size: int, entry_config: str,
    ccd: Path | None, config: BuildConfig, summary: BuildSummary, progress: bool, finished: bool = True,
    ccd_config: str = "", token: str = "",
) -> None:  # fmt: skip
    """Build ``pending`` in parts; the index is refreshed now and then (``finished``: as
    :func:`rebuild_index` takes it); ``ccd_config``: the config hash of failures' keys
    (``build.ccd_keys``); ``token``: the build's store token, which each task reads back before
    it writes (:func:`_store_token`)."""
    from distributed import as_completed

    plan = plan_parts(out, pending, part_size)
    if not plan:
        return
    ccd_s = str(Path(ccd).resolve()) if ccd else None
    root = str(out.resolve())
    source_dir = str(resolved(pdb_dir))  # each part records it (discover.withdraw_failures reads it)
    inputs_of: dict[str, list[InputFile]] = {}
    part_of: dict[str, str] = {}  # future key -> part name
    # each task checks its worker against them (late joiners) before it writes
    guard = part_guard(worker_versions(), str(out), token)

    def submit(name: str, part_inputs: list[InputFile]) -> Any:
        inputs_of[name] = part_inputs
        # through run_part: its worker is checked before the part's own signature matters
        fut = client.submit(run_part, guard, STRUCTURE_TASK, root, name, part_inputs, entry_config, ccd_s,
                            config.interface_cutoff, source_dir=source_dir,
                            keep_crystallization_aids=config.keep_crystallization_aids, ccd_config_hash=ccd_config,
                            key=f"structure-part-{name}-{time.time_ns()}", pure=False)  # fmt: skip
        part_of[fut.key] = name
        return fut

    next_number = next_part_number(out, STRUCTURE_PART_PREFIX) + len(plan)
    last_index, refresh_s = time.monotonic(), INDEX_REFRESH_S
    # now: when a worker dies, its nanny's restart may leave the scheduler without a worker to ask
    memory = worker_memory_limit(client)
    since_index = 0  # entries and failures of the parts written since the last refresh
    with stage_bar("structures", len(pending), progress) as advance:
        # no list of the futures is kept: as_completed drops each one as it yields it, and the loop
        # drops it once its result is read, so Dask forgets a finished part (the part on disk is
        # the result); a future held to the stage's end was recomputed when its worker died,
        # writing the part a second time
        queue = as_completed([submit(name, part_inputs) for name, part_inputs in plan], loop=client.loop)
        for fut in queue:
            name = part_of[fut.key]
            res, exc = part_outcome(client, fut, name)
            if exc is not None:
                part_inputs = inputs_of[name]
                if len(part_inputs) > 1:
                    # isolate the input that kills workers: one single-input part per input
                    log.warning("part %s failed (%s: %s); retrying its %d inputs one by one",
                                name, type(exc).__name__, exc, len(part_inputs))  # fmt: skip
                    for inp in part_inputs:
                        queue.add(submit(part_name(STRUCTURE_PART_PREFIX, next_number), [inp]))
                        next_number += 1
                    fut.release()
                    continue
                res = _record_crashed_input(out, name, part_inputs[0], exc, source_dir,
                                            memory=worker_memory_limit(client) or memory)  # fmt: skip
            fut.release()
            _accumulate(summary, res)
            advance(res.n_entries + res.n_failed)
            since_index += res.n_entries + res.n_failed
            few = finished and since_index < INDEX_REFRESH_MIN_ENTRIES
            if time.monotonic() - last_index > refresh_s and not few:
                t0 = time.monotonic()
                rebuild_index(out, finished=finished)
                since_index = 0
                last_index = time.monotonic()
                refresh_s = max(INDEX_REFRESH_S, (last_index - t0) / INDEX_REFRESH_SHARE)


#: the structure stage's part task, as :func:`~featurecache.build.tasks.run_part` names it
STRUCTURE_TASK = "featurecache.build.tasks:build_structure_part"


def part_outcome(client: Any, fut: Any, name: str) -> tuple[Any, Exception | None]:
    """What the part task ``fut`` (named ``name`` in messages) came to, for every stage's loop:
    ``(result, None)``, or ``(None, exc)`` for a task that failed on its own (its worker died on
    it, or it raised), which the stage splits or records as its inputs' failure. What ends the
    build is raised instead: a cancellation (Ctrl-C), a StoreError (the store refused the part's
    write, :func:`~featurecache.build.tasks.raise_store_failure`, or the task's worker check), a
    worker that runs other code (:func:`other_code_error`: review R27c s45 #6), and a lost
    scheduler (``_cluster_errors`` gives its one line)."""
    from distributed.client import FutureCancelledError

    try:
        res = fut.result()
        raise_store_failure(res)
        return res, None
    except (FutureCancelledError, StoreError):
        raise
    except (TypeError, AttributeError, ImportError) as exc:
        raise other_code_error(client, name, exc) from exc
    except Exception as exc:
        if getattr(client, "status", "running") != "running":
            raise
        return None, exc


def other_code_error(client: Any, name: str, exc: BaseException) -> StoreError:
    """The StoreError (exit 3) that ends a build whose part task ``name`` failed with ``exc``, a
    TypeError, AttributeError or ImportError: what a worker of another featurecache raises when it
    cannot call the task. Every worker is asked for its versions again (:func:`_versions_now`: one
    that does not answer within seconds is left out) and each that differs from the driver is
    named, as the start check names it. The MSA and chem stages' part loops are meant to raise it
    the same way (their part tasks submitted through ``tasks.run_part``)."""
    mine = worker_versions()
    try:
        answers = _versions_now(client)
    except Exception:  # the scheduler gone too
        answers = {}
    bad = []
    for address, answer in sorted(answers.items()):
        if isinstance(answer, (TimeoutError, OSError)):  # gone, or not answering: not told
            continue
        if not isinstance(answer, dict):
            bad.append(
                f"worker {address} cannot report its featurecache ({type(answer).__name__}: {answer})"[:300]
            )
        elif version_differences(answer, mine):
            bad.append(describe_difference(answer, mine, f"worker {address}"))
    shown = {k: v for k, v in mine.items() if k != PACKAGE_PATH}
    who = (
        "; ".join(bad) or "a worker ran other code (no worker differs from the driver now: it has left since)"
    )
    return StoreError(
        f"refusing to go on: {who}; the driver runs {_describe(shown)} (install the same featurecache on every "
        f"worker; it joined the cluster after the build's start check: part {name} failed with "
        f"{type(exc).__name__}: {exc}"[:1500]
        + "); every finished part is kept; run the same command again"
    )


def _versions_now(client: Any, timeout_s: float = 10.0) -> dict[str, Any]:
    """Every worker's :func:`~featurecache.build.tasks.worker_versions`, each asked apart and
    given ``timeout_s`` (a stopped or busy worker answers its TimeoutError, one gone its OSError):
    ``{address: its answer}``."""
    addresses = sorted(client.scheduler_info().get("workers", {}))

    async def one(address: str) -> Any:
        try:
            ran = client._run(worker_versions, workers=[address], on_error="return")
            answers = await asyncio.wait_for(ran, timeout_s)
        except (TimeoutError, OSError) as exc:
            return exc
        return answers.get(address, ConnectionError("no answer from the worker"))

    async def ask() -> list[Any]:
        return await asyncio.gather(*(one(a) for a in addresses))

    return dict(zip(addresses, client.sync(ask), strict=True))


def _record_crashed_input(
    out: Path, name: str, inp: InputFile, exc: BaseException, source_dir: str = "", memory: str = ""
) -> PartResult:
    """An input whose featurization kills the worker process becomes a failure-only part.

    The failure is listed (and counts in this run's exit status) but stored with an empty key, not
    the input's: a worker crash (out of memory, a killed process) is not a verdict on the input, so
    the next run retries it (:func:`_pending` treats an input as up to date only when its key
    equals its path's listed failure's key). Its message gives the file's size and ``memory``
    (:func:`worker_memory_limit`), before the exception's long text: what the input needs is
    roughly proportional to its size, and the user weighs it against the limit."""
    detail = died_detail(size_text(inp.size), memory)
    failure = {
        "path": inp.rel, "entry_id": inp.entry_id, "stage": "worker", "error_class": type(exc).__name__,
        "message": f"the worker process died while featurizing this file ({detail}): {exc}"[:2000], "key": "",
    }  # fmt: skip
    write_structure_part(out, name, PartContents(failures=[failure], source_dir=source_dir))
    return PartResult(name, n_failed=1, failures=[failure])


def size_text(n_bytes: int) -> str:
    """``n_bytes`` as MiB (GiB from 10 GiB), as memory limits are given: "83.6 MiB", "23.1 GiB"."""
    if n_bytes >= 10 * 2**30:
        return f"{n_bytes / 2**30:,.1f} GiB"
    return f"{n_bytes / 2**20:,.1f} MiB"


def worker_memory_limit(client: Any) -> str:
    """The memory limit the scheduler's workers run under, for the failure of an input whose worker
    died: "the workers' memory limit is 600.0 MiB" (a range when they differ), "the workers have no
    memory limit" (Dask's ``memory_limit`` 0: only the host's or the container's memory bounds
    them), "" when the scheduler lists no worker (as while the dead one's nanny restarts it: a
    stage asks at its start too) or does not answer. An embedded cluster's is
    Dask's ``"auto"``: the machine's memory (or the cgroup's limit) over the workers."""
    try:
        workers = client.scheduler_info(n_workers=-1).get("workers", {})
    except Exception:  # the scheduler gone: the failure is still recorded, without it
        return ""
    limits = sorted({int(w.get("memory_limit") or 0) for w in workers.values()})
    if not limits:
        return ""
    if limits == [0]:
        return "the workers have no memory limit (the host's or the container's memory bounds them)"
    limits = [n for n in limits if n] or limits
    if len(limits) == 1:
        return f"the workers' memory limit is {size_text(limits[0])}"
    return f"the workers' memory limits are {size_text(limits[0])} to {size_text(limits[-1])}"


def died_detail(size: str, memory: str) -> str:
    """The parenthesis of a failure whose worker died: the input's ``size`` (a phrase), the
    workers' ``memory`` (:func:`worker_memory_limit`, may be ""), and where to look."""
    limit = f"{memory}; " if memory else ""
    return f"{size}; {limit}often the memory limit kills it: see the worker's log"


def _accumulate(summary: BuildSummary, res: PartResult) -> None:
    summary.n_built += res.n_entries
    summary.n_failed += res.n_failed
    summary.n_atoms += res.n_atoms
    summary.n_tokens += res.n_tokens
    summary.bytes_written += res.bytes_written
    for k, v in res.seconds.items():
        summary.stage_seconds[k] = summary.stage_seconds.get(k, 0.0) + v
    stages = Counter(f["stage"] for f in res.failures)
    for k, v in stages.items():
        summary.failed_by_stage[k] = summary.failed_by_stage.get(k, 0) + v
    summary.failures.extend(res.failures)
    summary.n_undefined_entries += res.n_undefined_entries
    for code, n in res.undefined_residues.items():
        summary.undefined_residues[code] = summary.undefined_residues.get(code, 0) + n
    summary.changed_inputs.extend(res.changed)
    summary.digest_changed.extend(res.digest_changed)


def changed_inputs_line(summary: BuildSummary) -> str | None:
    """The build's warning about structure files whose bytes changed between the listing of
    --pdb-dir and their read (a copy or download still being written reads as a shorter file that
    may still parse): they are stored as read; None when there are none."""
    if not summary.changed_inputs:
        return None
    files = sorted(summary.changed_inputs)
    shown = first_named(files, 8, "; ")
    return (f"{len(files)} structure files changed during the build and were stored as read: {shown}; "
            "if any was still being written, run the build again when it is complete (it reads a "
            "changed file again)")  # fmt: skip


def undefined_residues_line(summary: BuildSummary, ccd: Path | None) -> str | None:
    """The build's one warning about per-atom residues tokenized from the file's atoms for want
    of a component definition (no ``--ccd``, or codes the given CCD lacks); None when there are none."""
    if not summary.undefined_residues:
        return None
    n = sum(summary.undefined_residues.values())
    what = f"{n} ligand / modified residues ({summary.n_undefined_entries} entries)"
    rules = "unresolved atoms and AF3's leaving-atom rules not applied"
    if ccd is None:
        return f"no ccd (--ccd): {what} keep only the file's atoms: {rules}; pass ccd (--ccd)"
    codes = sorted(summary.undefined_residues, key=lambda c: (-summary.undefined_residues[c], c))
    shown = first_named(codes, 8)
    return f"{what} have no definition in {ccd} ({shown}) and keep only the file's atoms: {rules}"


def no_msa_dir_line(summary: BuildSummary, msa_dir: Path | None) -> str | None:
    """The build's one warning, without ``msa_dir (--msa-dir)``, about the store's polymer chains
    that get the single-sequence MSA (as ``no ccd (--ccd):`` is for residues without a definition),
    and those that keep the MSA an earlier build stored from files as it is, its files not read
    again (an MSA of an older featurizer or MSA stage stays so: review R41d s51 #1), naming the
    ``--msa-dir`` they were built from (``summary.kept_msa_dirs``); None with ``--msa-dir`` or
    when the store has no polymer chain."""
    n, e = summary.n_single_sequence_chains, summary.n_single_sequence_entries
    kept = summary.n_msa_chains
    if msa_dir is not None or not (n or kept):
        return None
    said = []
    if n:
        said.append(f"{n} polymer chain{'s' if n != 1 else ''} ({e} entr{'y' if e == 1 else 'ies'}) "
                    f"get{'s' if n == 1 else ''} the single-sequence MSA (the query row only)")  # fmt: skip
    if not kept:
        return f"no msa_dir (--msa-dir): {said[0]}; pass msa_dir (--msa-dir)"
    dirs = summary.kept_msa_dirs
    named = " or ".join(shlex.quote(d) for d in dirs)
    said.append(f"{kept} {'other' if n else 'polymer chain'}{'s' if kept != 1 else ''} keep{'s' if kept == 1 else ''} "
                f"the MSA an earlier build stored from files{f' of --msa-dir {named}' if dirs else ''} as it is, "
                "not read again (a change to the files, or to how this featurecache reads them, is not applied)")  # fmt: skip
    give = f"--msa-dir {shlex.quote(dirs[0])}" if len(dirs) == 1 else "--msa-dir"
    return f"no msa_dir (--msa-dir): {'; '.join(said)}; pass msa_dir ({give}) to read the files again"


def _msa_dirs_of(out: Path, msas: Any) -> list[str]:
    """The ``--msa-dir`` each MSA part of the index's MSAs from files (``msas``: index/msas.arrow)
    recorded (:func:`~featurecache.build.discover.part_source_dir`), sorted; a part that recorded
    none is left out."""
    if msas is None or not msas.num_rows or not {"part", "n_files"} <= set(msas.column_names):
        return []
    parts = {p for p, nf in zip(msas.column("part").to_pylist(), msas.column("n_files").to_pylist(), strict=True)
             if nf and p}  # fmt: skip
    return sorted({part_source_dir(out, p) for p in parts} - {""})


def _entries_gone(inputs: list[InputFile], stored: Any, homes: DirectoryParts, pdb_dir: Path) -> list[str]:
    """Ids of stored entries whose structure file is gone: no input of this build has the entry's
    id or its source path, and its part is of this ``--pdb-dir`` (``homes``: it records it, or a
    directory renamed or moved to it, :func:`~featurecache.build.discover.directory_parts`; paths
    are relative to it, so an entry of a store extended from another directory, or of a part that
    recorded none, is not counted). They stay in the store (docs/build.md). Not gone: an entry
    whose file lies under a directory of ``pdb_dir`` this build could not list (``inputs``'
    directory failure rows, path ``sub/``), or whose file cannot be checked
    (:func:`~featurecache.build.discover.present` is None): not known to be gone (review R38a s50
    leftovers #1: they were reported as sources gone though kept as such)."""
    if not stored.num_rows or not {"source_path", "part"} <= set(stored.column_names):
        return []
    paths = {i.rel for i in inputs}
    ids = {i.entry_id for i in inputs}
    unlisted = [rel for rel in paths if rel.endswith("/")]
    gone = []
    for e in stored.select(["id", "source_path", "part"]).to_pylist():
        if e["id"] in ids or e["source_path"] in paths:
            continue
        if not homes(e["part"]):
            continue
        src = e["source_path"] or ""
        if under_unlisted(src, unlisted) or (src and present(Path(pdb_dir) / native(src)) is None):
            continue
        gone.append(e["id"])
    return sorted(gone)


def _note_moved(homes: DirectoryParts, pdb_dir: Path) -> None:
    """One line per directory the store's parts record that no longer exists and whose entries this
    build's inputs match: taken as ``pdb_dir`` renamed or moved (its removed files are reported as
    sources gone, and ``prune --sources-gone`` of ``pdb_dir`` removes them)."""
    for old in sorted(homes.moved):
        log.info("the store's entries built from %s, which no longer exists, are taken as --pdb-dir %s's "
                 "(renamed or moved: this build's files match them)", old, pdb_dir)  # fmt: skip


#: how many twin groups :func:`_warn_twins` names in its line
TWINS_NAMED = 5
#: how many files of a twin group :func:`_warn_twins` names (then the group's count)
TWIN_FILES_NAMED = 3


#: a PDB-format file of the wwPDB archive (``pdb/a8/pdb1a8o.ent.gz``): group 1 is its PDB id
_WWPDB_PDB_NAME = re.compile(r"^pdb([0-9][a-z0-9]{3})\.ent(?:\.gz)?$", re.IGNORECASE)
#: a file stem that is a PDB id (``1a8o``, ``1A8O``)
_PDB_ID_STEM = re.compile(r"^[0-9][a-z0-9]{3}$", re.IGNORECASE)


def _warn_twins(inputs: list[InputFile]) -> None:
    """One line each when inputs give one structure twice: files of one name in one folder, in several
    formats or compressions (``1A8O.cif`` and ``1A8O.pdb``, ``x.cif`` and ``x.cif.gz``), files with
    the same bytes, or a wwPDB archive's two formats of one PDB id, in any folders
    (``mmCIF/a8/1a8o.cif.gz`` and ``pdb/a8/pdb1a8o.ent.gz``: a mirror's root given as ``--pdb-dir``,
    review R40d s51 #4; the ids stay the stems, ``1a8o`` and ``pdb1a8o``). Every file is its own
    entry, so such a structure is sampled as two (review R26b s44 #8)."""
    from featurecache.parse.structure import entry_stem

    by_stem: dict[str, list[str]] = {}
    by_bytes: dict[str, list[str]] = {}
    by_pdb_id: dict[str, list[str]] = {}  # PDB id -> files, when one of them is a wwPDB pdb<id>.ent
    wwpdb: set[str] = set()
    for i in inputs:
        if i.name_error or not i.fmt:
            continue
        folder, _, name = i.rel.rpartition("/")  # one folder's: ranked_0.pdb of two folders are two models
        stem = entry_stem(name)
        by_stem.setdefault(f"{folder}/{stem}", []).append(i.rel)
        if i.sha256:
            by_bytes.setdefault(i.sha256, []).append(i.rel)
        if m := _WWPDB_PDB_NAME.match(name):
            wwpdb.add(m[1].lower())
            by_pdb_id.setdefault(m[1].lower(), []).append(i.rel)
        elif _PDB_ID_STEM.match(stem):
            by_pdb_id.setdefault(stem.lower(), []).append(i.rel)
    # a PDB id given as pdb<id>.ent and as a file of another name (pdb1a8o.ent and pdb1a8o.ent.gz of one
    # folder are the first group's)
    by_id = {k: rels for k, rels in by_pdb_id.items()
             if k in wwpdb and any(not _WWPDB_PDB_NAME.match(r.rpartition("/")[2]) for r in rels)}  # fmt: skip
    for what, groups in (("one name in several formats or compressions", by_stem),
                         ("the same bytes", by_bytes),
                         ("one PDB id in the wwPDB archive's two formats, <id>.cif and pdb<id>.ent", by_id)):  # fmt: skip
        twins = [sorted(rels) for rels in groups.values() if len(rels) > 1]
        if not twins:
            continue
        twins.sort()
        named = "; ".join(_twin_group(rels) for rels in twins[:TWINS_NAMED])
        more = f"; and {len(twins) - TWINS_NAMED} more" if len(twins) > TWINS_NAMED else ""
        log.warning("%d structure(s) given by several files of %s (%s%s): each file is its own entry, so each "
                    "such structure is sampled as that many; keep one file per structure",
                    len(twins), what, named, more)  # fmt: skip


def _twin_group(rels: list[str]) -> str:
    """One twin group for :func:`_warn_twins`: its first :data:`TWIN_FILES_NAMED` files, then how
    many it has (a mirrored directory's 2,000 copies made one line of 43,661 characters: review
    R27b s45 #5)."""
    if len(rels) <= TWIN_FILES_NAMED:
        return ", ".join(rels)
    return f"{', '.join(rels[:TWIN_FILES_NAMED])}, … ({len(rels)} files)"


def _parts_may_be_gone(out: Path) -> bool:
    """Whether a part the index's last rebuild took in is gone (deleted by hand), or that cannot be
    told (no readable manifest of its parts): only then are the published index tables read for
    what they list of such parts (:func:`_rescan_for_gone_components`, :func:`_listed_of_gone_parts`)."""
    from featurecache.store.index import complete_parts, recorded_part_names

    recorded = recorded_part_names(out)
    return not recorded or bool(recorded - {p.name for p in complete_parts(out)})


def _rescan_for_gone_components(out: Path) -> None:
    """When the published index lists components of a component part that is gone (deleted by
    hand), write a rescan part (:func:`~featurecache.store.components.write_rescan_part`, as
    ``verify --repair`` does for such a part), so that this build's chem stage scans every
    structure part again and computes the components that are missing; a warning per part names
    them. Written before the index is rebuilt from the parts (which drops their rows): a build
    stopped before its chem stage leaves the rescan to the next one."""
    from featurecache.store.components import components_of_missing_parts, write_rescan_part

    gone = components_of_missing_parts(out)
    if not gone:
        return
    name = write_rescan_part(out)
    for part, keys in gone.items():
        log.warning("component part %s is missing (deleted): its %d component%s (%s) %s computed again by this "
                    "build's chem stage, which scans every structure part again (rescan part %s)", part,
                    len(keys), "" if len(keys) == 1 else "s", ", ".join(keys), "is" if len(keys) == 1 else "are",
                    name)  # fmt: skip


def _listed_of_gone_parts(out: Path) -> list[dict[str, str]]:
    """The entries (id, key, source_path, part) that the published index (``index/entries.arrow``)
    lists in parts that are gone: deleted by hand, as a rebuild of the index from the parts finds.
    Empty when there is no index, or it does not read (the rebuild repairs it; nothing is known)."""
    from featurecache.store.index import complete_parts, read_table

    f = out / "index" / "entries.arrow"
    if not f.is_file():
        return []
    try:
        table = read_table(f, memory_map=False)
    except FeatureCacheError:
        return []
    if not table.num_rows or not {"id", "key", "source_path", "part"} <= set(table.column_names):
        return []
    there = {p.name for p in complete_parts(out)}
    rows = table.select(["id", "key", "source_path", "part"]).to_pylist()
    return [r for r in rows if r["part"] not in there]


def _record_lost(
    out: Path, pdb_dir: Path, listed: list[dict[str, str]], inputs: list[InputFile], stored: Any
) -> dict[str, list[str]]:
    """Of ``listed`` (:func:`_listed_of_gone_parts`), the entries that this build does not rebuild
    (no input has the entry's id or its source path) and that no other part holds (``stored``, the
    index rebuilt from the parts): the rebuild of the index dropped them. Each becomes a
    :data:`REMOVED` row of a new structure part, as ``prune --sources-gone`` and ``verify --repair``
    record theirs (``info`` counts them; a build that finds the file again stores it again), and a
    warning per part names them. Returns their ids by part."""
    from featurecache.store.prune import _removal_parts, write_removals

    if not listed:
        return {}
    known = {i.entry_id for i in inputs} | (
        set(stored.column("id").to_pylist()) if stored.num_rows else set()
    )
    paths = {i.rel for i in inputs}
    lost = [r for r in listed if r["id"] not in known and r["source_path"] not in paths]
    if not lost:
        return {}
    rows = [{"kind": "entry", "id": r["id"], "key": r["key"], "source_path": r["source_path"],
             "message": f"its part {r['part']} is missing (deleted) and no file under --pdb-dir {pdb_dir} gives it "
                        f"(its file was {r['source_path']}), so a build could not store it again: taken out of the "
                        "index by featurecache build"} for r in lost]  # fmt: skip
    _extra, names = _removal_parts(out, rows, [])
    write_removals(out, names, rows, [], "", "")
    by_part: dict[str, list[str]] = {}
    for r in lost:
        by_part.setdefault(r["part"], []).append(r["id"])
    for part, entry_ids in sorted(by_part.items()):
        log.warning("part %s is missing (deleted): its entr%s %s %s in no file under --pdb-dir %s, so this build "
                    "cannot store %s again: taken out of the index, recorded as removed in part %s (`featurecache "
                    "info` counts the removed entries; a build that finds a file again stores its entry again)", part,
                    "y" if len(entry_ids) == 1 else "ies", ", ".join(sorted(entry_ids)),
                    "is" if len(entry_ids) == 1 else "are", pdb_dir, "it" if len(entry_ids) == 1 else "them",
                    names[0])  # fmt: skip
    return by_part


#: warnings the build summary names (every one is a row of index/warnings.arrow)
SHOWN_WARNINGS = 5


def _new_warnings(summary: BuildSummary, warnings: pa.Table | None, parts_before: Set[str]) -> None:
    """Count the rows of ``warnings`` (the rebuilt index's) that parts written after
    ``parts_before`` hold, by stage and entry, and keep a few for the summary: each stage's first,
    then each entry's first, then the next ones, in (entry, stage, message) order."""
    if warnings is None or not warnings.num_rows:
        return
    before = pa.array(sorted(parts_before), type=pa.string())
    new = warnings.filter(pc.invert(pc.is_in(warnings.column("part"), value_set=before)))
    if not new.num_rows:
        return
    new = new.take(pc.sort_indices(new, [("entry_id", "ascending"), ("stage", "ascending"),
                                         ("message", "ascending")]))  # fmt: skip
    stages, entries = new.column("stage").to_pylist(), new.column("entry_id").to_pylist()
    summary.warnings_by_stage = dict(sorted(Counter(stages).items()))
    summary.n_warning_entries = len({e for e in entries if e is not None})
    summary.n_warnings_without_entry = entries.count(None)
    picked: list[int] = []
    for key in (stages, entries, range(len(stages))):  # (the last: every row is its own key)
        named = {key[i] for i in picked}
        for i, k in enumerate(key):
            if len(picked) == SHOWN_WARNINGS:
                break
            if k not in named and i not in picked:
                picked.append(i)
                named.add(k)
    rows = new.take(pa.array(sorted(picked), type=pa.int64())).select(["entry_id", "stage", "message"])
    summary.warning_examples = rows.to_pylist()


#: entry ids named in the sources-gone warning, at most
SHOWN_GONE = 10


def sources_gone_line(summary: BuildSummary, detail: bool = False) -> str | None:
    """The build's one line about stored entries and MSAs whose source files are gone from
    ``--pdb-dir`` / ``--msa-dir``: kept (a build never deletes what it stored); ``featurecache prune
    --sources-gone`` removes them; None when there are none. ``detail``: the entry ids, and each
    MSA's chains, too (the log warning; the summary table has the counts)."""
    n_e, n_m = len(summary.entries_gone), summary.n_msas_gone
    if not n_e and not n_m:
        return None
    what = []
    if n_e:
        shown = first_named(summary.entries_gone, SHOWN_GONE)
        what.append(f"{n_e} stored entr{'y' if n_e == 1 else 'ies'}" + (f" ({shown})" if detail else ""))
    if n_m:
        named = ""
        if detail and summary.msas_gone:
            named = f" (used by {first_named(summary.msas_gone, SHOWN_GONE, '; ')})"
        what.append(f"{n_m} stored MSA{'s' if n_m != 1 else ''}{named}")
    where = " / ".join(d for d, n in (("--pdb-dir", n_e), ("--msa-dir", n_m)) if n)
    how = "STORE --sources-gone PDB_DIR" + (" --msa-dir MSA_DIR" if n_m else "")
    return (f"{' and '.join(what)} whose source files are gone from {where}: kept and still served; "
            f"to remove them: featurecache prune {how} (--dry-run lists them)")  # fmt: skip


def _run_extra_stages(
    client: Any, out: Path, msa_dir: Path | None, ccd: Path | None, config: BuildConfig,
    summary: BuildSummary, progress: bool, finished: bool = True,
) -> MSAStageResult:  # fmt: skip
    """Stages that run after the structure parts, over the whole store (MSAs, components); returns
    the MSA stage's result (what it listed counts toward the summary's input size); the
    MSA stage reads the index (``finished``: as :func:`rebuild_index` takes it): over every part,
    the structure parts of this build included, which the published index holds back until both
    stages have run (a reader never sees their entries without their MSAs and conformers)."""
    tables = rebuild_index(out, finished=finished)
    # MSA stage (issue #3) and component/conformer stage (issue #4) hook in here.
    from featurecache.build.msa_stage import run_msa_stage

    index = {name: sorted_index_table(name, t) for name, t in tables.items()}
    msa = run_msa_stage(client, out, msa_dir, config.msa_depth_cap, progress, index=index)
    summary.stages["msa"] = msa.summary()
    summary.stage_seconds["msa"] = msa.seconds
    summary.bytes_written += msa.bytes_written
    summary.failures.extend(msa.failures)
    summary.n_failed += msa.n_failed
    summary.n_msa_failed_earlier = msa.counts["failed_earlier"]
    summary.n_msas_gone = msa.counts["sources_gone"]
    summary.msas_gone = msa.gone_chains
    summary.n_single_sequence_chains = msa.counts["single_sequence_chains"]
    summary.n_single_sequence_entries = msa.counts["single_sequence_entries"]
    summary.n_msa_chains = msa.counts["chains_with_msa"]
    if msa.n_failed:
        summary.failed_by_stage["msa"] = summary.failed_by_stage.get("msa", 0) + msa.n_failed
    from featurecache.build.chem_stage import run_chem_stage

    chem = run_chem_stage(client, out, ccd, config.conformer_timeout_s, progress)
    summary.components_computed = [str(c["key"]) for c in chem.computed]
    summary.stages["chem"] = chem.summary()
    summary.stage_seconds["chem"] = chem.seconds
    summary.failures.extend(chem.failures)
    # a chem scan whose task failed (its row keyed "": its worker died) is this run's failure, exit
    # 1, as an MSA part's is; a component's crash row (keyed by the component) is not: its failed
    # conformer is stored and the entries that use it are served
    scans_failed = sum(1 for f in chem.failures if not f.get("key"))
    summary.n_failed += scans_failed
    if scans_failed:
        summary.failed_by_stage["chem"] = summary.failed_by_stage.get("chem", 0) + scans_failed
    return msa
