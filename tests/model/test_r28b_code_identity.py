"""A run's log header and checkpoints say which code trained it: featurecache's version and the
digest of its source files (review R28a s46 #5, part; the build's workers report the same pair)."""

from __future__ import annotations

import json
from pathlib import Path

import featurecache
from featurecache.model.train import load_checkpoint, run_training
from tests.model.test_trunk import TINY


def test_the_log_and_the_checkpoint_record_the_featurecache_version_and_source_digest(
    sample_store: Path, tmp_path: Path
) -> None:
    log, ck = tmp_path / "log.json", tmp_path / "ck.pt"
    run_training(sample_store, None, steps=1, crop_size=16, device="cpu", workers=1, config=TINY, log_path=log,
                 checkpoint=ck)  # fmt: skip
    code = {
        "featurecache_version": featurecache.__version__,
        "featurecache_source": featurecache.source_digest(),
    }
    assert len(code["featurecache_source"]) == 16
    header, saved = json.loads(log.read_text()), load_checkpoint(ck)
    assert {k: header[k] for k in code} == code
    assert {k: saved[k] for k in code} == code
