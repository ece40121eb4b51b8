"""``verify --repair`` never publishes an index that serves an unsettled entry's rows from its part's
copy (review R30 s46 #3). When a part was also moved aside, the repair rewrote the whole index from
the parts first and wrote the removal of the unsettled entry only afterwards: between the two (and
for good, had the repair been killed there: the index then equals the part, and no later verify
flags it) the index served the part's copy, which may be the damaged one. Now the removal is
written before that rewrite, so the one index it publishes applies both.

Real build (1 worker, one input per part) of the repo's samples 1psm and 2q2k; 2q2k's structure
part and a component part made to look older (no ``index_sha256`` in their ``part.json``), one
cell of each one's own index changed: the entry is taken out, the component part moved aside. Each
index the repair publishes is read as it is published."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import featurecache
import featurecache.store.index as index_module
from featurecache.store.verify import repair_store
from featurecache.store.writer import INDEX_SHA256_KEY


def _make_older(part: Path) -> None:
    manifest = part / "_index" / "part.json"
    doc = json.loads(manifest.read_text())
    del doc[INDEX_SHA256_KEY]  # as a part written before session 46
    manifest.write_text(json.dumps(doc, indent=1, sort_keys=True))


def _set_cell(f: Path, column: str, row: int, value: object) -> None:
    with ipc.open_file(f) as r:
        t = r.read_all()
    i = t.column_names.index(column)
    values = t.column(column).to_pylist()
    values[row] = value
    t = t.set_column(i, t.schema.field(i), pa.array(values, t.schema.field(i).type))
    with ipc.new_file(f, t.schema) as w:
        w.write_table(t)


def test_no_index_the_repair_publishes_serves_the_unsettled_copy(
    sample_pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _pdb = sample_pair
    s = featurecache.open_store(store)
    part = store / "parts" / str(s.entries.column("part")[s.row_of("2q2k")].as_py())
    want = float(s.entries.column("resolution")[s.row_of("2q2k")].as_py())
    component_parts = sorted(p for p in (store / "parts").iterdir() if p.name.startswith("c-"))
    assert component_parts  # the premise: the build computed components
    for p in (part, component_parts[0]):
        _make_older(p)
    own = ipc.open_file(part / "_index" / "entries.arrow").read_all()
    _set_cell(
        part / "_index" / "entries.arrow", "resolution", own.column("id").to_pylist().index("2q2k"), want / 2
    )
    _set_cell(component_parts[0] / "_index" / "components.arrow", "n_heavy", 0, 4242)

    served: list[float | None] = []
    rebuild = index_module.rebuild_index

    def watched(*args: object, **kwargs: object) -> dict[str, pa.Table]:
        out = rebuild(*args, **kwargs)  # type: ignore[arg-type]
        now = featurecache.open_store(store)
        served.append(float(now.entries.column("resolution")[now.row_of("2q2k")].as_py()) if "2q2k" in now.ids
                      else None)  # fmt: skip
        return out

    monkeypatch.setattr(index_module, "rebuild_index", watched)
    result = repair_store(store)
    assert [d.id for d in result.removed] == ["2q2k"] and component_parts[0].name in result.moved_parts
    assert served and want / 2 not in served, served  # what an interruption at any point would leave
    assert "2q2k" not in featurecache.open_store(store).ids
