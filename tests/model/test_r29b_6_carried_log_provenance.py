"""A training log continued across featurecache versions says who trained what and at which rate
(review R29b s46 #6). A resume carried the earlier log's step records over unchanged: records of a
log written before records said their rate kept no ``lr`` (null in the log), although the
checkpoint records the rate they ran at, and the header named this run's code for every step.
Now such a record takes the checkpoint's ``lr``, and the log's ``segments`` list says which
featurecache trained from each start step on (``start_step``, ``featurecache_version``,
``featurecache_source``), documented in the log's "fields" block.

A real resume on the repo's sample store: 2 steps at --lr 1e-4 with a checkpoint, the log then
rewritten as an older featurecache wrote it (no ``lr`` in the records, no ``segments``, another
version and source in the header), then the resume to 4 steps at 1e-3."""

from __future__ import annotations

import json
from pathlib import Path

import featurecache
from featurecache.model.train import run_training
from tests.model.test_trunk import TINY


def test_a_resume_fills_the_rate_of_older_records_and_records_each_segments_code(
    sample_store: Path, tmp_path: Path
) -> None:
    ck, log = tmp_path / "ck.pt", tmp_path / "log.json"
    run_training(sample_store, None, steps=2, crop_size=32, device="cpu", seed=3, workers=1, config=TINY, lr=1e-4,
                 log_path=log, checkpoint=ck)  # fmt: skip
    older = json.loads(log.read_text())
    for record in older["steps"]:
        del record["lr"]
    older.pop("segments", None)
    older["featurecache_version"], older["featurecache_source"] = "0.45.0", "0123456789abcdef"
    log.write_text(json.dumps(older))

    run_training(sample_store, None, steps=4, crop_size=32, device="cpu", seed=3, workers=1, config=TINY, lr=1e-3,
                 log_path=log, checkpoint=ck, resume=ck)  # fmt: skip
    doc = json.loads(log.read_text())
    assert [r["step"] for r in doc["steps"]] == [0, 1, 2, 3] and doc["steps_from_earlier_log"] == 2
    assert [r.get("lr") for r in doc["steps"]] == [1e-4, 1e-4, 1e-3, 1e-3]  # before: [None, None, 1e-3, 1e-3]
    assert doc["segments"] == [
        {"start_step": 0, "featurecache_version": "0.45.0", "featurecache_source": "0123456789abcdef"},
        {"start_step": 2, "featurecache_version": featurecache.__version__,
         "featurecache_source": featurecache.source_digest()},
    ]  # fmt: skip
    assert "segments" in doc["fields"]["step"]

    # a further resume keeps the segments the log records
    run_training(sample_store, None, steps=5, crop_size=32, device="cpu", seed=3, workers=1, config=TINY, lr=1e-3,
                 log_path=log, checkpoint=tmp_path / "ck5.pt", resume=tmp_path / "ck.pt")  # fmt: skip
    again = json.loads(log.read_text())
    assert [s["start_step"] for s in again["segments"]] == [0, 2, 4]
    assert again["segments"][0]["featurecache_source"] == "0123456789abcdef"
