"""Session-wide Dask clusters that test builds reuse (tests/conftest.build_store).

Starting an embedded LocalCluster costs seconds per build (worker processes with their imports,
then a shutdown); most test builds are about the store, not about the cluster. They run on one of
two LocalClusters kept for the session, one per worker count (1 and 2), each started by the
product's own :func:`featurecache.build.run._make_client`, so their workers are set up exactly as an
embedded build's (started with SIGINT blocked, the IgnoreInterrupt worker plugin). A build on one
goes through the product's external-cluster path (``run_build(scheduler=ADDRESS)``): the same
stages, tasks, version checks and CCD-cache reset as an embedded build; what differs is only the
cluster's start and its quiet shutdown (826da27/59845e0), which the tests that keep a cluster of
their own cover (``build_store(..., own_cluster=True)``, and every CLI or interrupt test).

Before each reuse the cluster is checked, and started anew when it is not as a fresh one would be:
every worker answers, the count is the one asked for, each worker runs the driver's featurecache
as it is on disk now (a file edited during the session would otherwise refuse the build), its Dask
loggers are not silenced (a quieted worker logger would hide a later test's expected line) and
SIGINT is still blocked in it.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

log = logging.getLogger(__name__)

#: workers -> (client, cluster)
_CLUSTERS: dict[int, tuple[Any, Any]] = {}


def _worker_state() -> dict[str, Any]:
    """Runs on a worker: what :func:`_healthy` compares with a fresh worker."""
    from featurecache.build.tasks import worker_versions
    from featurecache.signals import NOISY_AFTER_INTERRUPT

    manager = logging.Logger.manager
    silenced = sorted(
        name
        for name in [*NOISY_AFTER_INTERRUPT, *list(manager.loggerDict)]
        if any(name == p or name.startswith(p + ".") for p in NOISY_AFTER_INTERRUPT)
        and logging.getLogger(name).level > logging.CRITICAL
    )
    return {
        "versions": worker_versions(),
        "silenced": silenced,
        "sigint_blocked": signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []),
    }


def _task_thread_sigint_blocked() -> bool:
    """Runs as a task: whether SIGINT is blocked in the thread that runs the build's tasks (where
    RDKit embeds), which ``client.run`` (the event-loop thread) does not see."""
    return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def _healthy(client: Any, workers: int) -> bool:
    import featurecache
    from featurecache.build.tasks import version_differences, worker_versions

    try:
        if client.status != "running" or len(client.scheduler_info()["workers"]) != workers:
            return False
        featurecache.source_digest(refresh=True)
        mine = worker_versions()
        states = client.run(_worker_state, on_error="return")
        in_tasks = {
            address: client.submit(_task_thread_sigint_blocked, workers=[address], allow_other_workers=False,
                                   pure=False).result(timeout=10)
            for address in states
        }  # fmt: skip
    except Exception as exc:  # a cluster that cannot answer is started anew
        log.warning("shared test cluster (%d workers) unusable: %s", workers, exc)
        return False
    for address, state in states.items():
        if not isinstance(state, dict):
            return False
        blocked = state["sigint_blocked"] and in_tasks.get(address, False)
        if version_differences(state["versions"], mine) or state["silenced"] or not blocked:
            log.info("shared test cluster (%d workers): worker %s differs from a fresh one: %s",
                     workers, address, state)  # fmt: skip
            return False
    return len(states) == workers


#: the TLS credentials every shared cluster runs with (made once), and the directory of their files
_SECURITY: list[Any] = []


def _shared_security() -> Any:
    """One set of TLS credentials for the session's clusters (``_make_client(security=)``), also
    written to files of a private directory that Dask's TLS variables name in this process's
    environment: a test's ``featurecache build --scheduler ADDRESS`` subprocess reaches a shared
    cluster through the product's ``--scheduler tls://`` path with Dask's settings (review R42c s52 #3:
    the embedded cluster runs on TLS; its own credentials exist only in the process that made it)."""
    if not _SECURITY:
        import atexit
        import os
        import shutil
        import tempfile

        from distributed.security import Security

        security = Security.temporary()
        where = tempfile.mkdtemp(prefix="featurecache-test-tls-")
        atexit.register(shutil.rmtree, where, True)
        for variable, name, text in (
            ("DASK_DISTRIBUTED__COMM__TLS__CA_FILE", "ca.pem", security.tls_ca_file),
            ("DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT", "client.pem", security.tls_client_cert),
            ("DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY", "client.key", security.tls_client_key),
        ):
            path = os.path.join(where, name)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(text)
            os.environ[variable] = path
        _SECURITY.append(security)
    return _SECURITY[0]


def shared_scheduler(workers: int) -> str:
    """The scheduler address of the session's cluster of ``workers`` workers (started, or started
    anew, here when needed)."""
    from featurecache.build.run import _make_client, _shutdown

    entry = _CLUSTERS.get(workers)
    if entry is not None and not _healthy(entry[0], workers):
        del _CLUSTERS[workers]
        _shutdown(*entry)
        entry = None
    if entry is None:
        entry = _make_client(workers, None, security=_shared_security())
        _CLUSTERS[workers] = entry
    return str(entry[1].scheduler_address)


def close_all() -> None:
    """Close every shared cluster (end of the session). Imports the build (gemmi, Dask) only when a
    cluster was started: a session of model tests on an image without the build's packages (the
    H200 image runs ``benchmarks/gpu_tests.sh`` without gemmi) has nothing to close."""
    if not _CLUSTERS:
        return
    from featurecache.build.run import _shutdown

    while _CLUSTERS:
        _, entry = _CLUSTERS.popitem()
        _shutdown(*entry)


def scheduler_args(workers: int = 1) -> list[str]:
    """``featurecache build`` arguments that run a CLI build on the session's cluster of
    ``workers`` workers (in place of ``--workers N``): a test about the build's outcome, its exit
    status and its messages, not about the embedded cluster's start or shutdown."""
    return ["--scheduler", shared_scheduler(workers)]
