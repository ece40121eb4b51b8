"""The top-level index is updated from the parts added since the last build, not from every part.

A build used to re-read every part's ``_index`` files and rewrite the whole index three times, even
when nothing changed (0.85 ms per stored entry per build). These tests build a real store in steps
(real inputs, MSAs and CCD, parts of one input, a real Dask LocalCluster) and check that the index
a build leaves is byte-identical to one rebuilt from every part, that a build with no new part
rewrites no index file, and what the summary says about inputs built again.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from rich.console import Console

import featurecache
from featurecache.build.run import BuildSummary
from featurecache.build.summary import render_summary
from featurecache.store.index import complete_parts, read_table, rebuild_index, replace_table, store_bytes
from featurecache.store.verify import verify_store
from tests.conftest import SAMPLES, build_store

FIRST = ["102m.cif", "1psm.cif", "2q2k.cif"]
LATER = ["7DDO.pdb", "721p-assembly1.cif", "1A8O.pdb"]


def _index_files(store: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((store / "index").glob("*.arrow"))}


def _stamps(store: Path) -> dict[str, tuple[int, int]]:
    return {
        f.name: (f.stat().st_ino, f.stat().st_mtime_ns) for f in sorted((store / "index").glob("*.arrow"))
    }


def _full_rebuild(store: Path, where: Path) -> dict[str, bytes]:
    """The index files a rebuild from every part gives, on a copy of the store."""
    copy = shutil.copytree(store, where)
    shutil.rmtree(copy / "index")
    rebuild_index(copy, incremental=False)
    return _index_files(copy)


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@dataclass
class Steps:
    store: Path
    inputs: Path
    summaries: dict[str, BuildSummary] = field(default_factory=dict)
    stamps: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    full: dict[str, dict[str, bytes]] = field(default_factory=dict)
    parts: dict[str, set[str]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Steps]:
    """One store built four times: 3 inputs; again unchanged; +3 inputs and one input edited;
    again with another CCD, in which HEM's definition changed (102m, which uses it, rebuilt and HEM's
    component computed again; the CCD is in no entry key since review R26b s44 #5)."""
    tmp = tmp_path_factory.mktemp("incremental")
    inputs, store = tmp / "in", tmp / "store"
    inputs.mkdir()
    for name in FIRST:
        shutil.copy(SAMPLES / "structures" / name, inputs / name)
    s = Steps(store, inputs)

    def build(step: str, ccd: Path) -> None:
        s.summaries[step] = build_store(
            store, inputs, workers=1, part_size=1, msa_dir=SAMPLES / "msas", ccd=ccd
        )
        s.stamps[step] = _stamps(store)
        s.files[step] = _index_files(store)
        s.full[step] = _full_rebuild(store, tmp / f"full-{step}")
        s.parts[step] = {p.name for p in complete_parts(store)}

    build("first", SAMPLES / "ccd")
    build("unchanged", SAMPLES / "ccd")
    for name in LATER:
        shutil.copy(SAMPLES / "structures" / name, inputs / name)
    with open(inputs / "102m.cif", "a") as f:  # new bytes, same path and id: the entry is replaced
        f.write("#\n")
    build("added", SAMPLES / "ccd")
    other_ccd = tmp / "ccd"  # HEM's iron charged 2 (was 0)
    shutil.copytree(SAMPLES / "ccd", other_ccd)
    hem = (other_ccd / "HEM.cif").read_text()
    assert "HEM  FE    FE    FE  0 " in hem
    (other_ccd / "HEM.cif").write_text(hem.replace("HEM  FE    FE    FE  0 ", "HEM  FE    FE    FE  2 "))
    build("new-ccd", other_ccd)
    yield s


@pytest.mark.parametrize("step", ["first", "unchanged", "added", "new-ccd"])
def test_each_build_leaves_the_index_a_full_rebuild_gives(steps: Steps, step: str) -> None:
    files, full = steps.files[step], steps.full[step]
    assert set(files) >= {"entries.arrow", "chains.arrow", "msas.arrow", "components.arrow", "failures.arrow"}
    assert files.keys() == full.keys()
    for name in files:
        assert files[name] == full[name], (step, name)


def test_the_steps_added_parts_of_every_kind(steps: Steps) -> None:
    """The incremental path was exercised: each later build added structure parts, and parts that
    sort before existing ones (MSA m-, component c-) so rows had to be merged in part order."""
    new_parts = steps.parts["added"] - steps.parts["unchanged"]
    assert {p[:2] for p in new_parts} >= {"s-", "m-"}, new_parts
    assert {p[:2] for p in steps.parts["new-ccd"] - steps.parts["added"]} >= {"s-", "c-"}
    assert steps.parts["unchanged"] == steps.parts["first"]


def test_a_build_with_no_new_part_rewrites_no_index_file(steps: Steps) -> None:
    assert steps.summaries["unchanged"].n_built == 0
    assert steps.stamps["unchanged"] == steps.stamps["first"]  # same files: same inodes, same mtimes
    before = _stamps(steps.store)
    rebuild_index(steps.store)
    assert _stamps(steps.store) == before


def test_the_index_holds_the_latest_version_of_each_entry(steps: Steps) -> None:
    store = featurecache.open_store(steps.store)
    ids = sorted(store.ids)
    assert ids == sorted(["102m", "1psm", "2q2k", "7DDO", "721p-assembly1", "1A8O"])
    entries = store.entries.to_pylist()
    edited = (steps.inputs / "102m.cif").read_bytes()
    row = next(r for r in entries if r["id"] == "102m")
    assert row["source_sha256"] == hashlib.sha256(edited).hexdigest()
    # the entry of the last build (102m, which uses HEM) lives in a part that build wrote
    new = steps.parts["new-ccd"] - steps.parts["added"]
    assert {r["id"] for r in entries if r["part"] in new} == {"102m"}
    assert verify_store(steps.store) == []


def test_summary_tells_replaced_from_rebuilt(steps: Steps) -> None:
    added, new_ccd = steps.summaries["added"], steps.summaries["new-ccd"]
    assert (added.n_replaced, added.n_rebuilt, added.n_built) == (1, 0, 4)
    assert (new_ccd.n_replaced, new_ccd.n_rebuilt, new_ccd.n_built) == (0, 1, 1)
    console = Console(record=True, width=200)
    render_summary(new_ccd, console)
    text = console.export_text()
    assert "rebuilt" in text and "same file): CCD definitions changed: 1 entry, codes HEM (1)" in text
    assert "new content" not in text
    console = Console(record=True, width=200)
    render_summary(added, console)
    text = console.export_text()
    assert "replaced" in text and "new content" in text and "new CCD" not in text
    assert added.previous_pdb_dir is None and "previous build read" not in text  # the same --pdb-dir


def test_an_entry_replaced_from_another_pdb_dir_names_the_directory_it_came_from(
    steps: Steps, tmp_path: Path
) -> None:
    """Review R4 LOW 6: a file of the same relative path in another --pdb-dir replaced a stored
    entry and the summary said "an input with the same path", as if the file had been rewritten in
    place. It now names the directory the store's previous build read."""
    store = shutil.copytree(steps.store, tmp_path / "s")
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "102m.cif").write_bytes((steps.inputs / "102m.cif").read_bytes() + b"#\n")
    summary = build_store(store, other, workers=1, msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd")
    assert (summary.n_replaced, summary.n_built) == (1, 1)
    assert summary.previous_pdb_dir == str(steps.inputs)
    console = Console(record=True, width=400)
    render_summary(summary, console)
    (row,) = [line for line in console.export_text().splitlines() if "  replaced " in line]
    assert (
        f"the store's previous build read {steps.inputs}: these entries now come from this --pdb-dir" in row
    )
    # the same directory through a link is no other directory
    (tmp_path / "link").symlink_to(other)
    (other / "102m.cif").write_bytes((other / "102m.cif").read_bytes() + b"#\n")
    again = build_store(store, tmp_path / "link", workers=1, msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd")
    assert (again.n_replaced, again.previous_pdb_dir) == (1, None)


def test_store_size_is_every_file_under_the_store(steps: Steps) -> None:
    assert store_bytes(steps.store) == _du(steps.store)
    # the summary's size is taken at the end of the build (the index is final by then)
    assert steps.summaries["new-ccd"].store_bytes == _du(steps.store)


def test_a_stale_index_a_removed_part_and_a_lost_manifest_fall_back_to_every_part(
    steps: Steps, tmp_path: Path
) -> None:
    store = shutil.copytree(steps.store, tmp_path / "s")
    expect = _full_rebuild(store, tmp_path / "expect")
    # an index file replaced behind the build's back (readable, but not the one it wrote)
    entries = read_table(store / "index" / "entries.arrow", memory_map=False)
    replace_table(store / "index" / "entries.arrow", entries.slice(0, 2))
    rebuild_index(store)
    assert _index_files(store) == expect
    # the kept rows and their manifest gone
    shutil.rmtree(store / "index" / ".part-rows")
    replace_table(store / "index" / "chains.arrow", pa.table({"x": [1]}))
    rebuild_index(store)
    assert _index_files(store) == expect
    # a part removed: its entries leave the index (the kept rows still hold them)
    last = max(p for p in complete_parts(store) if p.name.startswith("s-"))
    gone = read_table(last / "_index" / "entries.arrow", memory_map=False).column("id").to_pylist()
    shutil.rmtree(last)
    rebuild_index(store)
    assert _index_files(store) == _full_rebuild(store, tmp_path / "expect-removed")
    now = read_table(store / "index" / "entries.arrow").select(["id", "part"]).to_pylist()
    assert all(r["part"] != last.name for r in now) and {r["id"] for r in now} >= set(gone)  # older versions
