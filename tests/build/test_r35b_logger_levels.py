"""Review R35b s49 #5: ``run_build()`` leaves the levels of Dask's loggers as the program set them.

The build quiets the distributed, tornado and bokeh loggers to keep its output to its progress and
summary; the levels it set stayed for the rest of the process: a program's INFO on ``distributed``
was lost, and ``tornado`` went from distributed's CRITICAL down to WARNING. Now they are put back
when run_build returns, and when it raises.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from featurecache.build import run
from tests.conftest import SAMPLES

#: the loggers the build quiets, and levels a program might have given them
PROGRAM_LEVELS = {"distributed": logging.INFO, "distributed.scheduler": logging.DEBUG, "distributed.nanny": 0,
                  "distributed.worker": logging.INFO, "distributed.core": 0, "distributed.http.proxy": 0,
                  "distributed.utils": logging.ERROR, "distributed.client": logging.INFO, "bokeh": 0,
                  "bokeh.server.util": logging.INFO, "tornado": logging.CRITICAL}  # fmt: skip


@pytest.fixture
def program_levels() -> Iterator[dict[str, int]]:
    old = {name: logging.getLogger(name).level for name in PROGRAM_LEVELS}
    for name, level in PROGRAM_LEVELS.items():
        logging.getLogger(name).setLevel(level)
    try:
        yield PROGRAM_LEVELS
    finally:
        for name, level in old.items():
            logging.getLogger(name).setLevel(level)


def _levels() -> dict[str, int]:
    return {name: logging.getLogger(name).level for name in PROGRAM_LEVELS}


def _pdb(tmp_path: Path) -> Path:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    return pdb


def test_the_levels_are_put_back_after_a_build(tmp_path: Path, program_levels: dict[str, int]) -> None:
    summary = run.run_build(pdb_dir=_pdb(tmp_path), out=tmp_path / "store", ccd=None, workers=1, progress=False,
                            dashboard=False)  # fmt: skip
    assert summary.n_built == 1
    assert _levels() == program_levels


def test_the_levels_are_put_back_after_a_build_that_raised(
    tmp_path: Path, program_levels: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(client: Any, *args: Any, **kwargs: Any) -> None:
        assert logging.getLogger("tornado").level == logging.WARNING  # the build's, meanwhile
        raise RuntimeError("stopped from inside")

    monkeypatch.setattr(run, "_check_worker_versions", fail)
    with pytest.raises(RuntimeError, match="stopped from inside"):
        run.run_build(pdb_dir=_pdb(tmp_path), out=tmp_path / "store", ccd=None, workers=1, progress=False,
                      dashboard=False)  # fmt: skip
    assert _levels() == program_levels


def test_the_levels_are_put_back_after_two_ctrl_c_during_a_finished_builds_shutdown(
    tmp_path: Path, program_levels: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R36c s49 #2: the second press's handler quieted the loggers again inside the shutdown's
    own quiet, recorded CRITICAL+1 as the levels to put back, and left every Dask logger and
    asyncio silenced for the rest of the process."""
    from tests.build.test_r35b_second_interrupt import InterruptOnClose

    plugin = InterruptOnClose(times=2)
    real = run._check_worker_versions

    def plugin_once_up(client: Any, *args: Any, **kwargs: Any) -> None:
        client.cluster.scheduler.add_plugin(plugin, name="r36c-interrupt-twice-on-close")
        real(client, *args, **kwargs)

    monkeypatch.setattr(run, "_check_worker_versions", plugin_once_up)
    asyncio_logger = logging.getLogger("asyncio")
    monkeypatch.setattr(asyncio_logger, "level", logging.INFO)
    with pytest.raises(KeyboardInterrupt):
        run.run_build(pdb_dir=_pdb(tmp_path), out=tmp_path / "store", ccd=None, workers=1, progress=False,
                      dashboard=False)  # fmt: skip
    assert plugin.sent.is_set()
    assert _levels() == program_levels
    assert asyncio_logger.level == logging.INFO
