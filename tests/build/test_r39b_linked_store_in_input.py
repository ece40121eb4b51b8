"""Review R39b s50 #1: R39a's stricter "another store inside the inputs" test refused links (the
store's ``zarr.json`` read only when not a link, ``index/`` and ``parts/`` only as real
directories), so a store mirrored with ``cp -rs`` (every file a link; ``verify`` says it is fine)
was walked as input again: every file of it a failed input and exit 1 on every build. Links are
judged by what they lead to now; a link to a FIFO or a device still is no store and is never
opened (tests/build/test_r39a_store_marker_unread.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from featurecache.store.reader import open_store
from tests.conftest import SAMPLES, build_store


def test_a_store_mirrored_with_links_inside_the_inputs_is_not_read(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("102m.cif", "1A8O.pdb"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    real = tmp_path / "storeA"
    assert build_store(real, pdb, workers=1).n_failed == 0
    mirror = pdb / "mirror"
    subprocess.run(["cp", "-rs", str(real), str(mirror)], check=True)  # every file a symlink to storeA's
    assert (mirror / "zarr.json").is_symlink()

    out = tmp_path / "storeB"
    summary = build_store(out, pdb, workers=1)
    assert open_store(out).failures.column("path").to_pylist() == []
    assert summary.n_failed == 0
    assert sorted(open_store(out).entries.column("id").to_pylist()) == ["102m", "1A8O"]


def test_links_to_the_store_directories_count_too(tmp_path: Path) -> None:
    """A store whose ``index/`` and ``parts/`` are links to directories (moved to another disk and
    linked back) is a store."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    inner = pdb / "storeA"
    assert build_store(inner, pdb, workers=1).n_failed == 0
    elsewhere = tmp_path / "disk2"
    elsewhere.mkdir()
    for sub in ("index", "parts"):
        shutil.move(str(inner / sub), str(elsewhere / sub))
        (inner / sub).symlink_to(elsewhere / sub)

    out = tmp_path / "storeB"
    summary = build_store(out, pdb, workers=1)
    assert open_store(out).failures.column("path").to_pylist() == []
    assert summary.n_failed == 0
