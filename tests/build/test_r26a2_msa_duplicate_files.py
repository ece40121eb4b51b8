"""One more copy of an MSA file a sequence already uses rebuilds nothing (review R26a s44 #3).

A copy (same bytes, same database label) of a file a sequence's MSA already merges adds no row:
the merge keeps a row's first copy. Before, each use counted in the MSA's inputs key with its rank,
so one more copy (alphafold3-pytorch's per-entry ``<entry><chain>_protein.a3m``, OpenFold's per-chain
directories) changed the key and re-read, re-parsed and re-merged every file of the sequence. Now
such copies are one use: the key, and so the stored MSA, stay. An MSA an older build merged from
copies has another key: it is rebuilt once, to the same rows (only its sources, renumbered, lose the
copies). The build here is real (102m from the corpus, a3m files written in the test).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import featurecache
from featurecache.build import msa_stage
from featurecache.build.config import BuildConfig
from featurecache.build.run import run_build
from tests.build.test_msa_merge_order_key import _mutant, _sequence
from tests.clusters import shared_scheduler
from tests.conftest import STRUCTURES

#: the arrays that are the MSA's rows; ``source`` numbers the merged files (:func:`_msa`)
ROW_ARRAYS = ("residues", "deletions", "species", "profile", "deletion_mean")


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    """102m, a bfd file and an mgnify file of its sequence (distinct hits)."""
    seq = _sequence()
    r1, r2, r3 = (_mutant(seq, p, c) for p, c in ((5, "A"), (10, "A"), (20, "W")))
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", pdb / "102m.cif")
    (msa / "a").mkdir(parents=True)
    (msa / "a" / "bfd_uniclust_hits.a3m").write_text(f">query\n{seq}\n>r1 OX=9606\n{r1}\n>r2\n{r2}\n")
    (msa / "a" / "mgnify_hits.a3m").write_text(f">query\n{seq}\n>r3\n{r3}\n>r1\n{r1}\n")
    return pdb, msa


def _add_copy(msa: Path) -> None:
    """One more per-entry directory holding a link to the bfd file (same bytes, same label)."""
    (msa / "b").mkdir()
    (msa / "b" / "bfd_uniclust_hits.a3m").symlink_to(msa / "a" / "bfd_uniclust_hits.a3m")


def _build(store: Path, pdb: Path, msa: Path) -> Any:
    return run_build(pdb_dir=pdb, out=store, msa_dir=msa, scheduler=shared_scheduler(1), part_size=8,
                     config=BuildConfig(), progress=False)  # fmt: skip


def _msa(store: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The stored MSA of 102m/A: its arrays, and its index row."""
    reader = featurecache.open_store(store)
    try:
        chain = next(c for c in reader.entry_chains("102m") if c["label_id"] == "A")
        m = reader.msa(chain["msa_key"])
        arrays = {a: np.asarray(getattr(m, a)) for a in (*ROW_ARRAYS, "source")}
        msas = reader.table("msas").to_pylist()
        row = next(r for r in msas if r["key"] == chain["msa_key"])
        return arrays, row
    finally:
        reader.close()


def _written(summary: Any) -> str:
    return str(summary.stages["msa"]["MSAs written (from files / single sequence)"])


def test_an_added_copy_rebuilds_nothing_and_equals_a_clean_build(tmp_path: Path) -> None:
    pdb, msa = _inputs(tmp_path)
    store = tmp_path / "store"
    assert _written(_build(store, pdb, msa)) == "1 / 0"
    before, before_row = _msa(store)

    _add_copy(msa)
    summary = _build(store, pdb, msa)
    assert _written(summary) == "0 / 0", summary.stages["msa"]  # before: "1 / 0" (a re-merge)
    assert summary.stages["msa"]["MSAs up to date"] == 1
    after, after_row = _msa(store)
    assert after_row["inputs_key"] == before_row["inputs_key"]
    for name in (*ROW_ARRAYS, "source"):
        assert np.array_equal(after[name], before[name]), name

    fresh = tmp_path / "fresh"
    _build(fresh, pdb, msa)
    clean, clean_row = _msa(fresh)
    assert clean_row["inputs_key"] == after_row["inputs_key"]
    for name in (*ROW_ARRAYS, "source"):
        assert np.array_equal(after[name], clean[name]), name
    assert after_row["sources"] == clean_row["sources"]
    assert clean_row["n_files"] == 2  # the copy is not merged a second time
    assert after["residues"].shape[0] == 4  # query, r1, r2, r3


def test_an_msa_merged_from_copies_by_an_older_build_is_rebuilt_once_to_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upgrade: the older rule (every copy a use of its own) is the identity here."""
    pdb, msa = _inputs(tmp_path)
    _add_copy(msa)
    store = tmp_path / "store"
    with monkeypatch.context() as m:
        m.setattr(msa_stage, "_distinct_uses", list)
        _build(store, pdb, msa)
    old, old_row = _msa(store)
    assert old_row["n_files"] == 3  # a/bfd, b/bfd (the copy), a/mgnify

    summary = _build(store, pdb, msa)
    assert _written(summary) == "1 / 0"  # once
    new, new_row = _msa(store)
    for name in ROW_ARRAYS:
        assert np.array_equal(old[name], new[name]), name
    # the mgnify file was source 3 after the copy, it is 2 now
    assert sorted(set(old["source"].tolist())) == [0, 1, 3]
    assert np.array_equal(new["source"], np.where(old["source"] == 3, 2, old["source"]))
    assert new_row["n_files"] == 2

    assert _written(_build(store, pdb, msa)) == "0 / 0"  # and then up to date


def test_copies_of_a_file_are_parsed_once_in_a_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two paths with the same bytes used by two MSAs of one part: one read and parse."""
    seq = _sequence()
    text = f">query\n{seq}\n>r1\n{_mutant(seq, 5, 'A')}\n"
    (tmp_path / "x.a3m").write_text(text)
    (tmp_path / "y.a3m").write_text(text)
    sha = hashlib.sha256(text.encode()).hexdigest()
    parses: list[Path] = []
    real = msa_stage.parse_a3m

    def counting(path: Path) -> Any:
        parses.append(path)
        return real(path)

    monkeypatch.setattr(msa_stage, "parse_a3m", counting)
    cache: dict[str, list[Any]] = {}
    failed: set[str] = set()
    contents = msa_stage.MSAPartContents()
    for rel in ("x.a3m", "y.a3m"):
        use = msa_stage.MSAUse(rel, sha, len(text), 0, 0, False, rel)
        parsed = msa_stage._load(tmp_path, use, seq, 1, cache, contents, failed)
        assert parsed is not None and parsed.depth == 2
    assert parses == [tmp_path / "x.a3m"]
    assert not contents.failures
