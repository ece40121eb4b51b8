"""Review R31d s47 #5: one formula for an MSA's ``profile`` and ``deletion_mean``, the build's.

``featurize.msa.msa_profile`` / ``deletion_mean`` claimed to be those features ("fraction of rows
with each class at each column") but counted the rows given to them, while the stored features
count the distinct rows of the main MSA before the depth cap; nothing in the library called them,
and on 1psm's stored rows they differed from the stored profile by up to 0.265. They are gone.

A real build (1 worker) of 1psm with all of its OpenFold MSA files, its depth capped, read back
through the store's reader; the expected values are counted here from the files themselves
(tests/featurize/test_msa_profile_main.py's ``_reference``: a3m by splitting lines, Stockholm
through Biopython, the distinct rows of the query and of the files that are not UniProt's)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import featurecache.featurize.msa as msa_module
from featurecache.build.config import BuildConfig
from featurecache.const import NUM_RESTYPES
from featurecache.store.reader import LocalStore
from featurecache.types import MSABlock
from tests.conftest import MSAS, STRUCTURES, build_store
from tests.featurize.test_msa_profile_main import _classes, _files, _reference

CHAIN_DIR = "openfold/1psm_A"
DEPTH_CAP = 16


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> MSABlock:
    """1psm chain A's stored MSA, every row, of a build capped at :data:`DEPTH_CAP` rows."""
    tmp = tmp_path_factory.mktemp("r31d_profile")
    pdb, msa = tmp / "pdb", tmp / "msa"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", pdb)
    shutil.copytree(MSAS / CHAIN_DIR, msa / "1psm_A")
    store = tmp / "store"
    summary = build_store(store, pdb, workers=1, msa_dir=msa, config=BuildConfig(msa_depth_cap=DEPTH_CAP))
    assert summary.n_failed == 0
    reader = LocalStore(store)
    chains = reader.chains.to_pylist()
    (key,) = {c["msa_key"] for c in chains if c["entry_id"] == "1psm" and c["msa_key"]}
    return reader.msa(key)


def test_the_stored_profile_counts_the_distinct_main_rows_before_the_cap(stored: MSABlock) -> None:
    query = stored.residues[0]
    files = _files(CHAIN_DIR)
    ref_query = _reference_query(files)
    profile, del_mean, n_main = _reference(ref_query, files)
    assert len(ref_query) == stored.length and (_classes([ref_query])[0] == query).all()
    # capped: the stored rows are fewer than the rows the profile counts
    assert stored.depth == DEPTH_CAP < n_main, (stored.depth, n_main)
    np.testing.assert_allclose(stored.profile, profile, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stored.deletion_mean, del_mean, rtol=1e-5, atol=1e-6)
    # a count over the stored (capped) rows is another profile: the test tells the two apart
    over_stored = np.eye(NUM_RESTYPES)[stored.residues].mean(axis=0)
    assert np.abs(over_stored - stored.profile).max() > 0.05


@pytest.mark.parametrize(
    ("name", "feature"), [("msa_profile", "profile"), ("deletion_mean", "deletion_mean")]
)
def test_no_second_formula_disagrees_with_the_stored_features(
    stored: MSABlock, name: str, feature: str
) -> None:
    """The review's comparison (/tmp/r31d/profile_cmp.py): a function of ``featurize.msa`` named
    as a stored feature, given the stored rows, gives the stored feature. Before, ``msa_profile``
    differed by 0.40 and ``deletion_mean`` by 0.29 here (on the code before); now neither exists."""
    formula = getattr(msa_module, name, None)
    if formula is not None:
        rows = stored.residues if feature == "profile" else stored.deletions
        np.testing.assert_allclose(formula(rows), getattr(stored, feature), rtol=1e-5, atol=1e-6)


def _reference_query(files: list[Path]) -> str:
    """The query of the chain's alignments: the first row of its first a3m file."""
    a3m = next(p for p in files if p.name.endswith(".a3m"))
    lines = a3m.read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith(">"))
    seq = []
    for line in lines[head + 1 :]:
        if line.startswith(">"):
            break
        seq.append(line.strip())
    return "".join(seq)
