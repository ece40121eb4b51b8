"""``featurecache serve``: run the lookup app under uvicorn."""

from __future__ import annotations

import contextlib
import copy
import logging
import logging.config
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from featurecache.environ import EnvironSet
from featurecache.errors import FeatureCacheError, StoreError
from services.lookup.logs import handlers_kept, logging_kept
from services.lookup.protocol import ConnectionLimits, NoDelayHTTPProtocol, ServiceConfig

log = logging.getLogger(__name__)

#: what uvicorn runs in each worker: :func:`worker_app` (``services.lookup.main.create_app``, whose
#: failure at start-up it reports)
APP_FACTORY = "services.lookup.server:worker_app"

#: seconds a stopping server lets requests in flight finish (uvicorn's ``timeout_graceful_shutdown``).
#: Below docker's and podman's default stop timeout (10 s from SIGTERM to SIGKILL): at 10 s a plain
#: ``docker stop`` with a stream in flight lost the race and ended 137, streams cut by the kill
#: (review R26d s44 #5); 8 s leaves serve the time to stop its workers, clean up and exit 143.
#: deploy/compose.yaml gives the lookup container 20 s all the same (``stop_grace_period``)
GRACEFUL_SHUTDOWN_S = 8

#: the directory (made by ``run_server`` for several workers) where a worker that cannot start
#: writes why, in a file named by its pid, for ``serve`` to name the reason when it stops
WORKER_FAILURES_ENV = "_FEATURECACHE_WORKER_FAILURES"

#: the pid of the ``serve`` process whose workers these are (set by ``run_server`` for several
#: workers): a worker ends when that process dies, even by SIGKILL (:func:`_end_with_serve`)
SERVE_PID_ENV = "_FEATURECACHE_SERVE_PID"

#: the file that a running ``serve`` holds locked (``flock``) in each temporary directory it made:
#: a directory whose lock can be taken was left by a serve that was killed (:func:`_remove_stale_dirs`)
OWNER_LOCK = ".serve.lock"

#: the prefixes of the temporary directories that ``serve --workers N`` makes (metrics, failures)
_DIR_PREFIXES = ("featurecache-metrics-", "featurecache-workers-")

#: the name of an empty file that a worker makes in the metrics directory while some of its metric
#: values find no room there (``services.lookup.metrics``): its pid and the errno's name follow
NOT_RECORDED_PREFIX = ".metrics-not-recorded-"

#: the space one worker's metric files take from its start: prometheus_client's files of counters
#: and of histograms, 64 KiB each (:func:`_check_metrics_dir`)
METRIC_FILES_BYTES = 2 * 65536

#: start-up deaths in a row (workers that died before they served, with none starting meanwhile)
#: after which serve stops instead of starting another worker (:func:`_run_workers`)
STARTUP_DEATHS_MAX = 5

#: why this process's app could not start (set by :func:`worker_app`), None while it could
_startup_failure: str | None = None


def worker_app() -> Any:
    """The app of one server process: ``create_app()`` (settings from the environment), whose
    lifespan opens the store. When either fails (an import that fails in the worker, e.g. a
    ``PROMETHEUS_MULTIPROC_DIR`` that does not exist; a token file gone; an exception opening the
    store) the reason is logged on one line and recorded (:data:`WORKER_FAILURES_ENV`), and a failed
    import or factory exits with uvicorn's start-up failure status (3), as a failed lifespan does:
    uvicorn's supervisor restarted a worker that exited 1 for good, and stops on 3, after which
    ``run_server`` fails naming the reason instead of ending 0 (s24 closing note)."""
    from uvicorn.config import STARTUP_FAILURE

    _end_with_serve()
    try:
        from services.lookup.main import create_app

        app = create_app()
    except Exception as exc:
        _record_startup_failure(exc)
        sys.exit(STARTUP_FAILURE)
    opening = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[Any]:
        started = False
        try:
            async with opening(application) as state:
                started = True
                yield state
        except Exception as exc:
            if not started:
                _record_startup_failure(exc)
            raise

    app.router.lifespan_context = lifespan
    return app


def _end_with_serve() -> None:
    """In a worker of ``serve --workers N``: end when serve's process dies, however it dies.

    uvicorn's supervisor stops its workers on SIGINT and SIGTERM, but nothing stopped them when serve
    was killed (SIGKILL, the OOM killer): they ran on, orphaned, answering on the port, and a restarted
    serve could not bind it (review R40b s51 #2). On Linux the kernel sends this worker SIGTERM when
    the thread that started it ends (``PR_SET_PDEATHSIG``): the supervisor's, serve's main thread
    (uvicorn installs its signal handlers there; it also starts the worker that replaces one that
    died), which ends only with the process. SIGTERM is uvicorn's graceful stop (requests in flight
    finish, the store is closed), as when the supervisor stops its workers itself. Elsewhere a daemon
    thread looks at the parent pid every second. A serve already gone when this runs ends the worker
    at once. Not in serve's own process (one worker, or a caller of ``run_server``)."""
    expected = os.environ.get(SERVE_PID_ENV, "")
    if not expected.isdigit() or int(expected) == os.getpid():
        return
    serve_pid = int(expected)
    from featurecache.signals import parent_death_signal

    if not parent_death_signal(signal.SIGTERM):
        threading.Thread(target=_watch_parent, args=(serve_pid,), name="serve-watch", daemon=True).start()
    if os.getppid() != serve_pid:  # died before the above took effect (or this is not its worker)
        log.warning("server process [%d]: serve's process [%d] is gone; stopping", os.getpid(), serve_pid)
        sys.exit(1)


def _watch_parent(serve_pid: int) -> None:  # pragma: no cover - Linux uses PR_SET_PDEATHSIG
    """Send this process SIGTERM (uvicorn's graceful stop) once its parent is no longer ``serve_pid``."""
    while os.getppid() == serve_pid:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)


def _record_startup_failure(exc: BaseException) -> None:
    global _startup_failure
    reason = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line
    _startup_failure = reason
    log.error("server process [%d] cannot start: %s", os.getpid(), reason)
    log.debug("start-up failure", exc_info=exc)
    failures = os.environ.get(WORKER_FAILURES_ENV)
    if failures:
        with contextlib.suppress(OSError):
            Path(failures, str(os.getpid())).write_text(reason, encoding="utf-8")


def run_server(
    store: Path | str, host: str = "127.0.0.1", port: int = 8000, workers: int = 1, token: str | None = None
) -> None:
    """Serve ``store`` until interrupted.

    Settings reach every worker process through the environment (``FEATURECACHE_STORE_PATH``,
    ``FEATURECACHE_AUTH_TOKEN`` or ``FEATURECACHE_AUTH_TOKEN_FILE``, which each worker reads; other
    limits as set by the caller's environment). A token file that cannot be read or is empty, or a
    token given both ways, fails here (FeatureCacheError naming the file; the CLI exits 3). The store is
    opened here first, so a path that is not a store (yet) fails at once (StoreError; the CLI exits
    3) instead of serving 503s. Once serving, each worker follows the store as it is rebuilt or
    extended (``state.StoreHolder``). With several workers, Prometheus metrics are aggregated
    through a temporary multiprocess directory (under ``$TMPDIR`` or ``/tmp``, or
    ``PROMETHEUS_MULTIPROC_DIR``): one without room for the workers' files (128 KiB each) fails here
    (FeatureCacheError naming it; :func:`_check_metrics_dir`); one that fills later costs metrics,
    not workers (``services.lookup.metrics``). Workers that die again and again before they serve
    stop serve (FeatureCacheError naming the cause) instead of being restarted without end.
    Each worker ends when serve's process does, killed too (SIGKILL, the OOM killer); the next
    ``serve --workers N`` removes the temporary directories that a killed one left.

    While it runs, the ``featurecache``, ``services`` and ``uvicorn`` loggers log on uvicorn's handler
    (stderr), and the settings above are in ``os.environ``. When it returns or raises, both are as
    they were before (a variable only where it still holds the value set here): in a caller's
    process its root handlers see featurecache's lines again, and a later ``Settings()`` does not
    read this store (review R35b s49 #8). A SIGTERM still ends the process once the server stopped.
    """
    log_config = service_log_config()
    disables = bool(log_config.get("disable_existing_loggers", True))
    with logging_kept(log_config["loggers"], disables_existing=disables), EnvironSet() as environ:
        with handlers_kept():  # the caller's handlers stay open and registered
            logging.config.dictConfig(log_config)
        stopped_by = _serve(Path(store), host, port, workers, token, log_config, environ)
    if stopped_by == signal.SIGTERM:
        # as uvicorn does with one worker: hand the signal on once everything is stopped and cleaned
        # up, so that `serve --workers N` ends as SIGTERM's (status 143) whatever N is
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
        # still here: serve is PID 1 of a container without an init (the image's exec-form
        # ENTRYPOINT), where the kernel drops a default-action signal sent to a PID namespace's init,
        # even one the process sends itself; `docker stop` then saw exit 0 (review RF1 s24 #1)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signal.SIGTERM)


def _serve(
    store: Path, host: str, port: int, workers: int, token: str | None, log_config: dict[str, Any],
    environ: EnvironSet,
) -> int | None:  # fmt: skip
    """:func:`run_server`'s checks and server, with logging configured; returns the signal that
    stopped the server (SIGINT, SIGTERM) or None."""
    from featurecache import open_store
    from featurecache.auth import TOKEN_ENV, TOKEN_FILE_ENV, token_from_environment
    from featurecache.store.versions import msa_stage_notes, store_versions, version_notes
    from services.lookup.hosts import SERVE_HOST_ENV
    from services.lookup.settings import check_settings, check_token_source
    from services.lookup.state import link_note

    if token is not None:
        environ["FEATURECACHE_AUTH_TOKEN"] = token
    check_token_source()
    # absolute, its links kept: a store swapped in by replacing a link (ln -s new tmp; mv -T tmp
    # current) is served as a store renamed into place is; the path resolved here pinned the old
    # target, served until it was deleted, then 503 for ever (review R36b s49 #2)
    # (joined to the working directory, not normalised: os.path.abspath cancels "lnk/.." as text,
    # which serves another directory than the one the path leads to through the link: R37 s49 #4)
    path = Path(store) if Path(store).is_absolute() else Path(os.getcwd()) / store
    settings = check_settings(path)  # what each worker's Settings() reads: an invalid limit stops serve here
    try:
        opened = open_store(path)
        n = len(opened.ids)
        finished = opened.finished
    except OSError as exc:
        raise StoreError(f"cannot serve {path}: {exc}") from exc
    raise_open_files_limit(settings.max_connections)
    _check_bind(host, port)  # before "serving …": a port in use is one error line, not a log then uvicorn's
    if not _is_loopback(host) and token_from_environment() is None:  # (checked above: it reads)
        log.warning("serving on %s without a token: anyone who can reach this machine on port %d reads the "
                    "store; set %s (or %s, or --token) to require one, or serve on 127.0.0.1",
                    host, port, TOKEN_ENV, TOKEN_FILE_ENV)  # fmt: skip
    for line in version_notes(store_versions(opened), str(path)):  # data of another featurizer, or mixed
        log.warning("%s", line)
    for line in msa_stage_notes(opened):  # MSAs merged by an older MSA stage (as info and verify say)
        log.warning("%s", line)
    opened.close()
    environ["FEATURECACHE_STORE_PATH"] = str(path)
    environ[SERVE_HOST_ENV] = host  # a Host the data routes answer without a token (services.lookup.hosts)
    if workers > 1:
        environ[SERVE_PID_ENV] = str(os.getpid())  # each worker ends when this process dies
        _remove_stale_dirs()  # those a killed serve left
    multiproc_dir = None
    locks: list[int] = []  # held while serving: these directories are this serve's
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        try:
            multiproc_dir = tempfile.mkdtemp(prefix=_DIR_PREFIXES[0])
        except OSError as exc:
            raise FeatureCacheError(
                f"--workers {workers} needs a writable temporary directory for the workers' shared "
                f"metrics ({exc}); in a read-only container give it one: --tmpfs /tmp"
            ) from exc
        locks += _lock_dir(multiproc_dir)
        environ["PROMETHEUS_MULTIPROC_DIR"] = multiproc_dir
    metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR") if workers > 1 else None
    if metrics_dir is not None:
        try:
            _check_metrics_dir(metrics_dir, workers, made=multiproc_dir is not None)
        except FeatureCacheError:
            if multiproc_dir is not None:
                shutil.rmtree(multiproc_dir, ignore_errors=True)
            for fd in locks:
                os.close(fd)
            raise
    failures_dir = None
    if workers > 1:  # where a worker that cannot start says why (without it: "its error is logged")
        with contextlib.suppress(OSError):
            failures_dir = tempfile.mkdtemp(prefix=_DIR_PREFIXES[1])
            environ[WORKER_FAILURES_ENV] = failures_dir
            locks += _lock_dir(failures_dir)
    # once every check that can stop serve has passed (review R26d s44 #9: it came before the
    # temporary directory's, and gave an unfinished first build's count as the store's)
    state = "" if finished else ", its first build not finished: 503 until that build ends"
    log.info(
        "serving %s%s (%d entries%s) on http://%s:%d with %d worker(s)", path, link_note(path), n, state, host,
        port, workers,
    )  # fmt: skip
    options: dict[str, Any] = dict(
        factory=True, host=host, port=port, workers=workers, http=NoDelayHTTPProtocol, log_level="info",
        log_config=log_config, access_log=False, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        connection_limits=ConnectionLimits.from_settings(settings), limit_concurrency=settings.max_connections,
    )  # fmt: skip
    stopped_by: int | None = None
    try:
        if workers == 1:
            stopped_by = _run_one(ServiceConfig(APP_FACTORY, **options))
        else:
            stopped_by = _run_workers(ServiceConfig(APP_FACTORY, **options), failures_dir, metrics_dir)
    finally:
        for made in (multiproc_dir, failures_dir):
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
        for fd in locks:
            os.close(fd)
    return stopped_by


def _check_metrics_dir(path: str, workers: int, made: bool) -> None:
    """Whether the workers' metric files fit in ``path`` (``PROMETHEUS_MULTIPROC_DIR``): a probe file
    of their size (:data:`METRIC_FILES_BYTES` a worker) allocated there (``posix_fallocate``) and
    removed. On a full filesystem (a ``/tmp`` tmpfs in a read-only container) every worker died of
    SIGBUS and was restarted without end, serving nothing and saying nothing (review R42b s52 #3):
    FeatureCacheError naming the directory and the reason instead (serve exits 3). ``made``: the
    directory is serve's own (``mkdtemp`` under ``$TMPDIR``), else the user's. The markers of
    values not recorded that an earlier serve's workers left there are removed (:data:`NOT_RECORDED_PREFIX`)."""
    import errno

    with contextlib.suppress(OSError):
        for name in os.listdir(path):
            if name.startswith(NOT_RECORDED_PREFIX):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(path, name))
    size = workers * METRIC_FILES_BYTES
    exc = _no_room(path, size)
    if exc is None:
        return
    where = f"the metrics directory {path}" + ("" if made else " (PROMETHEUS_MULTIPROC_DIR)")
    variable = "TMPDIR" if made else "PROMETHEUS_MULTIPROC_DIR"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = f"has no room for the metric files of {workers} workers ({size // 1024} KiB): {exc.strerror}"
        fix = f"free space there, or set {variable} to a directory with room"
    else:
        why = f"cannot be written: {type(exc).__name__}: {exc}"
        fix = f"set {variable} to a writable directory"
    if made:
        fix += " (in a container: a larger --tmpfs /tmp)"
    raise FeatureCacheError(f"serve could not start: {where} {why}; {fix} (--workers 1 needs none)")


def _no_room(path: str, size: int) -> OSError | None:
    """The error of allocating ``size`` bytes to a new file in ``path`` (removed again), or None."""
    probe = os.path.join(path, f".room-probe-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(probe)
    except OSError as exc:
        return exc
    return None


def _lock_dir(path: str) -> list[int]:
    """Mark ``path`` (a temporary directory just made) as this serve's while it runs: its
    :data:`OWNER_LOCK` file, locked (``flock``) through the descriptor returned (a list of it; empty
    where the file cannot be made or locked: the directory is then never taken for a killed serve's).
    The kernel lets the lock go when the process ends, however it ends. The file is locked before
    it takes its name, so another serve never finds it unlocked while its serve runs."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Windows
        return []
    pending = os.path.join(path, OWNER_LOCK + ".new")
    try:
        fd = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError:
        return []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(pending, os.path.join(path, OWNER_LOCK))
    except OSError:
        os.close(fd)
        return []
    return [fd]


def _remove_stale_dirs() -> None:
    """Remove the temporary directories (metrics, start-up failures) that a ``serve --workers N``
    killed by SIGKILL (the OOM killer) could not remove (review R40b s51 #2): those in the temporary
    directory, this user's, whose :data:`OWNER_LOCK` is not held. The lock is held by a running serve
    wherever it runs (another container sharing the directory too); a directory without the file (an
    older featurecache's) is left alone."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Windows
        return
    base = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(base) if n.startswith(_DIR_PREFIXES)]
    except OSError:
        return
    for name in names:
        path = os.path.join(base, name)
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            fd = os.open(os.path.join(path, OWNER_LOCK), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its serve runs
            os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            log.debug("removed %s, left by a serve that was killed", path)
        finally:
            os.close(fd)


#: file descriptors a server process needs besides its connections (the store's files, logs, pipes)
FD_RESERVE = 100


def raise_open_files_limit(max_connections: int) -> int:
    """Raise this process's soft limit on open files to its hard limit (the workers inherit it), and
    warn when that is still below ``max_connections`` plus :data:`FD_RESERVE`: a container's soft
    limit may be 1024, and a server at its limit accepts nobody, silently (review R26d s44 #3).
    Returns the soft limit now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    if soft != resource.RLIM_INFINITY and soft < max_connections + FD_RESERVE:
        log.warning("this process may open %d files, fewer than FEATURECACHE_MAX_CONNECTIONS=%d connections need "
                    "(+%d): raise the limit (docker run --ulimit nofile=N:N) or lower the setting",
                    soft, max_connections, FD_RESERVE)  # fmt: skip
    return int(soft)


def _is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback name or address (only this machine can connect there)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: resolved by uvicorn, not judged here
        return False


def _check_bind(host: str, port: int) -> None:
    """Bind ``host:port`` once as uvicorn will (``SO_REUSEADDR``) and let it go: a port another
    process listens on, or an address this machine does not have, is a FeatureCacheError naming it
    (serve exits 3) before anything is logged as serving. A port taken in the moment between this
    check and uvicorn's bind still fails there, with uvicorn's message."""
    import errno

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]  # fmt: skip
    except socket.gaierror as exc:
        raise FeatureCacheError(f"cannot serve on {host}:{port}: {exc.strerror} (--host)") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            why = {errno.EADDRINUSE: "address already in use: another process listens there (stop it, or give "
                                     "another --port)",
                   errno.EADDRNOTAVAIL: "this machine has no such address (--host)",
                   errno.EACCES: "permission denied (a port below 1024 needs privileges: give --port 1024 or "
                                 "above)"}.get(exc.errno or 0, exc.strerror or str(exc))  # fmt: skip
            raise FeatureCacheError(f"cannot serve on http://{host}:{port}: {why}") from None


def _run_one(config: Any) -> int | None:
    """What ``uvicorn.run`` does for one worker (load the app, run the server until a signal stops
    it, exit 3 if it never started), returning the first signal that stopped it (SIGINT, SIGTERM) or
    None. uvicorn hands a SIGTERM on itself once stopped (exit 143), which the kernel drops when serve
    is PID 1 of a container: the caller then ends the process with 143 itself."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    class Server(uvicorn.Server):
        stopped_by: int | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.stopped_by is None:
                self.stopped_by = sig
            super().handle_exit(sig, frame)

    config.load_app()  # an app that cannot be imported: uvicorn logs it and exits 1, as uvicorn.run
    server = Server(config=config)
    try:
        with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run does
            server.run()  # re-raises a SIGTERM itself once stopped (exit 143), unless serve is PID 1
    except SystemExit:
        if _startup_failure is not None:  # worker_app's: the app or its lifespan failed (exit 3)
            raise FeatureCacheError(f"the server could not start: {_startup_failure}") from None
        raise
    if not server.started:
        sys.exit(STARTUP_FAILURE)  # a port in use, the app's start-up failed
    return server.stopped_by


def _run_workers(config: Any, failures_dir: str | None = None, metrics_dir: str | None = None) -> int | None:
    """What ``uvicorn.run`` does for ``workers > 1`` (bind the socket, run the multiprocess
    supervisor until a signal stops it), returning the signal that stopped it (SIGINT, SIGTERM) or
    None: uvicorn's supervisor returns normally after a SIGTERM, which would make the exit status 0
    with several workers but 143 with one (review R2 s24 #4).

    A worker that cannot start (exit status 3: :func:`worker_app`, uvicorn's own failed lifespan),
    at first or when it replaces one that died, stops every worker, as uvicorn's supervisor does,
    and raises FeatureCacheError naming the reason the worker wrote under ``failures_dir``; uvicorn
    returned normally there, and serve ended 0 without having served (s24 closing note).

    So do :data:`STARTUP_DEATHS_MAX` workers in a row that die otherwise before they serve (killed
    by a signal, another exit status), with no worker starting meanwhile: uvicorn's supervisor
    started another at once, without end (SIGBUS on a full metrics directory: review R42b s52 #3).
    A worker that dies after it served is replaced, as before. The error names the last death's
    cause: its recorded reason, else its signal or status, and the metrics directory
    (``metrics_dir``) if it has no room now."""
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    class Supervisor(Multiprocess):
        stopped_by: int | None = None
        failed: int | None = None  # pid of the worker that could not start
        died: tuple[int | None, int | None] | None = None  # (pid, exit code) of the last start-up death
        startup_deaths = 0  # in a row

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.started: set[int] = set()  # pids of the workers seen serving

        def keep_subprocess_alive(self) -> None:
            # a worker that ended with the start-up failure status stops serve: looked for before
            # uvicorn's own look (which restarted such a worker before uvicorn 0.3x; now it stops
            # without telling its caller) and after it (the worker may end during its health check)
            if self._startup_failed():
                return
            self._note_started()
            before = list(self.processes)
            super().keep_subprocess_alive()
            if self._startup_failed():
                return
            for process in before:
                if any(process is now for now in self.processes):
                    continue  # (uvicorn replaces a worker that died or hung with a new one)
                if process.pid in self.started:
                    self.started.discard(process.pid)
                    continue
                self.startup_deaths += 1
                self.died = (process.pid, process.exitcode)
            if self.startup_deaths >= STARTUP_DEATHS_MAX and not self.should_exit.is_set():
                self.should_exit.set()

        def _note_started(self) -> None:
            """Ask each worker not yet seen serving whether it serves now (uvicorn's health check,
            which answers the worker's ``started``); one that does ends a run of start-up deaths."""
            for process in self.processes:
                pid = process.pid
                if pid is None or pid in self.started or not process.process.is_alive():
                    continue
                if process.is_ready(timeout=1):
                    self.started.add(pid)
                    self.startup_deaths = 0

        def _startup_failed(self) -> bool:
            for process in self.processes:
                if process.process.exitcode == STARTUP_FAILURE:
                    self.failed = process.pid
                    self.should_exit.set()
                    return True
            return False

        def handle_int(self) -> None:
            self.stopped_by = signal.SIGINT
            super().handle_int()

        def handle_term(self) -> None:
            self.stopped_by = signal.SIGTERM
            super().handle_term()

    sock = config.bind_socket()  # a port in use: uvicorn logs it and exits 3, as with one worker
    supervisor = Supervisor(config, sockets=[sock])
    try:
        supervisor.run()
    except KeyboardInterrupt:  # pragma: no cover - uvicorn.run swallows it the same way
        pass
    except OSError as exc:
        # a worker process that could not even be started (multiprocessing's spawn reads the working
        # directory: deleted, FileNotFoundError; fork: EAGAIN, ENOMEM) was a traceback and exit 1
        # (review R38a s50 #7); those started before it are stopped
        with contextlib.suppress(Exception):
            supervisor.terminate_all()
            supervisor.join_all()
        raise FeatureCacheError(f"serve stopped: a worker process could not start: {_start_error(exc)}") from None  # fmt: skip
    finally:
        sock.close()
    if supervisor.stopped_by is not None:
        return supervisor.stopped_by
    if supervisor.failed is not None:
        reason = _recorded_failure(failures_dir, supervisor.failed)
        raise FeatureCacheError(
            f"serve stopped: worker process [{supervisor.failed}] could not start: "
            + (reason or f"exit status {STARTUP_FAILURE} (its error is logged above)")
        )
    if supervisor.died is not None and supervisor.startup_deaths >= STARTUP_DEATHS_MAX:
        pid, code = supervisor.died
        recorded = _recorded_failure(failures_dir, pid)
        cause = (
            f"could not start: {recorded}" if recorded else _death_cause(code, metrics_dir, config.workers)
        )
        raise FeatureCacheError(
            f"serve stopped: {supervisor.startup_deaths} worker processes in a row died before they served; "
            f"the last, [{pid}], {cause}"
        )
    return None


def _recorded_failure(failures_dir: str | None, pid: int | None) -> str | None:
    """The reason worker ``pid`` recorded when it could not start (:func:`_record_startup_failure`)."""
    if failures_dir is None or pid is None:
        return None
    try:
        return Path(failures_dir, str(pid)).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _death_cause(code: int | None, metrics_dir: str | None, workers: int) -> str:
    """Why a worker process that ended with exit code ``code`` (multiprocessing's: ``-N`` for signal
    N) ended, as far as serve can tell, for "the last, [pid], …"."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        cause = f"was killed by {name}"
        if -code == signal.SIGBUS:
            cause += " (a bus error: a memory-mapped file found no room, e.g. on a full filesystem)"
        elif -code == signal.SIGKILL:
            cause += " (the OOM killer, or serve when it did not answer uvicorn's health check in time)"
    else:
        cause = f"ended with exit status {code} (its error is logged above)"
    exc = _no_room(metrics_dir, workers * METRIC_FILES_BYTES) if metrics_dir is not None else None
    if exc is not None:
        cause += f"; the metrics directory {metrics_dir} cannot take the workers' metric files: {exc.strerror or exc}"
    return cause


def _start_error(exc: OSError) -> str:
    """``exc``, raised starting a worker process, for a line; a deleted working directory (the
    bare "[Errno 2] No such file or directory" of ``os.getcwd()``) is named as such."""
    if isinstance(exc, FileNotFoundError) and exc.filename is None:
        try:
            os.getcwd()
        except FileNotFoundError:
            return f"{exc}: the current directory no longer exists (it was deleted); start serve from an existing one"
    return str(exc)


def service_log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration, plus the ``featurecache`` and ``services`` loggers at
    INFO on uvicorn's handler (its format, stderr). uvicorn applies it in every worker; ``serve``
    applies it first, so its startup line shows too. uvicorn's own loggers are left as they are."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    for name in ("featurecache", "services"):
        config["loggers"][name] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config


# ------------------------------------------------------------------ servers for tests and benchmarks
def wait_ready(url: str, timeout: float = 60.0, token: str | None = None, path: str = "/v1/ready") -> None:
    """Poll ``url + path`` until it answers 200 (raises TimeoutError with the last answer)."""
    import httpx

    headers = {"authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url + path, headers=headers, timeout=2.0)
            if r.status_code == 200:
                return
            last = f"{r.status_code} {r.text[:200]}"
        except httpx.TransportError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.1)
    raise TimeoutError(f"{url}{path} not ready after {timeout:.0f} s: {last}")


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports it hands out itself (port 0 binds, outgoing connections)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing is bound to now, outside the kernel's ephemeral range.

    A port the kernel picked (bind to port 0) is free only until this returns: the kernel may hand
    it to the next process that binds port 0 or connects out, e.g. a Dask scheduler or worker of a
    build running beside the caller, before the caller's server binds it. That server then could not
    start, and the readiness probes went to the Dask process (CI of dd1f49b: a build's stderr showed
    distributed's traceback for a "GET /v1/" handshake). Ports below (or above) the ephemeral range
    are never handed out that way, so only a process that names the port itself can take it between.
    """
    low, high = _ephemeral_range()
    ranges = [(r0, r1) for r0, r1 in ((max(1024, low - 12000), low), (high + 1, 65536)) if r1 - r0 >= 500]
    rng = random.SystemRandom()
    for _ in range(200 if ranges else 0):
        r0, r1 = rng.choice(ranges)
        port = rng.randrange(r0, r1)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # no room outside: the kernel's pick
        s.bind((host, 0))
        return int(s.getsockname()[1])


#: what uvicorn logs once its socket is bound (one worker: Server.startup; several: bind_socket)
_LISTENING = "Uvicorn running on"


@contextmanager
def background_server(
    store: Path | str,
    *,
    workers: int = 1,
    token: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    cwd: Path | str | None = None,
    port: int | None = None,
) -> Iterator[str]:
    """``featurecache serve STORE`` in a child process on 127.0.0.1 and a free port (``port``: that
    one, e.g. another server's after it stopped); yields its URL once ``/v1/ready`` answers, stops
    it (SIGTERM, then SIGKILL) on exit. ``cwd``: the directory it runs in (``python -m`` imports
    featurecache from there first: another source tree's).

    The URL is probed only once the child says it has bound the port, so a port that another
    process took first is never sent requests meant for the server: the child's "address already
    in use" is raised (RuntimeError with its output), after up to two more free ports when the port
    was not given."""
    attempts = 3 if port is None else 1
    for attempt in range(attempts):
        chosen = free_port() if port is None else port
        cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(chosen)]
        cmd += ["--workers", str(workers)] + (["--token", token] if token is not None else [])
        proc = subprocess.Popen(
            cmd, env={**os.environ, **(env or {})}, cwd=cwd, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        lines: list[str] = []
        listening = threading.Event()

        def read(
            out: Any = proc.stdout, lines: list[str] = lines, listening: threading.Event = listening
        ) -> None:
            for line in out:  # until the child closes it: also keeps its pipe from filling up
                lines.append(line)
                if _LISTENING in line:
                    listening.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        url = f"http://127.0.0.1:{chosen}"
        try:
            deadline = time.monotonic() + timeout
            while not listening.wait(0.05) and proc.poll() is None and time.monotonic() < deadline:
                pass
            if not listening.is_set():
                if proc.poll() is None:
                    raise TimeoutError(f"{url}: the server did not bind its port within {timeout:.0f} s")
                reader.join(timeout=5)
                output = "".join(lines)
                if "address already in use" in output and attempt + 1 < attempts:
                    continue  # another process took the port first: try another one
                raise RuntimeError(
                    f"featurecache serve on port {chosen} ended with status {proc.returncode} before "
                    f"it listened; its output:\n{output[-4000:]}"
                )
            try:
                wait_ready(url, timeout=max(1.0, deadline - time.monotonic()), token=token)
            except TimeoutError as exc:
                raise TimeoutError(f"{exc}\nserver output:\n{''.join(lines)[-4000:]}") from None
            yield url
            return
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            reader.join(timeout=5)
            if proc.stdout is not None:
                proc.stdout.close()


class ThreadedServer:
    """The app under a real uvicorn server in a thread of this process, on 127.0.0.1.

    For tests that must see inside the server (e.g. an audit hook on every file it opens).
    ``with ThreadedServer(settings) as url: ...``
    """

    def __init__(self, settings: Any) -> None:
        import uvicorn

        from services.lookup.main import create_app

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.app = create_app(settings)  # app.state.store: the StoreHolder, for tests that look inside
        config = ServiceConfig(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            http=NoDelayHTTPProtocol,
            connection_limits=ConnectionLimits.from_settings(settings),
            limit_concurrency=settings.max_connections,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> str:
        self._thread.start()
        wait_ready(self.url, timeout=30, path="/v1/health")
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)
        self._sock.close()
