"""Stored entries and MSAs whose source files are gone: kept (README: "a stored entry (or MSA) whose
file is removed stays in the store"), and now said so. Before, a build after a structure file and
all of a sequence's MSA files were removed reported "MSAs up to date" and nothing else; now the
summary has a "sources gone" row and the build logs a warning naming the entries, and how to
remove them (``featurecache prune --sources-gone``: tests/store/test_prune_sources_gone.py); a plain
``featurecache prune`` does not (it deletes only parts no index row uses).

Real builds (1 worker) of the repo's sample 1psm and 2q2k structures with their real OpenFold MSAs."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

import featurecache
from featurecache.build.run import sources_gone_line
from featurecache.store.prune import prune_store
from tests.conftest import SAMPLES, build_store

OPENFOLD = SAMPLES / "msas" / "openfold"


def test_gone_sources_are_kept_and_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    msa = tmp_path / "msa"
    for entry in ("1psm_A", "2q2k_A"):
        (msa / entry).mkdir(parents=True)
        for name in ("bfd_uniclust_hits.a3m", "mgnify_hits.sto"):
            shutil.copy(OPENFOLD / entry / name, msa / entry)
    store = tmp_path / "s"
    first = build_store(store, pdb, workers=1, msa_dir=msa)
    assert first.n_failed == 0 and (first.entries_gone, first.n_msas_gone) == ([], 0)
    assert sources_gone_line(first) is None

    # one of 1psm's two files removed: its MSA is rebuilt from the other, nothing is gone
    (msa / "1psm_A" / "mgnify_hits.sto").unlink()
    partly = build_store(store, pdb, workers=1, msa_dir=msa)
    assert (partly.entries_gone, partly.n_msas_gone) == ([], 0)
    assert partly.stages["msa"]["MSAs written (from files / single sequence)"] == "1 / 0"

    # 2q2k's structure file and all of 1psm's MSA files removed
    (pdb / "2q2k.cif").unlink()
    shutil.rmtree(msa / "1psm_A")
    before = featurecache.open_store(store)
    msa_keys, ids = set(before.msas.column("key").to_pylist()), set(before.ids)
    with caplog.at_level(logging.WARNING, logger="featurecache.build.run"):
        gone = build_store(store, pdb, workers=1, msa_dir=msa)
    assert gone.n_failed == 0
    assert (gone.entries_gone, gone.n_msas_gone) == (["2q2k"], 1)
    line = sources_gone_line(gone)
    assert line is not None and line.startswith("1 stored entry and 1 stored MSA whose source files are gone")
    assert "to remove them: featurecache prune STORE --sources-gone PDB_DIR --msa-dir MSA_DIR" in line
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # the MSA is named by the chain that uses it, as the entry by its id (before: no name at all)
    said = "1 stored entry (2q2k) and 1 stored MSA (used by 1psm/A) whose source files are gone from"
    assert any(said in w for w in warned), warned
    # kept: nothing the store serves went away, and prune without --sources-gone leaves them too
    prune_store(store)
    after = featurecache.open_store(store)
    assert set(after.ids) == ids == {"1psm", "2q2k"}
    assert set(after.msas.column("key").to_pylist()) == msa_keys
    one = next(r for r in after.chains.to_pylist() if r["entry_id"] == "1psm" and r["auth_id"] == "A")
    assert one["msa_files"] == 1  # the MSA of its first a3m, stored by the second build

    # without --msa-dir, this build did not look at the MSA files: no MSA counted as gone
    without = build_store(store, pdb, workers=1)
    assert (without.entries_gone, without.n_msas_gone) == (["2q2k"], 0)
    # from another --pdb-dir (a store extended from two): the first directory's entries not counted
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", other)
    extended = build_store(store, other, workers=1)
    assert (extended.entries_gone, extended.n_msas_gone) == ([], 0)
