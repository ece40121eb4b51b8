"""vs_alphafold3_pytorch.py's featurecache side shows the sample and the collate apart (review R31b
s47 #1): with every MSA row the batch's collate is ~40 % of 721p's per-sample cost, which the one
``cpu_ms`` figure hid. Real samples from the repo's sample store, both row settings."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import vs_alphafold3_pytorch as vs  # noqa: E402
from featurecache import open_store  # noqa: E402


def test_sample_and_collate_cpu_apart_in_both_row_settings(
    sample_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = open_store(sample_store)
    eid = next((i for i in reader.ids if i.startswith("102m")), reader.ids[0])
    reader.close()
    monkeypatch.setattr(vs, "WARMUP", 1)
    row = vs._featurecache_side(sample_store, [eid], 2)[eid]
    for key in ("", "_16384"):
        sample, collate = row[f"sample_cpu_ms{key}"], row[f"collate_cpu_ms{key}"]
        assert sample > 0 and collate >= 0, row
        # two timed samples: each median is their mean, so the parts add up to the whole
        assert sample + collate == pytest.approx(row[f"cpu_ms{key}"], rel=1e-6), row
    assert {"cpu_ms", "wall_ms", "msa_rows", "crop_tokens", "cpu_ms_16384", "wall_ms_16384"} <= row.keys()
