"""verify calls an index that predates parts written since its last rebuild stale, not damaged
(review R36b s49 #4).

A build rebuilds the index after its structure stage, then writes its MSA and chem parts and
rebuilds it again. A copy of the store taken in between (``cp -r`` of a store being built), or a
build stopped there, has index files that differ from what the parts give now: verify said "the
file is damaged or was changed: `featurecache verify --repair` …" for them, while for the same
state in structure parts it said "stale index: run `featurecache build`". When every differing
table is exactly what a rebuild from the parts its last rebuild recorded gives
(``index/.part-rows/manifest.json``), it is now a stale index; a table that differs from that too
is still damaged.

The state is made for real: the two-entry store's inputs built without their MSAs (query-only
MSAs, its index then saved), then again with them (a new MSA part and an index rebuilt), then the
saved index put back: the index of the first build, before the MSA part of the second.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyarrow import ipc

from featurecache.store.index import read_table
from featurecache.store.layout import INDEX_DIR
from featurecache.store.verify import verify_store
from tests.conftest import SAMPLES, build_store


@pytest.fixture(scope="module")
def stale_store(two_entry_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    inputs = two_entry_store.parent / "two_entry_inputs"
    assert inputs.is_dir()
    base = tmp_path_factory.mktemp("stale")
    store = base / "store"
    build_store(store, inputs / "pdb", workers=1, ccd=SAMPLES / "ccd", part_size=1)
    shutil.copytree(store / INDEX_DIR, base / "index-then")
    summary = build_store(
        store, inputs / "pdb", workers=1, msa_dir=inputs / "msa", ccd=SAMPLES / "ccd", part_size=1
    )
    assert summary.n_failed == 0
    shutil.rmtree(store / INDEX_DIR)
    shutil.copytree(base / "index-then", store / INDEX_DIR)
    return store


def _index_lines(problems: list[str]) -> list[str]:
    return [p for p in problems if p.startswith("index/") and ".arrow " in p]


def test_an_index_older_than_parts_is_stale_not_damaged(
    stale_store: Path, two_entry_store: Path, tmp_path: Path
) -> None:
    store = Path(shutil.copytree(stale_store, tmp_path / "s"))
    lines = _index_lines(verify_store(store))
    assert {line.split()[0] for line in lines} >= {"index/msas.arrow", "index/chains.arrow"}, lines
    for line in lines:
        assert "stale index" in line and "damaged" not in line, line
        assert "predates part(s) m-" in line and "run `featurecache build`" in line, line
    inputs = two_entry_store.parent / "two_entry_inputs"
    build_store(store, inputs / "pdb", workers=1, msa_dir=inputs / "msa", ccd=SAMPLES / "ccd", part_size=1)
    assert verify_store(store) == []  # what the line says to do settles it


def test_a_table_unlike_its_last_rebuild_too_is_still_damaged(stale_store: Path, tmp_path: Path) -> None:
    store = Path(shutil.copytree(stale_store, tmp_path / "s"))
    f = store / INDEX_DIR / "entries.arrow"
    table = read_table(f, memory_map=False)
    k = table.column_names.index("resolution")
    changed = table.set_column(k, "resolution", pc.add(table.column("resolution"), 1.0))
    with pa.OSFile(str(f), "wb") as sink, ipc.new_file(sink, changed.schema) as writer:
        writer.write_table(changed)
    lines = _index_lines(verify_store(store))
    entries = [line for line in lines if line.startswith("index/entries.arrow ")]
    assert entries and "damaged" in entries[0] and "stale index" not in entries[0], lines
    assert any(line.startswith("index/msas.arrow ") and "stale index" in line for line in lines), lines
