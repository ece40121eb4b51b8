"""FeatureDataset's max_msa_rows is checked up front (real sample store).

Before, 0 or a negative count was accepted and every entry with a stored MSA then failed inside
``rng.integers(1, 0)`` ("low > high") and was skipped, logged only; 1.5 was accepted silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache.client import FeatureDataset
from featurecache.errors import InvalidRequest


@pytest.mark.parametrize("rows", [0, -5, 1.5, True, None])
def test_max_msa_rows_must_be_a_positive_integer(sample_store: Path, rows: object) -> None:
    with pytest.raises(InvalidRequest, match="max_msa_rows must be an integer"):
        FeatureDataset(sample_store, crop_size=32, max_msa_rows=rows)  # type: ignore[arg-type]


def test_one_msa_row_is_allowed(sample_store: Path) -> None:
    ds = FeatureDataset(sample_store, crop_size=32, max_msa_rows=1, workers=1)
    assert all(ds.sample(p)["msa"].shape[0] == 1 for p in range(6))
