"""FeatureLoader's batch_size is checked up front (real sample store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache.client import FeatureDataset, FeatureLoader
from featurecache.errors import InvalidRequest


@pytest.mark.parametrize("batch_size", [None, 0, 1.5, True])
def test_batch_size_must_be_a_positive_integer(sample_store: Path, batch_size: object) -> None:
    ds = FeatureDataset(sample_store, crop_size=32, use_msa=False)
    with pytest.raises(InvalidRequest, match="batch_size must be an integer"):
        FeatureLoader(ds, batch_size=batch_size)  # type: ignore[arg-type]
