"""Review R26b s44 #2: after the input directories were renamed (or moved), files removed from them
were never reported as sources gone, and ``prune --sources-gone`` could not remove their entries
and MSAs: every part recorded the old paths (a part records its directory only when written), and
the build, the prune and the MSA stage each counted only parts recording the directory given. A
directory that no longer exists, whose stored rows this directory's files match, is this one now
(``discover.directory_parts``); a directory that still exists keeps its own.

Real builds (1 worker) of the sample 1psm and 2q2k structures with their real OpenFold MSAs."""

from __future__ import annotations

import shutil
from pathlib import Path

import featurecache
from featurecache.store.prune import prune_store
from tests.conftest import SAMPLES, build_store

OPENFOLD = SAMPLES / "msas" / "openfold"


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    for entry in ("1psm_A", "2q2k_A"):
        (msa / entry).mkdir(parents=True)
        shutil.copy(OPENFOLD / entry / "bfd_uniclust_hits.a3m", msa / entry)
    return pdb, msa


def test_removed_files_of_renamed_directories_are_gone_and_prunable(tmp_path: Path) -> None:
    pdb, msa = _inputs(tmp_path)
    store = tmp_path / "store"
    first = build_store(store, pdb, workers=1, msa_dir=msa)
    assert first.n_failed == 0 and first.n_built == 2
    pdb2, msa2 = tmp_path / "pdb_renamed", tmp_path / "msa_renamed"
    pdb.rename(pdb2)
    msa.rename(msa2)
    (pdb2 / "2q2k.cif").unlink()
    shutil.rmtree(msa2 / "1psm_A")

    gone = build_store(store, pdb2, workers=1, msa_dir=msa2)
    assert (gone.n_built, gone.n_failed) == (0, 0)
    assert (gone.entries_gone, gone.n_msas_gone) == (["2q2k"], 1)

    dry = prune_store(store, dry_run=True, sources_gone=pdb2, msa_dir=msa2)
    assert (dry.entries, dry.msas) == (["2q2k"], ["1psm/A"])
    pruned = prune_store(store, sources_gone=pdb2, msa_dir=msa2)
    assert pruned.entries == ["2q2k"]
    assert featurecache.open_store(store).ids == ["1psm"]


def test_a_directory_that_still_exists_keeps_its_entries(tmp_path: Path) -> None:
    """A store extended from two directories with files of the same names: the second one's
    removals are not the first's, which still exists."""
    pdb, _msa = _inputs(tmp_path)
    store = tmp_path / "store"
    assert build_store(store, pdb, workers=1).n_built == 2
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", other)  # same name, same bytes: up to date
    (pdb / "2q2k.cif").unlink()
    extended = build_store(store, other, workers=1)
    assert (extended.n_built, extended.entries_gone) == (0, [])
    assert prune_store(store, dry_run=True, sources_gone=other).entries == []
