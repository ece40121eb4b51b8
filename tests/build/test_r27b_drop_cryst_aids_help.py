"""``--drop-cryst-aids``'s help says what it costs (review R27b s45 #6): it said "its X-ray entries are
rebuilt without them", but the setting is part of every entry's key, so a store built with
``--keep-cryst-aids`` has every entry rebuilt, the NMR and EM ones too. The build shows it; the help
now says so."""

from __future__ import annotations

import shutil
from pathlib import Path

from featurecache.build.config import BuildConfig
from tests.conftest import SAMPLES, build_store, cli_in_process


def test_drop_cryst_aids_rebuilds_every_entry_as_its_help_says(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    # 102m: X-ray, with SO4 (an aid); 1psm: solution NMR, no aid to drop
    for name in ("102m.cif", "1psm.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb / name)
    store = tmp_path / "store"
    build_store(store, pdb, workers=1, config=BuildConfig(keep_crystallization_aids=True))
    summary = build_store(store, pdb, workers=1, config=BuildConfig(keep_crystallization_aids=False))
    assert summary.n_rebuilt == 2  # both entries, the NMR one too

    run = cli_in_process("build", "--help", env={"COLUMNS": "200"})
    assert run.returncode == 0, run.stderr
    text = " ".join(run.stdout.replace("│", " ").split())
    assert "over a store built with --keep-cryst-aids: every entry is rebuilt" in text, text
    assert "its X-ray entries are rebuilt" not in text, text
