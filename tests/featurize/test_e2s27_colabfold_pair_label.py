"""ColabFold's paired MSA, ``<job>_pair/pair.a3m`` (``colabfold.colabfold.run_mmseqs2`` with
``use_pairing``), is a pairing file as Protenix's ``pairing.a3m`` is: its source label is
``pairing``, so it merges in the same place, its rows give the stored rows their species, the client
leaves them unpaired-eligible as it does Protenix's (``const.UNPAIRED_EXCLUDED_SOURCES``), and so they
count in ``profile`` / ``deletion_mean``, which describe the rows the unpaired block draws from (MSA
stage 6, review R11 s39 #2; stages 2–5 left them out). Before,
``pair.a3m`` matched neither ``pairing`` nor ``paired`` and was labelled ``other``: merged last and
counted in the profile.

The alignments are the real Protenix files of 5zyh (mmcif_msa/0); the pairing file is stored once
under ColabFold's name and once under Protenix's, and the two MSAs must be the same bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from featurecache.client.assemble import UNPAIRED_EXCLUDED_SOURCES
from featurecache.const import MolType
from featurecache.featurize.msa import PAIRING_SOURCES, build_msa, source_label, source_order_key
from featurecache.parse.a3m import parse_a3m
from featurecache.types import ParsedMSA
from tests.conftest import MSAS

PROTENIX_0 = MSAS / "Protenix" / "mmcif_msa" / "0"


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("job_pair/pair.a3m", "pairing"),  # ColabFold
        ("job_pairgreedy/pair.a3m.gz", "pairing"),
        ("7xyz_A_pair.a3m", "pairing"),
        ("msa/1/pairing.a3m", "pairing"),  # Protenix, as before
        ("msa/1/non_pairing.a3m", "non_pairing"),
        ("unpaired.a3m", "non_pairing"),
        ("repair.a3m", "other"),  # "pair" inside a word is not the word
        ("pairs.a3m", "other"),
        ("job_env/uniref.a3m", "uniref"),  # ColabFold's unpaired files keep theirs
        ("job_env/bfd.mgnify30.metaeuk30.smag30.a3m", "bfd"),
    ],
)
def test_source_labels(name: str, label: str) -> None:
    assert source_label(name) == label


def _msa(path: Path) -> ParsedMSA:
    (msa,) = parse_a3m(path)
    return msa


def test_colabfold_pair_a3m_is_merged_and_counted_as_protenix_pairing(tmp_path: Path) -> None:
    colabfold = tmp_path / "job_pair"
    colabfold.mkdir()
    shutil.copyfile(PROTENIX_0 / "pairing.a3m", colabfold / "pair.a3m")
    main = _msa(PROTENIX_0 / "non_pairing.a3m")
    pairing = _msa(colabfold / "pair.a3m")
    sequence = main.query_sequence
    assert pairing.query_sequence == sequence
    # the pairing file holds rows the main one does not: counted or not, the profile differs
    assert set(pairing.rows[1:]) - set(main.rows[1:])

    # merge order: after the main file, as Protenix's pairing.a3m (before: "other", last)
    other = str(tmp_path / "zz_notes.a3m")
    files = sorted(
        [str(colabfold / "pair.a3m"), other, str(PROTENIX_0 / "non_pairing.a3m")], key=source_order_key
    )
    assert files == [str(PROTENIX_0 / "non_pairing.a3m"), str(colabfold / "pair.a3m"), other]

    main_only = build_msa(sequence, MolType.PROTEIN, [("non_pairing.a3m", main)])
    as_colabfold = build_msa(
        sequence, MolType.PROTEIN, [("non_pairing.a3m", main), ("job_pair/pair.a3m", pairing)]
    )
    as_protenix = build_msa(
        sequence, MolType.PROTEIN, [("non_pairing.a3m", main), ("msa/0/pairing.a3m", pairing)]
    )
    for name in ("residues", "deletions", "species", "source", "profile", "deletion_mean"):
        a, b = getattr(as_colabfold, name), getattr(as_protenix, name)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), name
    # the pairing rows are stored (more rows than the main file gives) and counted in the profile: it
    # is the one of the main file's and the pairing file's rows together
    assert as_colabfold.depth > main_only.depth
    both = build_msa(sequence, MolType.PROTEIN, [("non_pairing.a3m", main), ("more_hits.a3m", pairing)])
    assert source_label("more_hits.a3m") == "other"  # a main-MSA file: its rows count
    np.testing.assert_allclose(as_colabfold.profile, both.profile, rtol=1e-6)
    np.testing.assert_allclose(as_colabfold.deletion_mean, both.deletion_mean, rtol=1e-6)
    assert np.abs(as_colabfold.profile - main_only.profile).max() > 0.01
    # ... and the client keeps them unpaired-eligible, as Protenix's (only UniProt searches are not)
    assert "pairing" in PAIRING_SOURCES and "pairing" not in UNPAIRED_EXCLUDED_SOURCES
