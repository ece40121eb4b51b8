"""Review R35b s49 #1: ``run_build()`` from Python refuses to leave out a setting its store records.

Only ``featurecache build`` refused a build that leaves out ``--ccd`` (``--msa-depth``,
``--keep-cryst-aids``) over a store built with it (review R15 s40 #2); ``run_build(...)`` without
``ccd=`` rebuilt the store's entries without CCD definitions and replaced the served ones, with
nothing but a logged warning. Now run_build itself refuses (a UsageError naming each argument and
its option; nothing written), and None / an explicit ``BuildConfig`` field still opt out.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import featurecache
from featurecache.build.config import BuildConfig, SettingsLeftOut
from featurecache.build.run import run_build
from featurecache.errors import UsageError
from tests.clusters import shared_scheduler
from tests.conftest import SAMPLES, store_snapshot


def _hashes(store: Path) -> dict[str, str]:
    t = featurecache.open_store(store).entries
    return dict(zip(t.column("id").to_pylist(), t.column("content_hash").to_pylist(), strict=True))


def test_run_build_leaving_out_recorded_settings_is_refused(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)  # heme (a CCD component) and SO4 (an aid)
    store = tmp_path / "store"
    common = {"pdb_dir": pdb, "out": store, "msa_dir": SAMPLES / "msas", "scheduler": shared_scheduler(1),
              "progress": False}  # fmt: skip
    recorded = BuildConfig(msa_depth_cap=16, keep_crystallization_aids=True)
    first = run_build(**common, ccd=SAMPLES / "ccd", config=recorded)
    assert first.n_built == 1 and first.n_failed == 0
    before, hashes = store_snapshot(store), _hashes(store)

    # the reviewer's repro: every recorded setting left out
    with pytest.raises(UsageError) as refused:
        run_build(**common)
    message = str(refused.value)
    assert isinstance(refused.value, SettingsLeftOut)
    assert (
        f"{store} records build settings this build leaves out" in message
        and "nothing was written" in message
    )
    assert (
        f"built with --ccd {(SAMPLES / 'ccd').resolve()}" in message or f"--ccd {SAMPLES / 'ccd'}" in message
    )
    assert "give ccd=… (--ccd)" in message and "ccd=None (--no-ccd)" in message, message
    assert "BuildConfig(msa_depth_cap=16) (--msa-depth 16)" in message, message
    assert "BuildConfig(keep_crystallization_aids=True) (--keep-cryst-aids)" in message, message
    assert store_snapshot(store) == before and _hashes(store) == hashes

    # one left out (a config given for another setting leaves its recorded ones out) is enough
    with pytest.raises(SettingsLeftOut) as one:
        run_build(
            **common, ccd=SAMPLES / "ccd", config=BuildConfig(msa_depth_cap=16, conformer_timeout_s=60.0)
        )
    assert "keep_crystallization_aids" in str(one.value) and "ccd=" not in str(one.value)
    assert "msa_depth_cap" not in str(one.value)
    assert store_snapshot(store) == before

    # given: nothing rebuilt
    again = run_build(**common, ccd=SAMPLES / "ccd", config=recorded)
    assert again.n_skipped == 1 and again.n_built == 0 and _hashes(store) == hashes

    # the explicit opt-outs: no CCD (ccd=None, --no-ccd), the aids dropped, the default depth
    dropped = run_build(
        **common, ccd=None, config=BuildConfig(msa_depth_cap=16384, keep_crystallization_aids=False)
    )
    assert dropped.n_rebuilt == 1 and dropped.n_failed == 0
    assert _hashes(store).keys() == hashes.keys() and _hashes(store) != hashes
    # and now the store records the defaults: nothing left out to refuse
    assert run_build(**common).n_skipped == 1
