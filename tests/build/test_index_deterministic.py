"""The same inputs give byte-identical index files whatever the worker count; only the files
documented as run records (the wall times: ``index/timings.arrow``, ``index/component_timings.arrow``)
differ. Before, ``entries.arrow`` and ``components.arrow`` held the wall times in a ``seconds``
column."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.ipc as ipc

import featurecache
from featurecache.const import FEATURIZER_VERSION
from featurecache.store.index import RUN_RECORD_TABLES, rebuild_index
from tests.conftest import SAMPLES, build_store, build_with_package, featurecache_at


def test_index_files_do_not_depend_on_the_worker_count(tmp_path: Path) -> None:
    one, two = tmp_path / "w1", tmp_path / "w2"
    for out, workers in ((one, 1), (two, 2)):
        build_store(out, SAMPLES / "structures", msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd",
                    workers=workers, part_size=2, own_cluster=True)  # fmt: skip
    names = sorted(p.name for p in (one / "index").glob("*.arrow"))
    assert names == sorted(p.name for p in (two / "index").glob("*.arrow"))
    run_records = {f"{t}.arrow" for t in RUN_RECORD_TABLES}
    compared = [n for n in names if n not in run_records]
    # every table a reader serves is compared
    assert {"entries.arrow", "chains.arrow", "interfaces.arrow", "failures.arrow", "msas.arrow",
            "components.arrow", "warnings.arrow"} <= set(compared)  # fmt: skip
    differing = [n for n in compared if (one / "index" / n).read_bytes() != (two / "index" / n).read_bytes()]
    assert differing == []

    # the wall times are still recorded, one per entry and one per component
    n_inputs = sum(1 for p in (SAMPLES / "structures").iterdir() if p.is_file())
    store = featurecache.open_store(one)
    assert len(store.ids) == n_inputs
    timings = ipc.open_file(one / "index" / "timings.arrow").read_all()
    assert sorted(timings.column("entry_id").to_pylist()) == sorted(store.ids)
    assert all(s > 0 for s in timings.column("seconds").to_pylist())
    comp = ipc.open_file(one / "index" / "component_timings.arrow").read_all()
    assert sorted(comp.column("key").to_pylist()) == sorted(store.components.column("key").to_pylist())
    assert "seconds" not in store.entries.column_names and "seconds" not in store.components.column_names


#: the last commit before the per-entry ``seconds`` left entries.arrow (7a7debb)
BEFORE_TIMINGS = "71a6b48"


def _featurizer_version(package_root: Path) -> str:
    """FEATURIZER_VERSION as a package tree's const.py writes it (read as text: not imported)."""
    text = (package_root / "featurecache" / "const.py").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("FEATURIZER_VERSION")]
    return line.split("=", 1)[1].strip().strip("\"'")


def test_an_old_parts_seconds_move_to_timings(tmp_path: Path) -> None:
    """A store whose first part was written before the time left entries (its entries.arrow has a
    ``seconds`` column, no timings.arrow): this code's index rebuild puts that part's time in
    index/timings.arrow as the part recorded it (before: the old part's entries were missing from
    timings.arrow, their time dropped), and a build of this code that extends the store keeps every
    live entry's time there."""
    old = featurecache_at(BEFORE_TIMINGS, tmp_path / "old")
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    store = tmp_path / "store"
    r = build_with_package(old, pdb, store)
    assert r.returncode == 0, r.stdout + r.stderr
    (old_part,) = [p for p in (store / "parts").iterdir() if p.name.startswith("s-")]
    old_entries = ipc.open_file(old_part / "_index" / "entries.arrow").read_all()
    assert "seconds" in old_entries.column_names  # the old format, as written by the old code
    assert not (old_part / "_index" / "timings.arrow").exists()
    recorded = dict(zip(old_entries.column("id").to_pylist(), old_entries.column("seconds").to_pylist(),
                        strict=True))  # fmt: skip
    assert list(recorded) == ["102m"] and recorded["102m"] > 0

    # this code's index over the old part alone: the old part's time is in timings.arrow
    rebuild_index(store, incremental=False)
    timings = ipc.open_file(store / "index" / "timings.arrow").read_all()
    assert timings.to_pylist() == [{"entry_id": "102m", "seconds": recorded["102m"], "part": old_part.name}]
    assert "seconds" not in featurecache.open_store(store).entries.column_names

    shutil.copy(SAMPLES / "structures" / "1A8O.pdb", pdb)  # one more input, built by this code
    summary = build_store(store, pdb, workers=1)
    # an entry key holds the featurizer version: a part of another version is rebuilt
    same_version = _featurizer_version(old) == FEATURIZER_VERSION
    assert (summary.n_built, summary.n_skipped) == ((1, 1) if same_version else (2, 0))
    timings = ipc.open_file(store / "index" / "timings.arrow").read_all()
    rows = {r["entry_id"]: r for r in timings.to_pylist()}
    assert sorted(rows) == sorted(featurecache.open_store(store).ids) == ["102m", "1A8O"]  # before: 1A8O only
    if same_version:
        assert rows["102m"]["seconds"] == recorded["102m"] and rows["102m"]["part"] == old_part.name
    else:
        assert rows["102m"]["seconds"] > 0 and rows["102m"]["part"] != old_part.name
    assert rows["1A8O"]["seconds"] > 0 and rows["1A8O"]["part"] != old_part.name
    assert "seconds" not in featurecache.open_store(store).entries.column_names
