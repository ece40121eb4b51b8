"""``--scheduler`` at an address no connection can be opened to (a port nothing listens on, a host
name that does not resolve) ends the build with one line naming the address and the reason, exit 3
(README: unreachable scheduler), nothing written. Before, distributed's connect retried for its
whole 15 s and the line said "Timed out trying to connect ... after 15 s", also for a refused port
or an unknown host. A reachable scheduler (a real LocalCluster's) still runs the build."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import featurecache
from services.lookup.server import free_port
from tests.conftest import REPO, SAMPLES


def _closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (a connection is refused): ``free_port``'s, outside
    the kernel's ephemeral range, so no Dask process of a build in the other test worker (which binds
    port 0) can be handed it before this test's build connects to it (review R3 s33)."""
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:  # really refused
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    return port


def test_an_unreachable_scheduler_address_is_one_line_naming_it(tmp_path: Path) -> None:
    addresses = {
        "refused": f"tcp://127.0.0.1:{_closed_port()}",
        # .invalid never resolves (RFC 2606)
        "unknown host": "tcp://no-such-scheduler.invalid:8786",
    }
    procs = {}
    for name, address in addresses.items():
        out = tmp_path / f"store-{name.replace(' ', '-')}"
        args = ["build", "--pdb-dir", str(SAMPLES / "structures"), "--out", str(out), "--scheduler", address,
                "--no-progress"]  # fmt: skip
        procs[name] = (out, subprocess.Popen(
            [sys.executable, "-m", "featurecache.cli", *args], cwd=tmp_path, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "250"},
        ))  # fmt: skip
    said = {}
    for name, (out, proc) in procs.items():
        _stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 3, (name, stderr[-3000:])
        assert "Traceback" not in stderr, stderr[-3000:]
        (line,) = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
        assert f"cannot connect to the Dask scheduler at {addresses[name]}: " in line, line
        assert "Timed out" not in line and "after 15 s" not in line, line
        assert not out.exists()
        said[name] = line
    assert "connection refused" in said["refused"], said
    assert "no-such-scheduler.invalid does not resolve" in said["unknown host"], said


def test_a_reachable_scheduler_still_builds(tmp_path: Path) -> None:
    """A real LocalCluster (tests/clusters.py, started as an embedded build's) given by address."""
    from featurecache.build.run import run_build
    from tests.clusters import shared_scheduler

    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    address = shared_scheduler(1)
    assert address.startswith("tls://127.0.0.1:")
    summary = run_build(pdb_dir=pdb, out=tmp_path / "s", scheduler=address, progress=False)
    assert (summary.n_built, summary.n_failed, summary.workers) == (1, 0, 1)
    assert featurecache.open_store(tmp_path / "s").ids == ["1psm"]
