"""The guard of the session's shared build clusters (tests/clusters.py): a cluster whose worker is
not as a fresh one would be (Dask loggers silenced, as a build's quiet shutdown or a SIGINT leaves
them) is not handed to the next test build."""

from __future__ import annotations

import logging

from tests.clusters import _CLUSTERS, _healthy, shared_scheduler


def _silence(names: tuple[str, ...]) -> dict[str, int]:
    """Runs on a worker: :func:`featurecache.signals.quiet_loggers` as the product calls it."""
    from featurecache.signals import quiet_loggers

    return quiet_loggers(names)


def _restore(previous: dict[str, int]) -> None:
    from featurecache.signals import restore_loggers

    restore_loggers(previous)


def _levels() -> dict[str, int]:
    return {n: logging.getLogger(n).level for n in ("distributed", "distributed.worker", "tornado")}


def test_a_worker_with_silenced_dask_loggers_is_not_reused() -> None:
    address = shared_scheduler(1)
    client, cluster = _CLUSTERS[1]
    assert cluster.scheduler_address == address
    assert _healthy(client, 1)
    before = client.run(_levels)
    assert all(level <= logging.CRITICAL for levels in before.values() for level in levels.values())
    previous = client.run(_silence, ("distributed.worker",))
    try:
        assert not _healthy(client, 1)  # a later test's expected worker log line would not show
        assert not _healthy(client, 2)  # nor is a cluster of another worker count
    finally:
        for worker, levels in previous.items():
            client.run(_restore, levels, workers=[worker])
    assert client.run(_levels) == before
    assert _healthy(client, 1)
    assert shared_scheduler(1) == address  # a healthy cluster is kept
