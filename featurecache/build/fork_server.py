"""The embedded cluster's workers forked by multiprocessing's fork server (``featurecache build``,
``run_build(fork_server=True)``), instead of spawned as new interpreters.

A spawned worker imports Dask, gemmi, RDKit, zarr and the build's stages itself: ~1.1 s of CPU
each, paid again by every worker of every build. :func:`start` starts the fork server of this
process early in a build, with :mod:`featurecache.build.fork_preload` imported in it once; the
Nanny's workers are then forked from it, each with those modules already loaded
(``benchmarks/worker_start.py``: a one-structure build with 4 workers 7.9 → 4.3 s of CPU).

What the workers keep from the spawned ones: SIGINT blocked from their first instruction
(:func:`start` starts the server under :func:`featurecache.signals.sigint_blocked`, and the
server and its children keep that mask: ``worker_plugin``), and Dask's pre-spawn environment
(``distributed.nanny.pre-spawn-environ``: one BLAS thread, malloc trimming, Python's hash seed),
which the libraries read when they load, in the server.

The server lives as long as this process (multiprocessing has no public way to stop it; it ends
when the process does, also when the process is killed). What it loaded is fixed when it starts:
a later build of the same process reuses it only while the package's files and the environment
are as they were then, and spawns its workers otherwise (a notebook that edits the package).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from multiprocessing import forkserver

__all__ = ["METHOD_KEY", "PRELOAD", "start", "stop"]

log = logging.getLogger(__name__)

#: Dask's setting for how a Nanny starts its worker process (default ``spawn``)
METHOD_KEY = "distributed.worker.multiprocessing-method"
#: what the server imports before it forks any worker
PRELOAD = ("featurecache.build.fork_preload",)
#: (package digest, environment) when this process's server started; None: no server of ours
_started: tuple[str, dict[str, str]] | None = None
#: whether :func:`start` set Dask's start method to ``forkserver`` (it replaces only ``spawn``),
#: until :func:`stop` puts ``spawn`` back
_switched = False


def start() -> bool:
    """Make this build's embedded cluster fork its workers from this process's fork server,
    started now if it is not running; returns at once (the server imports while the build reads
    its inputs; a worker's start waits for it). Call :func:`stop` when the build ends. False, and
    the workers are spawned as before, where the platform has no fork server, Dask is configured
    for another method than its default ``spawn`` (the user's choice stands), the server does not
    start (e.g. a temporary directory whose path is too long for its socket), or this process's
    server started with other package files or another environment."""
    global _switched, _started
    import dask
    import distributed  # noqa: F401  (its configuration's defaults: the start method, the pre-spawn environment)

    import featurecache
    from featurecache.signals import sigint_blocked

    method = dask.config.get(METHOD_KEY)
    if _switched or method != "spawn" or "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    # what a Nanny sets before it spawns a worker, set now: the libraries read it when they load
    env = dask.config.get("distributed.nanny.pre-spawn-environ") or {}
    env = {key: os.environ.get(key, str(value)) for key, value in env.items() if value is not None}
    if env.get("PYTHONHASHSEED") in (None, "0"):
        env["PYTHONHASHSEED"] = "6640"  # distributed's Nanny's value
    os.environ.update(env)
    now = (featurecache.source_digest(refresh=True), dict(os.environ))
    if _started is None:
        multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
        try:
            with sigint_blocked():  # the server's mask, and so its workers'
                forkserver.ensure_running()
        except OSError as exc:
            log.info("the build's workers are spawned: multiprocessing's fork server did not start (%s)", exc)
            return False
        _started = now
    elif _started != now:
        log.info("the build's workers are spawned: featurecache's files or the environment changed since "
                 "this process's fork server loaded them")  # fmt: skip
        return False
    dask.config.set({METHOD_KEY: "forkserver"})
    _switched = True
    return True


def stop() -> None:
    """Put Dask's start method back as :func:`start` found it (no-op when it changed nothing): a
    later build of this process that does not ask for the fork server spawns its workers. The
    server itself stays (module doc)."""
    global _switched
    if not _switched:
        return
    import dask

    dask.config.set({METHOD_KEY: "spawn"})
    _switched = False
