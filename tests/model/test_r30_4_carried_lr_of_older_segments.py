"""A resume fills the missing ``lr`` of carried records only for the steps of the run whose
checkpoint it resumes (review R30 s46 #4). A log of two earlier segments (0-1 at 1e-4, then a
resume 2-3 at 1e-3), rewritten as an older featurecache wrote it (no ``lr`` in the records, no
``segments``): a further resume filled every record with the checkpoint's 1e-3, so steps 0-1 said
1e-3 though they trained at 1e-4. Their rate is not known from such a log: they now say null."""

from __future__ import annotations

import json
from pathlib import Path

from featurecache.model.train import run_training
from tests.model.test_trunk import TINY


def test_a_resume_fills_the_rate_only_for_the_checkpoint_runs_steps(
    sample_store: Path, tmp_path: Path
) -> None:
    ck, log = tmp_path / "ck.pt", tmp_path / "log.json"
    common = dict(crop_size=32, device="cpu", seed=3, workers=1, config=TINY, log_path=log, checkpoint=ck)
    run_training(sample_store, None, steps=2, lr=1e-4, **common)  # type: ignore[arg-type]
    run_training(sample_store, None, steps=4, lr=1e-3, resume=ck, **common)  # type: ignore[arg-type]
    older = json.loads(log.read_text())
    assert [r["lr"] for r in older["steps"]] == [1e-4, 1e-4, 1e-3, 1e-3] and older["start_step"] == 2
    for record in older["steps"]:
        del record["lr"]
    older.pop("segments", None)
    older["featurecache_version"] = "0.45.0"
    log.write_text(json.dumps(older))

    run_training(sample_store, None, steps=5, lr=1e-3, resume=ck, **common)  # type: ignore[arg-type]
    doc = json.loads(log.read_text())
    assert [s["start_step"] for s in doc["segments"]] == [0, 2, 4]
    # before: [1e-3] * 5, steps 0-1 given the checkpoint run's rate
    assert [(r["step"], r.get("lr")) for r in doc["steps"]] == [
        (0, None),
        (1, None),
        (2, 1e-3),
        (3, 1e-3),
        (4, 1e-3),
    ]
