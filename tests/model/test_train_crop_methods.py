"""Each step record says how its samples were cropped (review R25c s43 #7): the client's
``crop_method`` of every sample, as the client's own ``sample(position)`` gives it."""

from __future__ import annotations

from pathlib import Path

from featurecache.client import FeatureDataset
from featurecache.client.crop import CROP_METHODS
from featurecache.model.train import TRAIN_WEIGHTING, run_training
from tests.model.test_trunk import TINY


def test_each_step_records_its_samples_crop_methods(sample_store: Path) -> None:
    doc = run_training(sample_store, None, steps=3, crop_size=16, batch_size=2, device="cpu", log_path=None,
                       config=TINY, workers=1, seed=0)  # fmt: skip
    ds = FeatureDataset(sample_store, crop_size=16, seed=0, workers=1, weighting=TRAIN_WEIGHTING)
    try:
        for rec in doc["steps"]:
            assert len(rec["crop_methods"]) == 2, rec
            assert rec["crop_methods"] == [ds.sample(p)["crop_method"] for p in rec["positions"]]
    finally:
        ds.close()
    assert {m for rec in doc["steps"] for m in rec["crop_methods"]} <= {*CROP_METHODS, "none"}
    assert "crop_methods" in doc["fields"]
    synthetic = run_training(None, None, steps=1, crop_size=16, device="cpu", log_path=None, config=TINY)
    assert synthetic["steps"][0]["crop_methods"] is None
