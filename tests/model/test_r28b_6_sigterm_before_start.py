"""A SIGTERM while ``featurecache train`` sets up (here: its first call to a lookup service that
accepts the connection and never answers, within ``--service-wait``) ends it with exit status 143 and
the line "stopped by SIGTERM before the first step" (review R28b s46 #6: no line and no log; a SLURM
job killed during a long wait left no trace of why). A real CLI process."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

from tests.model.test_train_guards import _cli


def test_sigterm_during_the_service_wait_says_so_and_exits_143(tmp_path: Path) -> None:
    log = tmp_path / "log.json"
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(120)
        port = server.getsockname()[1]
        proc = _cli("--url", f"http://127.0.0.1:{port}", "--service-wait", "60", "--device", "cpu", "--crop", "16",
                    "--steps", "5", "--log", str(log), stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        try:
            conn, _ = server.accept()  # the run is in its set-up, waiting for the service's answer
            with conn:
                proc.send_signal(signal.SIGTERM)
                _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == -signal.SIGTERM, err[-3000:]
    assert "stopped by SIGTERM before the first step" in " ".join(err.split()), err[-3000:]
    assert "Traceback" not in err
    assert not log.exists()
