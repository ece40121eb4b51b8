"""Helpers of the lookup-service tests: raw HTTP (no URL normalization), a fault-injecting TCP proxy,
an audit hook that records every file this process opens, Prometheus text parsing."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

# ------------------------------------------------------------------------------ opened files
_recording: list[str] | None = None
_hook_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _recording is not None and event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
        _recording.append(os.fsdecode(args[0]))


@contextmanager
def opened_files() -> Iterator[list[str]]:
    """Every path passed to ``open``/``os.open`` in this process while the block runs."""
    global _recording, _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)  # audit hooks cannot be removed; this one is idle outside the block
        _hook_installed = True
    _recording = []
    try:
        yield _recording
    finally:
        _recording = None


# ------------------------------------------------------------------------------ raw HTTP
def raw_request(
    url: str, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """Send ``target`` exactly as given (httpx would resolve ``..`` segments); returns status, body."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    for k, v in (headers or {}).items():
        head.append(f"{k}: {v}")
    if body or method in ("POST", "PUT"):
        head.append(f"Content-Length: {len(body)}")
    data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    raw = b"".join(chunks)
    status_line, _, rest = raw.partition(b"\r\n")
    status = int(status_line.split()[1])
    _, _, payload = rest.partition(b"\r\n\r\n")
    return status, payload


# ------------------------------------------------------------------------------ fault proxy
class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target``: the first ``drop`` connections are closed
    at once, the next ``fail`` requests get a 503, the rest are forwarded both ways."""

    def __init__(self, target: str, *, drop: int = 0, fail: int = 0) -> None:
        parts = urlsplit(target)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.drop, self.fail = drop, fail
        self.connections = 0
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        with suppress(OSError):
            socket.create_connection(self._sock.getsockname(), timeout=1).close()
        self._thread.join(timeout=5)
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop:
            conn, _ = self._sock.accept()
            if self._stop:
                conn.close()
                return
            with self._lock:
                n = self.connections
                self.connections += 1
            if n < self.drop:
                conn.close()
            elif n < self.drop + self.fail:
                threading.Thread(target=self._answer_503, args=(conn,), daemon=True).start()
            else:
                threading.Thread(target=self._forward, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer_503(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            body = b'{"detail":"injected failure"}'
            conn.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )

    def _forward(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(self.target, timeout=30)

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            with suppress(OSError):
                while data := src.recv(65536):
                    dst.sendall(data)
            with suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=pipe, args=(upstream, conn), daemon=True)
        t.start()
        pipe(conn, upstream)
        t.join(timeout=30)
        conn.close()
        upstream.close()


# ------------------------------------------------------------------------------ metrics
def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus exposition text → {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric_sum(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(
        v
        for (n, lab), v in samples.items()
        if n == name and all(dict(lab).get(k) == val for k, val in labels.items())
    )
