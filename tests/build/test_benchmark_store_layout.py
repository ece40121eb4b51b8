"""store_layout.py compares the layouts read the same way, over interleaved rounds, by CPU time
(review R31b s47 #4): it timed one wall-clock pass per layout, the records through ``store.entry()``
and the fields through zarr, so its 34× mixed the read path with the layout. A real run over the
repo's sample store."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import make_page, store_layout  # noqa: E402


def test_both_layouts_through_one_reader_interleaved_with_cpu(sample_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "store_layout.json"
    store_layout.main(["--store", str(sample_store), "--reads", "8", "--repeats", "3", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["params"]["repeats"] == 3 and "read_many" in doc["params"]["reader"]
    records, fields = doc["rows"]
    for r in (records, fields):
        assert r["arrays_through_zarr"] == 0, r  # the same direct reader on both sides
        assert r["cpu_ms_per_entry"] > 0 and len(r["cpu_ms_rounds"].split()) == 3, r
    assert fields["slowdown_vs_records_cpu"] == fields["cpu_ms_per_entry"] / records["cpu_ms_per_entry"]
    (ratio,) = make_page.ratios_store_layout(doc["rows"])
    assert ratio[0] == "records vs one array per field (CPU ms/entry)" and "wall" in ratio[2], ratio
