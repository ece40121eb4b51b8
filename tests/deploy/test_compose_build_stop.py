"""compose.yaml's ``build`` service runs ``featurecache build`` under ``/bin/sh -c`` (to take exit
status 1, "some inputs failed", as done). ``docker stop`` (or an init forwarding it) sends SIGTERM
to that shell only. Review R1 s27 #3: the shell died of it and the build ran on, orphaned, until
the container was killed, so its clean SIGTERM path (finished parts kept, index rebuilt, exit 143)
never ran. Here the service's own command text (Compose's ``$$`` unescaped, the scheduler address,
/data and /store pointed at a real Dask cluster and real inputs) runs under the real /bin/sh
(dash on Debian, as in the image), and SIGTERM goes to the shell alone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.build.test_cluster import _one_worker_cluster
from tests.conftest import REPO, STRUCTURES

DEPLOY = REPO / "deploy"


def _build_command(address: str, data: Path, store: Path) -> str:
    doc: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    build = doc["services"]["build"]
    assert build["entrypoint"] == ["/bin/sh", "-c"]
    (text,) = build["command"]
    text = text.replace("$$", "$")  # Compose's escape of a literal $
    for old, new in (("tcp://scheduler:8786", address), ("/data", str(data)), ("/store", str(store))):
        assert old in text, old
        text = text.replace(old, new)
    return text


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_sigterm_to_the_shell_stops_the_build_cleanly(tmp_path: Path) -> None:
    if not Path("/bin/sh").exists():
        pytest.skip("no /bin/sh")
    data = tmp_path / "data"
    (data / "pdb").mkdir(parents=True)
    for f in ("1ffk.cif.gz", "102m.cif", "1A8O.cif", "2q2k.cif", "3u8v.cif", "4zey.cif"):
        shutil.copy(STRUCTURES / f, data / "pdb" / f)
    store = tmp_path / "store"
    with _one_worker_cluster(tmp_path) as cluster:
        # one entry per part: parts are finished (and kept) while others are still being built
        cmd = _build_command(cluster.address, data, store).replace(
            "--no-progress", "--no-progress --part-size 1"
        )
        env = dict(
            os.environ, PYTHONPATH=str(REPO), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}"
        )
        sh = subprocess.Popen(["/bin/sh", "-c", cmd], env=env, cwd=tmp_path, start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            build_pid = None
            for _ in range(600):  # the build started and wrote its first part
                kids = subprocess.run(
                    ["pgrep", "-P", str(sh.pid)], capture_output=True, text=True
                ).stdout.split()
                if kids:
                    build_pid = int(kids[0])
                if (build_pid and any((store / "parts").glob("s-*"))) or sh.poll() is not None:
                    break
                time.sleep(0.1)
            assert sh.poll() is None and build_pid is not None, "the build ended before it could be stopped"
            os.kill(sh.pid, signal.SIGTERM)  # the shell only, as docker stop's init does
            _, err = sh.communicate(timeout=120)
        finally:
            if sh.poll() is None:
                os.killpg(sh.pid, signal.SIGKILL)
                sh.wait()
    assert not _alive(build_pid), "the build runs on after its shell ended"
    assert sh.returncode == 143, err[-3000:]  # the build's own SIGTERM status, passed on by the shell
    assert "interrupted" in err, err[-3000:]
    assert (store / "index" / "entries.arrow").is_file()  # the index rebuilt from the finished parts
