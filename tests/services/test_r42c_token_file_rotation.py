"""Review R42c s52 #5: ``FEATURECACHE_AUTH_TOKEN_FILE`` rotated under ``featurecache serve --workers 2``.

Before, each worker read the file once when it started: after a rotation every worker kept the old
(revoked) token; a worker restarted by uvicorn (OOM, crash) took the new one while the others kept
the old, so clients got 200s and 401s in turn; a worker restarted while the file was empty (``echo
new > file`` truncates first) or gone could not start, which stopped serve. Now every worker serves
the token the file holds now (``services.lookup.settings.TokenFile``): a rotated file is taken on
the next request by all of them, a file that holds no token for a while keeps the last token in
service (never no auth), and a worker that starts meanwhile waits for the token.

Real ``featurecache serve`` processes on 127.0.0.1 over a copy of the sample store, real files, real
HTTP requests (each on its own connection, so that both workers answer). Convergence is polled
with a generous deadline; after it, every request must be answered as the file says."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from services.lookup.server import free_port, wait_ready

OLD = "old-token-0123456789abcdef"
NEW = "new-token-0123456789abcdef"
NEWER = "newer-token-0123456789abcd"
DEADLINE_S = 90
CHECKS = 40  # requests per token once converged (each on a new connection: both workers answer)


class Serve:
    """``featurecache serve STORE --workers 2`` with the token file ``token_file``; its stderr
    collected as it comes (``self.err``)."""

    def __init__(self, store: Path, token_file: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_AUTH_TOKEN")}
        env["FEATURECACHE_AUTH_TOKEN_FILE"] = str(token_file)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [
            sys.executable,
            "-m",
            "featurecache.cli",
            "serve",
            str(store),
            "--workers",
            "2",
            "--port",
            str(port),
        ]
        # its own session: stopped with its workers whatever happens
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def err(self) -> str:
        return "".join(self.lines)

    def workers(self) -> list[int]:
        """The uvicorn worker processes (serve's children that multiprocessing spawned)."""
        out = []
        for child in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split():
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                    out.append(int(child))
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=30)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "secrets" / "token"
    path.parent.mkdir()
    path.write_text(OLD + "\n")
    path.chmod(0o600)
    return path


#: no connection kept alive: each request on a new one, which either worker may accept
_HTTP = httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=0))


def _status(url: str, token: str) -> int:
    try:
        return _HTTP.get(f"{url}/v1/ready", headers={"authorization": f"Bearer {token}"}).status_code
    except httpx.TransportError as exc:  # a worker being replaced: the kernel handed it the connection
        return -1 if "reset" in str(exc).lower() else -2


def _statuses(url: str, good: str, bad: str, n: int = CHECKS) -> tuple[list[int], list[int]]:
    return [_status(url, good) for _ in range(n)], [_status(url, bad) for _ in range(n)]


def _converge(serve: Serve, good: str, bad: str) -> None:
    """Poll until ``good`` gets 200 and ``bad`` 401 on every request of a round (within DEADLINE_S),
    then check that every request of another round is answered so."""
    deadline = time.monotonic() + DEADLINE_S
    last: tuple[list[int], list[int]] = ([], [])
    while time.monotonic() < deadline:
        assert serve.proc.poll() is None, f"serve ended ({serve.proc.returncode}):\n{serve.err[-3000:]}"
        last = _statuses(serve.url, good, bad, n=10)
        if set(last[0]) == {200} and set(last[1]) == {401}:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"not converged after {DEADLINE_S} s: new token {last[0]}, old token {last[1]}")
    ok, refused = _statuses(serve.url, good, bad)
    assert set(ok) == {200}, ok
    assert set(refused) == {401}, refused


def _replace_atomically(path: Path, token: str) -> None:
    tmp = path.with_name(".token.tmp")
    tmp.write_text(token + "\n")
    tmp.chmod(0o600)
    os.replace(tmp, path)


def _wait_for_line(serve: Serve, text: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while text not in serve.err and serve.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert text in serve.err, f"serve (status {serve.proc.poll()}) did not log {text!r}:\n{serve.err[-3000:]}"


def test_an_atomic_rotation_reaches_every_worker_also_one_restarted(
    store_copy: Path, token_file: Path
) -> None:
    serve = Serve(store_copy, token_file)
    try:
        wait_ready(serve.url, timeout=DEADLINE_S, token=OLD)
        _converge(serve, OLD, NEW)
        _replace_atomically(token_file, NEW)  # before: the old token kept working on both workers
        _converge(serve, NEW, OLD)
        # the reviewer's case: one worker killed after the rotation (the OOM killer); before, its
        # replacement took NEW while the other kept OLD: 200 and 401 in turn for either token
        _replace_atomically(token_file, NEWER)
        workers = serve.workers()
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)
        deadline = time.monotonic() + DEADLINE_S
        while (workers[0] in serve.workers() or len(serve.workers()) < 2) and time.monotonic() < deadline:
            time.sleep(0.1)
        wait_ready(serve.url, timeout=DEADLINE_S, token=NEWER)
        _converge(serve, NEWER, NEW)
        assert set(_statuses(serve.url, NEWER, OLD)[1]) == {401}
    finally:
        serve.stop()
    for token in (OLD, NEW, NEWER):
        assert token not in serve.err


def test_a_rewrite_in_place_keeps_the_old_token_while_the_file_is_empty_or_gone(
    store_copy: Path, token_file: Path
) -> None:
    serve = Serve(store_copy, token_file)
    try:
        wait_ready(serve.url, timeout=DEADLINE_S, token=OLD)
        with token_file.open("w"):  # `echo NEW > file`, caught between its truncate and its write
            pass
        ok, refused = _statuses(serve.url, OLD, NEW)
        assert set(ok) == {200}, ok  # never: no auth, nor the file's "nothing" as the token
        assert set(refused) == {401}, refused
        assert _HTTP.get(f"{serve.url}/v1/ready").status_code == 401
        with token_file.open("w") as f:  # the write: same file, same inode
            f.write(NEW + "\n")
        _converge(serve, NEW, OLD)  # before: OLD kept working
        token_file.unlink()  # a rotation by `rm` then a new file
        ok, refused = _statuses(serve.url, NEW, OLD)
        assert set(ok) == {200}, ok
        assert set(refused) == {401}, refused
        token_file.write_text(NEWER)
        _converge(serve, NEWER, NEW)
    finally:
        serve.stop()
    assert "the token file is empty: still serving the token it held before" in serve.err, serve.err[-3000:]
    assert "No such file or directory): still serving the token it held before" in serve.err, serve.err[
        -3000:
    ]
    for token in (OLD, NEW, NEWER):
        assert token not in serve.err


def test_a_worker_restarted_while_the_file_is_empty_waits_for_the_token(
    store_copy: Path, token_file: Path
) -> None:
    serve = Serve(store_copy, token_file)
    try:
        wait_ready(serve.url, timeout=DEADLINE_S, token=OLD)
        workers = serve.workers()
        assert len(workers) == 2, workers
        with token_file.open("w"):  # emptied, as `echo NEW > file` does first
            pass
        os.kill(workers[0], signal.SIGKILL)
        # before: the replacement could not start (the token file is empty), which stopped serve
        _wait_for_line(serve, "waiting up to")
        assert serve.proc.poll() is None, serve.err[-3000:]
        token_file.write_text(NEW + "\n")
        _converge(serve, NEW, OLD)
        assert serve.proc.poll() is None, serve.err[-3000:]
    finally:
        serve.stop()
    for token in (OLD, NEW):
        assert token not in serve.err


def test_token_file_follows_the_file_and_warns_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """In one process: ``TokenFile.current`` is the file's token; a file with no valid token keeps
    the last good one, with one WARNING per state of the file (not one per request)."""
    from services.lookup.settings import TokenFile

    path = tmp_path / "token"
    path.write_text(OLD)
    path.chmod(0o600)
    file = TokenFile.read(path, wait=0)
    assert file.current() == OLD.encode()
    with caplog.at_level(logging.INFO, logger="services.lookup.settings"):
        for bad in ("", "\n", "two words", "caf\u00e9-token-0123456789"):
            path.write_text(bad)
            for _ in range(3):
                assert file.current() == OLD.encode()
        path.unlink()
        for _ in range(3):
            assert file.current() == OLD.encode()
        path.write_text(NEW)
        assert file.current() == NEW.encode()
    mine = [r for r in caplog.records if r.name == "services.lookup.settings"]
    warnings = [r.getMessage() for r in mine if r.levelno == logging.WARNING]
    # "" and "\n" both read as "empty"; each write is a change (size or mtime), so warned once each
    assert len(warnings) == 5, warnings
    assert all("still serving the token it held before" in w for w in warnings), warnings
    assert any("No such file" in w for w in warnings), warnings
    assert not any(t in w for w in warnings for t in (OLD, NEW, "two words"))
    infos = [r.getMessage() for r in mine if r.levelno == logging.INFO]
    assert any("the token file changed" in m for m in infos), infos
