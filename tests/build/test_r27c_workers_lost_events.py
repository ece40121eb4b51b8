"""The "workers lost" row reads the scheduler's events on the scheduler: Dask's own "replicate"
event, logged by a ``scatter(..., broadcast=True)`` (the MSA scan makes one), holds WorkerState
objects that cannot be sent, so ``client.get_events("all")`` failed after any such scatter: the
scheduler logged "Failed to serialize" tracebacks into the build's stderr and the row was silently
empty (found by CI rehearsal 98, session 45: test_progress_lines counted the traceback lines)."""

from __future__ import annotations

import logging

import pytest

from featurecache.build.run import _last_event_time, _workers_lost


def test_a_retired_worker_is_named_after_a_broadcast_scatter(caplog: pytest.LogCaptureFixture) -> None:
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                      dashboard_address=None) as cluster, \
            Client(cluster) as client:  # fmt: skip
        client.wait_for_workers(2)
        since = _last_event_time(client)
        assert since > 0.0, "the scheduler has logged its workers' arrival"
        client.scatter([{"a", "b"}], broadcast=True)  # Dask logs "replicate" with its WorkerStates
        leaving = sorted(client.scheduler_info()["workers"])[0]
        with caplog.at_level(logging.ERROR):
            client.retire_workers([leaving])
            assert _last_event_time(client) > since
            lost = _workers_lost(client, since)
        assert lost == [f"{leaving} (closed or retired on purpose)"]
        assert not [r for r in caplog.records if "serialize" in r.getMessage().lower()], caplog.text
