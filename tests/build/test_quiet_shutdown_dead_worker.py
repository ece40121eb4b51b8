"""A finished build's shutdown prints nothing of Dask's also when a worker is already gone (a final
review's finding on 826da27): ``_shutdown`` asked the workers to silence their loggers before it
silenced the driver's, so the scheduler in the driver's process logged the failed broadcast to the
dead worker ("ERROR broadcast to tcp://... failed: CommClosedError"). Real LocalCluster (the
build's own ``_make_client`` / ``_shutdown``) in a process of its own, one worker SIGKILLed right
before the shutdown; Dask's own log handler writes each record with its logger's name."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from featurecache.build.run import _make_client, _shutdown

    if __name__ == "__main__":
        client, cluster = _make_client(2, None)
        client.wait_for_workers(2)
        pids = sorted(client.run(os.getpid).values())
        assert len(pids) == 2, pids
        print("killing", pids[0], file=sys.stderr, flush=True)
        os.kill(pids[0], signal.SIGKILL)
        _shutdown(client, cluster)
        print("closed", flush=True)
    """
)


def test_the_shutdown_with_a_dead_worker_logs_nothing_of_dask(tmp_path: Path) -> None:
    path = tmp_path / "dead_worker_shutdown_script.py"
    path.write_text(SCRIPT)
    r = subprocess.run([sys.executable, str(path)], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and "closed" in r.stdout, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert lines and lines[0].startswith("killing "), r.stderr[-3000:]
    after = "\n".join(lines[1:])
    assert "distributed." not in after, after[-3000:]
    assert "CommClosedError" not in after and "ERROR" not in after, after[-3000:]
