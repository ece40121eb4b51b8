"""Review R35b s49 #2: the build's Dask client never becomes the process's default client.

``Client(cluster)`` (Dask's default ``set_as_default=True``) made the build's embedded cluster, or
its external scheduler's client, the process's default scheduler while the build ran: a program's
own ``dask.compute`` from another thread ran in the build's worker processes. Now the build's client
is never the default; the caller's client stays it before, during and after the build, and the
stages still run (each takes the build's client and its loop).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from featurecache.build import run
from tests.clusters import shared_scheduler
from tests.conftest import SAMPLES


def _where() -> tuple[int, str]:
    from distributed import get_worker

    return os.getpid(), get_worker().address


@pytest.fixture
def user_client() -> Iterator[Any]:
    """The program's own Dask client (threads in this process), its default."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None)
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.mark.parametrize("external", [False, True], ids=["embedded", "scheduler"])
def test_the_callers_client_stays_the_default(
    tmp_path: Path, user_client: Any, monkeypatch: pytest.MonkeyPatch, external: bool
) -> None:
    import dask
    from distributed import default_client

    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    seen: dict[str, Any] = {}
    real = run._check_worker_versions

    def sample_then_check(client: Any, *args: Any, **kwargs: Any) -> Any:
        # the build's client and cluster are up: another thread of the program uses Dask meanwhile
        def program() -> None:
            seen["default"] = default_client()
            seen["ran"] = dask.delayed(_where)().compute()

        thread = threading.Thread(target=program)
        thread.start()
        thread.join(60)
        seen["build"] = client
        return real(client, *args, **kwargs)

    monkeypatch.setattr(run, "_check_worker_versions", sample_then_check)
    assert default_client() is user_client
    where = {"scheduler": shared_scheduler(1)} if external else {"workers": 1, "dashboard": False}
    summary = run.run_build(pdb_dir=pdb, out=tmp_path / "store", progress=False, **where)  # type: ignore[arg-type]
    assert summary.n_built == 1 and summary.n_failed == 0, summary.failures
    assert seen["build"] is not user_client
    assert seen["default"] is user_client, f"during the build the default client was {seen['default']}"
    pid, address = seen["ran"]
    assert pid == os.getpid() and address.startswith("inproc://"), seen["ran"]  # the program's own cluster
    assert default_client() is user_client
