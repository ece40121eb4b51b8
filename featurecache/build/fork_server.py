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

It is *the process's* fork server (Dask's Nanny takes a start method by name only, so it cannot
be handed a server of its own): whatever this process later starts with the ``forkserver`` method
(``multiprocessing.get_context("forkserver")``, a Pool or a ``DataLoader`` under it) is forked
from it too, with SIGINT blocked, featurecache, RDKit and the rest preloaded
(``set_forkserver_preload`` of multiprocessing's server), and the environment of the server's
start plus Dask's pre-spawn variables (those are set for the server only: this process's
``os.environ`` is left as it was). So :func:`start` does not take it over, and the workers are
spawned (one logged line says why), where the program already uses it: a fork server already
running in this process that is not this module's, or ``forkserver`` as the process's start method
(set by ``multiprocessing.set_start_method``, or the platform's default: Python 3.14 on Linux).
Review R35b s49 #6.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Mapping
from multiprocessing import forkserver

from featurecache.environ import EnvironSet

__all__ = ["METHOD_KEY", "PRELOAD", "pre_spawn_environ", "start", "stop"]

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
    for another method than its default ``spawn`` (the user's choice stands), the program uses
    the process's fork server (module doc: already running and not ours, or ``forkserver`` the
    process's start method), the server does not start (e.g. a temporary directory whose path is
    too long for its socket), or this process's server started with other package files or
    another environment."""
    global _switched, _started
    import dask
    import distributed  # noqa: F401  (its configuration's defaults: the start method, the pre-spawn environment)

    import featurecache
    from featurecache.signals import sigint_blocked

    method = dask.config.get(METHOD_KEY)
    if _switched or method != "spawn" or "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    # what a Nanny sets before it spawns a worker, given to the server: the libraries read it when
    # they load
    env = pre_spawn_environ(os.environ)
    now = (featurecache.source_digest(refresh=True), {**os.environ, **env})
    if _started is None:
        if why := _in_use():
            log.info("the build's workers are spawned: %s", why)
            return False
        multiprocessing.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
        try:
            with sigint_blocked(), EnvironSet() as environ:  # the server's mask and environment, its workers'
                environ.update(env)
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


def _in_use() -> str:
    """Why this process's fork server is the program's (module doc), "" when it is not."""
    server = getattr(forkserver, "_forkserver", None)
    if getattr(server, "_forkserver_pid", None) is not None:
        return ("this process already runs multiprocessing's fork server, not featurecache's (its SIGINT mask, "
                "environment and preloaded modules are the program's)")  # fmt: skip
    method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]
    if method == "forkserver":
        return ("this process's multiprocessing start method is forkserver, so its own processes would be forked "
                "by featurecache's server (SIGINT blocked, the build's modules and environment)")  # fmt: skip
    return ""


def pre_spawn_environ(current: Mapping[str, str] | None = None) -> dict[str, str]:
    """What distributed's Nanny sets in ``os.environ`` before it spawns a worker: its pre-spawn
    environment (``distributed.nanny.pre-spawn-environ``: one BLAS thread, malloc trimming) and a
    hash seed; each value ``current`` holds is taken from it."""
    import dask.config

    spawn = dask.config.get("distributed.nanny.pre-spawn-environ", default=None) or {}
    held = current if current is not None else {}
    env = {str(key): held.get(str(key), str(value)) for key, value in spawn.items() if value is not None}
    if env.get("PYTHONHASHSEED") in (None, "0"):
        env["PYTHONHASHSEED"] = "6640"  # distributed's Nanny's value
    return env


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
