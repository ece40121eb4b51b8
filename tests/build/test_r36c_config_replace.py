"""Review R36c s49 #4: a copy of a BuildConfig with one knob changed keeps the recorded settings it
left out, so a build with it over a store that records other ones is refused, not silently rebuilt.

``dataclasses.replace`` passes every field to the constructor, so its copy counts them all as
given (documented: nothing in the class can tell that call apart); :meth:`BuildConfig.replace`
(and ``copy.replace`` on Python 3.13+, through ``__replace__``) keeps the config's own given set.
"""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path

import pytest

from featurecache.build.config import BuildConfig, SettingsLeftOut
from featurecache.build.run import run_build
from tests.clusters import shared_scheduler
from tests.conftest import SAMPLES, store_snapshot


def test_replace_keeps_the_given_settings() -> None:
    left_out = BuildConfig().replace(conformer_timeout_s=30)
    assert left_out == BuildConfig(conformer_timeout_s=30) and left_out.given == frozenset()
    depth = BuildConfig(msa_depth_cap=16).replace(conformer_timeout_s=30)
    assert depth.msa_depth_cap == 16 and depth.given == {"msa_depth_cap"}
    aids = BuildConfig(msa_depth_cap=16).replace(keep_crystallization_aids=False)
    assert aids.given == {"msa_depth_cap", "keep_crystallization_aids"}
    assert BuildConfig().replace(msa_depth_cap=64).given == {"msa_depth_cap"}
    with pytest.raises(TypeError, match="no field 'msa_depth'"):
        BuildConfig().replace(msa_depth=64)
    if sys.version_info >= (3, 13):  # copy.replace calls __replace__
        assert copy.replace(BuildConfig(), conformer_timeout_s=30).given == frozenset()  # type: ignore[attr-defined]
    assert BuildConfig().__replace__(conformer_timeout_s=30).given == frozenset()


def test_a_build_with_a_replaced_config_leaving_the_depth_out_is_refused(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    store = tmp_path / "store"
    common = {"pdb_dir": pdb, "out": store, "msa_dir": SAMPLES / "msas", "ccd": None,
              "scheduler": shared_scheduler(1), "progress": False}  # fmt: skip
    assert run_build(**common, config=BuildConfig(msa_depth_cap=16)).n_built == 1
    before = store_snapshot(store)
    with pytest.raises(SettingsLeftOut, match="msa_depth_cap=16"):
        run_build(**common, config=BuildConfig().replace(conformer_timeout_s=30))
    assert store_snapshot(store) == before
