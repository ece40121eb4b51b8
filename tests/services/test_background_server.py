"""The helpers that start servers for tests and benchmarks: ``free_port`` and ``background_server``.

CI of dd1f49b failed twice on one race: ``free_port`` handed out a port the kernel had picked
(bind to port 0), a Dask process of a build running in the other test worker was given the same port
before the server bound it, and the server's readiness probes ("GET /v1/ready") went to Dask, whose
traceback then showed in that build's output."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from services.lookup.server import background_server, free_port


def _kernel_ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_free_port_is_outside_the_range_the_kernel_hands_out() -> None:
    """The ports the kernel gives to port-0 binds and outgoing connections (Dask's listeners, any
    client socket) can be taken between free_port's answer and the server's bind; others cannot."""
    low, high = _kernel_ephemeral_range()
    if low - 1024 < 500 and 65535 - high < 500:
        pytest.skip(f"this machine's ephemeral range {low}-{high} leaves no room outside it")
    ports = [free_port() for _ in range(50)]
    inside = [p for p in ports if low <= p <= high]
    assert not inside, f"ports inside the ephemeral range {low}-{high}: {inside}"
    assert all(1024 <= p <= 65535 for p in ports), ports
    for port in ports[:5]:  # and free: this process can bind it
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))


def test_a_taken_port_is_never_probed_and_the_child_s_error_is_raised(sample_store: Path) -> None:
    """A port another process listens on: background_server raises the server's "address already in
    use" and sends that process nothing (it used to send it readiness probes for ``timeout`` s)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("127.0.0.1", 0))
        other.listen(16)
        other.setblocking(False)
        port = other.getsockname()[1]
        with (
            pytest.raises(RuntimeError, match="address already in use") as info,
            background_server(sample_store, port=port, timeout=60),
        ):
            pass
        assert f"port {port}" in str(info.value)
        with pytest.raises(BlockingIOError):  # no connection waits in its backlog
            other.accept()
