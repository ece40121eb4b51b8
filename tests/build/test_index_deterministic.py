"""The same inputs give byte-identical index files whatever the worker count; only the files
documented as run records (the wall times: ``index/timings.arrow``, ``index/component_timings.arrow``)
differ. Before, ``entries.arrow`` and ``components.arrow`` held the wall times in a ``seconds``
column."""

from __future__ import annotations

from pathlib import Path

import pyarrow.ipc as ipc

import featurecache
from featurecache.store.index import RUN_RECORD_TABLES
from tests.conftest import SAMPLES, build_store


def test_index_files_do_not_depend_on_the_worker_count(tmp_path: Path) -> None:
    one, two = tmp_path / "w1", tmp_path / "w2"
    for out, workers in ((one, 1), (two, 2)):
        build_store(out, SAMPLES / "structures", msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd",
                    workers=workers, part_size=2)  # fmt: skip
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
