"""Failure rows of inputs that change after the build listed --pdb-dir, before their part task reads
them, name the file and say what happened, as every failure record does (file, stage, reason):
a file removed, one replaced by a directory, one rewritten (read half-written). Before, the row's
message was the bare exception text ("[Errno 2] No such file or directory: '/abs/path'", or the
parser's error with no word that the file had changed since the build hashed it).

Real sample files, listed by the build's own ``discover``, then changed on disk, then the real part
task (what a Dask worker runs) writes its part; the rows are read back from the store's index."""

from __future__ import annotations

import shutil
from pathlib import Path

import featurecache
from featurecache.build.discover import discover
from featurecache.build.run import BuildSummary, _accumulate, changed_inputs_line
from featurecache.build.tasks import build_structure_part, worker_versions
from featurecache.store.index import rebuild_index
from featurecache.store.root import init_store
from tests.conftest import SAMPLES

NAMES = ("1psm.cif", "2q2k.cif", "102m.cif", "1A8O.pdb")


def test_inputs_changed_after_discovery_fail_naming_the_file_and_what_happened(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in NAMES:
        shutil.copy(SAMPLES / "structures" / name, pdb)
    out = tmp_path / "store"
    init_store(out, {"config_hash": "t", "entry_config_hash": "t", "config": {}})
    inputs = discover(pdb, "t", {})
    assert sorted(i.rel for i in inputs) == sorted(NAMES) and all(i.sha256 for i in inputs)

    # between the listing and the part task: one removed, one replaced by a directory, one
    # rewritten and read while a third of it is written; 1A8O.pdb unchanged
    (pdb / "1psm.cif").unlink()
    (pdb / "2q2k.cif").unlink()
    (pdb / "2q2k.cif").mkdir()
    full = (pdb / "102m.cif").read_bytes()
    (pdb / "102m.cif").write_bytes(full[: len(full) // 3])

    res = build_structure_part(str(out), "s-000000", inputs, "t", versions=worker_versions())
    assert res.n_entries == 1 and res.n_failed == 3, res
    rebuild_index(out)
    store = featurecache.open_store(out)
    assert store.ids == ["1A8O"]
    rows = {r["path"]: r for r in store.failures.to_pylist()}
    assert sorted(rows) == ["102m.cif", "1psm.cif", "2q2k.cif"]

    gone = rows["1psm.cif"]
    assert (gone["stage"], gone["error_class"]) == ("read", "FileNotFoundError")
    assert gone["message"].startswith("cannot read 1psm.cif: the file is gone"), gone["message"]
    assert "during the build" in gone["message"] and "Errno" not in gone["message"], gone["message"]

    replaced = rows["2q2k.cif"]
    assert (replaced["stage"], replaced["error_class"]) == ("read", "IsADirectoryError")
    assert replaced["message"].startswith("cannot read 2q2k.cif: Is a directory"), replaced["message"]
    assert "changed during the build" in replaced["message"], replaced["message"]

    # the half-written file fails where its bytes stop making sense (the parser), and the row says
    # the file changed since it was listed: how many bytes were read, how many were listed
    rewritten = rows["102m.cif"]
    assert rewritten["stage"] == "parse", rewritten
    listed = next(i for i in inputs if i.rel == "102m.cif")
    assert listed.size == len(full)
    assert (
        f"the file changed during the build: {len(full) // 3} bytes read, {len(full)} when"
        in rewritten["message"]
    )
    # its key is that of the bytes read, not those listed: the next build sees the whole file as new
    assert rewritten["key"] != listed.key


def test_an_unchanged_unreadable_input_says_why_without_blaming_the_build(tmp_path: Path) -> None:
    """A broken symbolic link could not be read when the build listed --pdb-dir either: the row
    names the file and the reason, without the "during the build" story."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    (pdb / "gone.cif").symlink_to(tmp_path / "missing.cif")
    out = tmp_path / "store"
    init_store(out, {"config_hash": "t", "entry_config_hash": "t", "config": {}})
    inputs = discover(pdb, "t", {})
    res = build_structure_part(str(out), "s-000000", inputs, "t", versions=worker_versions())
    assert res.n_failed == 1
    (row,) = res.failures
    # listed unread when the build listed --pdb-dir, naming where the link points (review R1, low)
    assert (row["path"], row["stage"]) == ("gone.cif", "discover")
    assert row["message"] == (
        f"broken symbolic link: gone.cif -> {tmp_path}/missing.cif: No such file or directory; not read"
    ), row["message"]


def test_an_input_that_still_parses_after_it_changed_is_named(tmp_path: Path) -> None:
    """A file cut at a line boundary while the build ran (a copy still being written) can parse as
    a shorter structure. It is stored as read, but the part task reports it with both sizes and the
    build's warning names it, so a partial structure is never stored without a word (review R1 of
    session 32, case f02_change: 102m listed at 198,212 bytes, read at 100,000, no note)."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1A8O.pdb", "102m.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    out = tmp_path / "store"
    init_store(out, {"config_hash": "t", "entry_config_hash": "t", "config": {}})
    inputs = discover(pdb, "t", {})
    full = (pdb / "1A8O.pdb").read_bytes()
    lines = full.splitlines(keepends=True)
    cut = b"".join(lines[: len(lines) // 2])  # whole ATOM lines: a valid, shorter PDB file
    (pdb / "1A8O.pdb").write_bytes(cut)

    res = build_structure_part(str(out), "s-000000", inputs, "t", versions=worker_versions())
    assert res.n_entries == 2 and res.n_failed == 0, res
    assert res.changed == [f"1A8O.pdb ({len(cut)} bytes read, {len(full)} listed)"]

    summary = BuildSummary(str(out))
    _accumulate(summary, res)
    line = changed_inputs_line(summary)
    assert line is not None and line.startswith("1 structure files changed during the build"), line
    assert f"1A8O.pdb ({len(cut)} bytes read, {len(full)} listed)" in line
    assert changed_inputs_line(BuildSummary(str(out))) is None
