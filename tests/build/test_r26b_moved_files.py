"""Review R26b s44 #3: a file moved within ``--pdb-dir`` (a PDB divided layout, ``02/102m.cif``) or
recompressed (``.cif`` → ``.cif.gz``) became a second entry of a suffixed id (``102m.cif``) beside
the stale one: the stored id blocked it although its path was no longer an input. A stored id of
this directory whose path is gone now goes to the input a fresh build would give it, and the
build replaces that entry (logging "moved"); another directory's stored ids keep blocking."""

from __future__ import annotations

import gzip
import logging
import shutil
from pathlib import Path

import pytest

import featurecache
from featurecache.build.discover import assign_ids
from tests.conftest import SAMPLES, build_store


def test_a_released_id_goes_to_the_input_that_claims_it() -> None:
    stored = {"102m": "102m.cif", "1psm": "1psm.cif"}
    assert assign_ids(["02/102m.cif"], stored) == {"02/102m.cif": "102m.cif"}  # before: blocked
    assert assign_ids(["02/102m.cif"], stored, released={"102m"}) == {"02/102m.cif": "102m"}
    # a stored path still an input keeps its id, released or not
    both = assign_ids(["102m.cif", "102m.cif.gz"], stored, released={"102m"})
    assert both == {"102m.cif": "102m", "102m.cif.gz": "102m.cif.gz"}
    # an id not released (another directory's entry) still blocks
    assert assign_ids(["x/1psm.cif"], stored, released={"102m"}) == {"x/1psm.cif": "1psm.cif"}


def _ids_and_paths(store: Path) -> dict[str, str]:
    entries = featurecache.open_store(store).entries
    return dict(zip(entries.column("id").to_pylist(), entries.column("source_path").to_pylist(), strict=True))


def test_moved_and_recompressed_files_keep_their_ids(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("102m.cif", "1psm.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    store = tmp_path / "store"
    assert build_store(store, pdb, workers=1).n_built == 2

    (pdb / "02").mkdir()
    (pdb / "102m.cif").rename(pdb / "02" / "102m.cif")
    with (pdb / "1psm.cif.gz").open("wb") as f:
        f.write(gzip.compress((pdb / "1psm.cif").read_bytes()))
    (pdb / "1psm.cif").unlink()
    with caplog.at_level(logging.INFO, logger="featurecache.build.run"):
        moved = build_store(store, pdb, workers=1)
    assert (moved.n_built, moved.n_failed, moved.entries_gone) == (2, 0, [])
    assert sorted(moved.moved) == ["102m (102m.cif → 02/102m.cif)", "1psm (1psm.cif → 1psm.cif.gz)"]
    assert (moved.n_replaced, moved.n_rebuilt) == (0, 0)
    assert any(r.getMessage().startswith("moved: 2 entries (same id, new path") for r in caplog.records)
    assert _ids_and_paths(store) == {"102m": "02/102m.cif", "1psm": "1psm.cif.gz"}  # before: 4 entries

    again = build_store(store, pdb, workers=1)
    assert (again.n_built, again.n_skipped, again.moved) == (0, 2, [])

    # the directory renamed and the file moved back: its parts record the old path, which is gone
    pdb2 = tmp_path / "pdb2"
    pdb.rename(pdb2)
    (pdb2 / "02" / "102m.cif").rename(pdb2 / "102m.cif")
    back = build_store(store, pdb2, workers=1)
    assert (back.n_built, back.moved, back.entries_gone) == (1, ["102m (02/102m.cif → 102m.cif)"], [])
    assert _ids_and_paths(store) == {"102m": "102m.cif", "1psm": "1psm.cif.gz"}

    # another directory that still exists keeps its ids: a file of the same name there is a new entry
    other = tmp_path / "other"
    (other / "x").mkdir(parents=True)
    shutil.copy(SAMPLES / "structures" / "1psm.cif", other / "x")
    extended = build_store(store, other, workers=1)
    assert (extended.n_built, extended.moved) == (1, [])
    assert set(_ids_and_paths(store)) == {"102m", "1psm", "1psm.cif"}
