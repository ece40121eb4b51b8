"""reader_memory.py interleaves the bounds over rounds with CPU time and fits the memory line
(review R31b s47 #6): one sequential wall-clock pass per bound gave times that were not even
monotonic, and "KiB per open array" (held / open) folded the reader's fixed ~0.5 MiB into it (65 KiB
an array with 8 open, 8.4 with 159). A real run over the repo's sample store; the fit checked on the
committed reader_memory_run2.json's three points."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import reader_memory  # noqa: E402


def test_the_fit_splits_slope_and_fixed_part() -> None:
    run2 = json.loads((REPO / "benchmarks" / "results" / "reader_memory_run2.json").read_text())
    line = reader_memory.fit([(r["open_arrays"], r["held_kib"]) for r in run2["rows"]])
    assert line is not None
    slope, fixed = line
    assert slope == pytest.approx(5.43, abs=0.01) and fixed == pytest.approx(475.2, abs=0.5)
    assert reader_memory.fit([(8, 1.0), (8, 2.0)]) is None  # one array count: no line


def test_bounds_interleaved_with_cpu_and_the_fit_next_to_the_quotient(
    sample_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(reader_memory.MAX_OPEN_ARRAYS_ENV, "")  # main() sets it; restored after
    out = tmp_path / "reader_memory.json"
    reader_memory.main(["--store", str(sample_store), "--bounds", "64,2", "--reads", "5", "--repeats", "2",
                        "--out", str(out)])  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["params"]["repeats"] == 2
    rows = doc["rows"]
    assert [r["max_open"] for r in rows] == [64, 2] and rows[0]["open_arrays"] > rows[1]["open_arrays"]
    line = reader_memory.fit([(r["open_arrays"], r["held_kib"]) for r in rows])
    assert line is not None
    for r in rows:
        assert (r["kib_per_array_fit"], r["fixed_kib_fit"]) == pytest.approx(line), r
        assert r["cpu_ms_per_entry"] > 0 and len(r["cpu_ms_rounds"].split()) == 2, r
