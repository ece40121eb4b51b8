"""Review R35b s49 #7: a second Ctrl-C during an interrupted build's cleanup no longer cuts the
cluster's close short.

The KeyboardInterrupt of a second SIGINT escaped from ``cluster.close()`` half done (``_close``
caught TimeoutError/OSError/RuntimeError only): a traceback through Dask's internals, and Dask's
IO-loop thread and its sockets left in the process, one more per occurrence. Now the shutdown runs
with SIGINT and SIGTERM deferred (it is bounded by its own timeouts): the second is dropped after
an interrupt (the first's KeyboardInterrupt goes on), and raised after the shutdown of a build that
had finished.

Deterministic: the first SIGINT is raised in the driver once the cluster is up (a wrapper of the
build's worker check); the second is sent by a real scheduler plugin of the embedded cluster when
the cluster's close removes its worker.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
from distributed.diagnostics.plugin import SchedulerPlugin

from featurecache.build import run
from tests.conftest import SAMPLES


class InterruptOnClose(SchedulerPlugin):
    """Sends this process ``times`` SIGINTs when the scheduler loses its first worker (the
    cluster's close), each after ``handled`` (when given) says the one before was handled."""

    def __init__(self, times: int = 1, handled: threading.Event | None = None) -> None:
        self.sent = threading.Event()
        self.times = times
        self.handled = handled

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        if not self.sent.is_set():
            self.sent.set()
            for i in range(self.times):
                if self.handled is not None:
                    self.handled.clear()
                os.kill(os.getpid(), signal.SIGINT)
                if i + 1 < self.times:
                    # each its own signal, not merged into one pending: CPython keeps one flag per
                    # signal, so the next is sent once the main thread ran the handler for this one
                    # (review R42a s52 #4: a 0.05 s sleep merged them when the main thread was late)
                    assert self.handled is not None and self.handled.wait(30), "the SIGINT was not handled"


def _threads_settled(before: set[int], timeout: float = 10.0) -> list[str]:
    """The Dask IO-loop threads started since ``before`` still alive after ``timeout`` at most."""
    deadline = time.monotonic() + timeout
    while True:
        extra = [t.name for t in threading.enumerate() if t.ident not in before and t.name == "IO loop"]
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(0.1)


@pytest.mark.parametrize("finished", [False, True], ids=["interrupted", "finished"])
def test_a_second_interrupt_during_the_shutdown_waits_for_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, finished: bool
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    plugin = InterruptOnClose()
    real = run._check_worker_versions

    def interrupted_once_up(client: Any, *args: Any, **kwargs: Any) -> None:
        client.cluster.scheduler.add_plugin(plugin, name="r35b-interrupt-on-close")
        real(client, *args, **kwargs)
        if not finished:
            signal.raise_signal(signal.SIGINT)  # the first Ctrl-C

    monkeypatch.setattr(run, "_check_worker_versions", interrupted_once_up)
    before = {t.ident for t in threading.enumerate() if t.ident is not None}
    with pytest.raises(KeyboardInterrupt) as info:
        run.run_build(
            pdb_dir=pdb, out=tmp_path / "store", ccd=None, workers=1, progress=False, dashboard=False
        )
    assert plugin.sent.is_set()  # the second (or, for a finished build, the only) one came during the close
    # the shutdown ran to its end: raised from the deferral after it, not from inside Dask's close
    frames = [f.f_code.co_name for f, _ in traceback.walk_tb(info.value.__traceback__)]
    assert "close" not in frames and "sync" not in frames, frames
    if not finished:
        assert info.value.__context__ is None, repr(info.value.__context__)  # one KeyboardInterrupt, not two
    # Dask's IO-loop thread of the build's client and cluster is gone (zarr's and asyncio's pools,
    # which the finished build started, live as long as the process)
    assert "IO loop" not in _threads_settled(before)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_pressed_once_more_during_the_shutdown_it_stops_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A third Ctrl-C (two during the shutdown of an interrupted build) is raised at once, inside
    the shutdown: a cleanup that hangs can still be stopped. The handler is put back all the same."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    # the handler that interrupts_deferred installs (its ``note``) says when it ran
    handled = threading.Event()
    real_signal = signal.signal

    def signal_spied(sig: int, handler: Any) -> Any:
        if getattr(handler, "__qualname__", "").startswith("interrupts_deferred."):
            note = handler

            def handler(signum: int, frame: Any) -> Any:
                try:
                    return note(signum, frame)
                finally:
                    handled.set()

        return real_signal(sig, handler)

    monkeypatch.setattr(signal, "signal", signal_spied)
    plugin = InterruptOnClose(times=2, handled=handled)
    real = run._check_worker_versions

    def interrupted_once_up(client: Any, *args: Any, **kwargs: Any) -> None:
        client.cluster.scheduler.add_plugin(plugin, name="r35b-interrupt-on-close")
        real(client, *args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # the first Ctrl-C

    monkeypatch.setattr(run, "_check_worker_versions", interrupted_once_up)
    with pytest.raises(KeyboardInterrupt) as info:
        run.run_build(
            pdb_dir=pdb, out=tmp_path / "store", ccd=None, workers=1, progress=False, dashboard=False
        )
    assert plugin.sent.is_set()
    frames = [f.f_code.co_name for f, _ in traceback.walk_tb(info.value.__traceback__)]
    assert "note" in frames and "_shutdown" in frames, (
        frames
    )  # raised by the deferral's handler, mid-shutdown
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
