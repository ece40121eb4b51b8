"""A store's MSA ``profile`` / ``deletion_mean`` cover the main MSA only (the UniProt pairing rows left
out, as AF3 does), and a store written before that change has its MSAs rebuilt by the next build
(``msa_stage.MSA_STAGE_VERSION`` is part of every MSA's inputs key): otherwise a re-run would keep
the old all-rows profile as "up to date".

Real builds (LocalCluster, 1 worker) of the sample 1psm structure with its real OpenFold MSA
directory (uniref90, bfd, mgnify, uniprot; hmm_output.sto template hits); expected values from the
files parsed in the test (:mod:`tests.featurize.test_msa_profile_main`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

import featurecache
from tests.conftest import SAMPLES, build_store, build_with_package, featurecache_at
from tests.featurize.test_msa_profile_main import _reference

#: the last commit whose MSA profile counted the pairing rows
BEFORE_MAIN_MSA_PROFILE = "20fc5c1"
CHAIN_DIR = SAMPLES / "msas" / "openfold" / "1psm_A"


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    msa = tmp_path / "msa"
    shutil.copytree(CHAIN_DIR, msa / "1psm_A")
    return pdb, msa


def _stored(store: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    s = featurecache.open_store(store)
    (row,) = s.msas.to_pylist()
    block = s.msa(row["key"])
    return block.profile, block.deletion_mean, row["sources"]


def _expected() -> tuple[np.ndarray, np.ndarray]:
    files = [p for p in CHAIN_DIR.iterdir() if not p.name.startswith("hmm_output")]
    query = next(p for p in files if p.suffix == ".a3m").read_text().splitlines()[1].strip()
    profile, del_mean, _ = _reference(query, files)
    return profile, del_mean


def test_a_build_stores_the_main_msa_profile(tmp_path: Path) -> None:
    pdb, msa = _inputs(tmp_path)
    store = tmp_path / "store"
    build_store(store, pdb, workers=1, msa_dir=msa)
    profile, del_mean, sources = _stored(store)
    assert "1psm_A/uniprot_hits.sto" in sources  # its rows are stored, not counted
    want_profile, want_del = _expected()
    np.testing.assert_allclose(profile, want_profile, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(del_mean, want_del, rtol=1e-5, atol=1e-6)


def test_an_msa_stored_by_the_previous_code_is_rebuilt(tmp_path: Path) -> None:
    old = featurecache_at(BEFORE_MAIN_MSA_PROFILE, tmp_path / "old")
    pdb, msa = _inputs(tmp_path)
    store = tmp_path / "store"
    r = build_with_package(old, pdb, store, msa_dir=msa)
    assert r.returncode == 0, r.stdout + r.stderr
    want_profile, want_del = _expected()
    before, _, _ = _stored(store)
    assert np.abs(before - want_profile).max() > 0.01  # the old code counted the uniprot rows

    summary = build_store(store, pdb, workers=1, msa_dir=msa)
    assert summary.n_failed == 0
    profile, del_mean, _ = _stored(store)
    np.testing.assert_allclose(profile, want_profile, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(del_mean, want_del, rtol=1e-5, atol=1e-6)
