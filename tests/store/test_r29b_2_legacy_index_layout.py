"""``featurecache verify`` on a healthy store whose index an older featurecache wrote, before
7a7debb moved the wall times out of ``entries`` and ``components`` (their ``seconds`` column) into
``index/timings.arrow`` and ``index/component_timings.arrow``: a note, exit 0 (review R29b s46 #2).
Verify reported 4 false MISMATCHes (exit 4): timings.arrow and component_timings.arrow missing,
entries and components with an extra column ``seconds``.

The layout is made from a real build (1psm and 2q2k, with the CCD) by rewriting its files the way
7a7debb's diff says the old writer had them: ``seconds`` (float64) after ``n_warnings`` in each
structure part's ``_index/entries.arrow`` and in ``index/entries.arrow``, no ``_index/timings.arrow``
and no ``index/timings.arrow``; ``seconds`` in ``index/components.arrow`` (before ``part``) and no
``index/component_timings.arrow`` (a component part's own ``components.arrow`` still has its
``seconds``); no index generation, no ``index/.part-rows/``; the parts without ``index_sha256``
(written before it was recorded)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from featurecache.store.index import read_table, write_table
from featurecache.store.index_check import table_difference
from featurecache.store.verify import verify_report
from featurecache.store.writer import INDEX_SHA256_KEY
from tests.conftest import CCD, SAMPLES, CliRun, build_store, cli_in_process

IDS = ("1psm", "2q2k")


def _cli(*args: str | Path) -> CliRun:
    return cli_in_process(*map(str, args))


def _with_seconds(
    table: pa.Table, seconds: list[float | None], after: str | None, before: str | None
) -> pa.Table:
    names = table.column_names
    at = names.index(after) + 1 if after is not None else names.index(str(before))
    return table.add_column(at, "seconds", pa.array(seconds, pa.float64())).replace_schema_metadata(None)


def _to_legacy_layout(store: Path) -> None:
    index = store / "index"
    for part in sorted(p for p in (store / "parts").iterdir() if p.is_dir()):
        own = part / "_index"
        timings = own / "timings.arrow"
        if timings.is_file():
            by_id = {r["entry_id"]: r["seconds"] for r in read_table(timings, memory_map=False).to_pylist()}
            entries = read_table(own / "entries.arrow", memory_map=False)
            seconds = [by_id.get(i) for i in entries.column("id").to_pylist()]
            write_table(own / "entries.arrow", _with_seconds(entries, seconds, "n_warnings", None))
            timings.unlink()
        manifest = own / "part.json"
        doc = json.loads(manifest.read_text())
        doc.pop(INDEX_SHA256_KEY, None)
        manifest.write_text(json.dumps(doc, indent=1, sort_keys=True))
    by_id = {
        r["entry_id"]: r["seconds"] for r in read_table(index / "timings.arrow", memory_map=False).to_pylist()
    }
    entries = read_table(index / "entries.arrow", memory_map=False)
    seconds = [by_id.get(i) for i in entries.column("id").to_pylist()]
    write_table(index / "entries.arrow", _with_seconds(entries, seconds, "n_warnings", None))
    by_key = {
        r["key"]: r["seconds"]
        for r in read_table(index / "component_timings.arrow", memory_map=False).to_pylist()
    }
    components = read_table(index / "components.arrow", memory_map=False)
    seconds = [by_key.get(k) for k in components.column("key").to_pylist()]
    write_table(index / "components.arrow", _with_seconds(components, seconds, None, "part"))
    (index / "timings.arrow").unlink()
    (index / "component_timings.arrow").unlink()
    for f in index.glob("*.arrow"):
        write_table(f, read_table(f, memory_map=False).replace_schema_metadata(None))
    shutil.rmtree(index / ".part-rows")


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for entry in IDS:
        shutil.copy(SAMPLES / "structures" / f"{entry}.cif", pdb)
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, part_size=1, ccd=CCD).n_failed == 0
    assert read_table(store / "index" / "component_timings.arrow", memory_map=False).num_rows  # the premise
    _to_legacy_layout(store)
    return store


def test_an_index_of_the_layout_before_7a7debb_is_no_mismatch(legacy: Path) -> None:
    entries = read_table(legacy / "index" / "entries.arrow", memory_map=False)
    assert "seconds" in entries.column_names and not (legacy / "index" / "timings.arrow").exists()
    run = _cli("verify", legacy, "--no-progress")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "MISMATCH" not in run.stdout and "ok: store verified" in run.stdout, run.stdout
    assert "is of an older featurecache's layout" in run.stderr, run.stderr
    assert verify_report(legacy).old_layout

    rep = _cli("verify", legacy, "--repair", "--no-progress")
    assert rep.returncode == 0 and "MISMATCH" not in rep.stdout, rep.stdout + rep.stderr
    # rewritten in today's layout, the same values
    after = read_table(legacy / "index" / "entries.arrow", memory_map=False)
    assert "seconds" not in after.column_names
    assert table_difference(after, entries.drop_columns(["seconds"])) is None
    assert (legacy / "index" / "timings.arrow").is_file() and (
        legacy / "index" / "component_timings.arrow"
    ).is_file()
    ok = _cli("verify", legacy, "--no-progress")
    assert ok.returncode == 0 and "older featurecache's layout" not in ok.stderr, ok.stdout + ok.stderr


def test_damage_beside_the_older_layout_is_still_found(legacy: Path) -> None:
    """The layout is left out of the comparison, not the values: another resolution is a MISMATCH."""
    f = legacy / "index" / "entries.arrow"
    entries = read_table(f, memory_map=False)
    resolution = [2.5 if i == "2q2k" else r for i, r in zip(entries.column("id").to_pylist(),
                                                            entries.column("resolution").to_pylist(), strict=True)]  # fmt: skip
    col = entries.column_names.index("resolution")
    write_table(f, entries.set_column(col, "resolution", pa.array(resolution, pa.float64())))
    run = _cli("verify", legacy, "--no-progress")
    assert run.returncode == 4 and "column resolution differs in 1 row(s)" in run.stdout, run.stdout
    assert "extra: seconds" not in run.stdout
