"""Review R36c s49 #1: a Ctrl-C during the shutdown of a finished build is raised after it also when
run_build is called inside the program's own ``except`` block.

The shutdown read the ambient ``sys.exc_info()`` to tell whether an exception had stopped the
build: inside a caller's ``except`` clause that is the caller's handled exception, so the deferred
SIGINT was dropped (run_build returned as if Ctrl-C had not been pressed), and inside ``except
KeyboardInterrupt`` the workers were not silenced before the close. The build now passes its own
exception to the shutdown.

The SIGINT is sent by a real scheduler plugin of the embedded cluster when the cluster's close
removes its worker (as in test_r35b_second_interrupt).
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from featurecache.build import run
from tests.build.test_r35b_second_interrupt import InterruptOnClose
from tests.conftest import SAMPLES


@pytest.mark.parametrize(
    "handled", [FileNotFoundError, KeyboardInterrupt], ids=["in_except", "in_except_kbi"]
)
def test_a_ctrl_c_during_a_finished_builds_shutdown_inside_an_except_block_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handled: type[BaseException]
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    plugin = InterruptOnClose()
    real_check, real_quiet = run._check_worker_versions, run._quiet_workers_now
    quieted: list[bool] = []

    def plugin_once_up(client: Any, *args: Any, **kwargs: Any) -> None:
        client.cluster.scheduler.add_plugin(plugin, name="r36c-interrupt-on-close")
        real_check(client, *args, **kwargs)

    def quiet_workers_now(client: Any, *args: Any, **kwargs: Any) -> None:
        quieted.append(True)
        real_quiet(client, *args, **kwargs)

    monkeypatch.setattr(run, "_check_worker_versions", plugin_once_up)
    monkeypatch.setattr(run, "_quiet_workers_now", quiet_workers_now)
    with pytest.raises(KeyboardInterrupt):
        try:
            raise handled("the program's own, handled before the build (e.g. a cached store missing)")
        except handled:
            run.run_build(
                pdb_dir=pdb, out=tmp_path / "store", ccd=None, workers=1, progress=False, dashboard=False
            )
    assert plugin.sent.is_set()  # the Ctrl-C came during the close of the finished build
    assert quieted  # a finished build's workers are silenced before the close, whatever the caller handles
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
