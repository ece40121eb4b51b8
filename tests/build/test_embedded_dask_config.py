"""An embedded build cluster runs Dask's periodic diagnostics less often than Dask's defaults
(featurecache.build.run.EMBEDDED_DASK_CONFIG): no worker profiler (a 10 ms callback in every
worker), the scheduler's tick every 1 s instead of 20 ms, its system monitor every 2 s instead of
500 ms; also in a worker its nanny restarts. A setting the user made (a DASK_* variable, a Dask
config file, dask.config.set) is kept. Real LocalClusters, made as a build makes them
(run._make_client)."""

from __future__ import annotations

from typing import Any

import dask.config
import distributed  # noqa: F401 (Dask's distributed settings exist once it is imported)
import pytest

from featurecache.build.run import _make_client, _shutdown

TICK = "distributed.admin.tick.interval"


def _worker_state(dask_worker: Any) -> dict[str, Any]:
    """Runs in each worker: whether its profiler runs, and its own tick and monitor periods (ms)."""
    callbacks = dask_worker.periodic_callbacks
    return {"profile": "profile" in callbacks, "tick_ms": callbacks["tick"].callback_time,
            "monitor_ms": callbacks["monitor"].callback_time}  # fmt: skip


def _scheduler_periods(cluster: Any) -> tuple[float, float]:
    callbacks = cluster.scheduler.periodic_callbacks
    return callbacks["tick"].callback_time, callbacks["monitor"].callback_time


def test_an_embedded_cluster_runs_its_diagnostics_less_often_also_after_a_restart() -> None:
    before = dask.config.get(TICK)
    client, cluster = _make_client(1, None)
    try:
        assert dask.config.get(TICK) == before  # the process's own config is left as it was
        assert _scheduler_periods(cluster) == (1000, 2000)  # Dask: 20 ms, 500 ms
        expected = {"profile": False, "tick_ms": 1000, "monitor_ms": 2000}
        assert list(client.run(_worker_state).values()) == [expected]
        client.restart(timeout=60)  # each nanny starts its worker process anew
        assert list(client.run(_worker_state).values()) == [expected]
    finally:
        _shutdown(client, cluster)


def test_a_users_dask_settings_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiler asked for by a DASK_* variable, a tick set in the process: both kept; the
    setting the user left alone (the system monitor) is still featurecache's."""
    monkeypatch.setenv("DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED", "True")
    with dask.config.set({TICK: "100ms"}):
        client, cluster = _make_client(1, None)
    try:
        assert _scheduler_periods(cluster) == (100, 2000)
        assert list(client.run(_worker_state).values()) == [
            {"profile": True, "tick_ms": 100, "monitor_ms": 2000}
        ]
    finally:
        _shutdown(client, cluster)


def test_a_setting_in_a_dask_config_file_is_kept(tmp_path: Any) -> None:
    """A user's Dask config file (here in the directory DASK_CONFIG names, which Dask reads at
    import like ~/.config/dask) keeps its tick, even set to Dask's own default (20 ms), which only
    the file shows was chosen; the keys the file leaves alone are featurecache's."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "mine.yaml").write_text("distributed:\n  admin:\n    tick:\n      interval: 20ms\n")
    code = "import json; from featurecache.build.run import embedded_dask_config as e; print(json.dumps(e()))"
    env = {**os.environ, "DASK_CONFIG": str(tmp_path)}
    env = {k: v for k, v in env.items() if not k.startswith("DASK_") or k == "DASK_CONFIG"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "distributed.worker.profile.enabled": False,
        "distributed.admin.system-monitor.interval": "2s",
    }
