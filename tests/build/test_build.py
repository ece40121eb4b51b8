"""Building real stores on a real Dask LocalCluster: accounting, determinism, resume, crash safety."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

import featurecache
from featurecache.store.index import complete_parts, read_table
from featurecache.store.layout import TMP_PREFIX
from featurecache.store.verify import verify_store
from tests.conftest import (
    INTERRUPT_INPUTS,
    REPO,
    SOURCES_TSV,
    STRUCTURES,
    CliRun,
    build_store,
    cli_in_process,
    interrupt_inputs,
)

# Inputs whose SOURCES.tsv notes mark them malformed / without coordinates: they must be failures.
MUST_FAIL = {
    "1MOM_min.cif",
    "4Q9R_min.cif",
    "1bna-errors.cif",
    "r5wkdsf.ent",
    "5moo_header.pdb",
    "header.pdb",
}


def _sources() -> dict[str, str]:
    rows = {}
    for line in SOURCES_TSV.read_text().splitlines()[1:]:
        cols = line.split("\t")
        if cols[0].startswith("structures/"):
            rows[cols[0].split("/", 1)[1]] = cols[-1]
    return rows


def test_every_corpus_file_is_accounted_for(corpus_store: Path) -> None:
    store = featurecache.open_store(corpus_store)
    files = {p.name for p in STRUCTURES.iterdir() if p.is_file()}
    built = set(store.entries.column("source_path").to_pylist())
    failed = set(store.failures.column("path").to_pylist())
    assert built | failed == files
    assert not built & failed
    assert MUST_FAIL <= failed
    # every failure names the file, the stage and a reason
    for row in store.failures.to_pylist():
        assert row["stage"] in {"read", "parse", "tokenize", "featurize", "worker"} and row["message"]
    # EDGE rows of SOURCES.tsv: either a failure, or they parsed into a non-empty entry
    for name, notes in _sources().items():
        if notes.startswith("EDGE") and name in built:
            row = store.entries.filter(pc.equal(store.entries.column("source_path"), name)).to_pylist()[0]
            assert row["token_count"] > 0 and row["n_present_atoms"] > 0, name
    assert verify_store(corpus_store) == []


def test_ids_of_format_twins_are_distinct(corpus_store: Path) -> None:
    ids = set(featurecache.open_store(corpus_store).ids)
    assert {"1A8O.cif", "1A8O.pdb", "1LCD.cif", "1LCD.pdb"} <= ids
    assert "102m" in ids and "7a4d-assembly1" in ids


def test_entry_reads_only_its_rows(corpus_store: Path) -> None:
    store = featurecache.open_store(corpus_store)
    e = store.entry("102m")
    assert len(e.tokens["restype"]) == e.meta["token_count"] == e.n_tokens
    assert e.atoms["coords"].shape == (e.meta["atom_count"], 3)
    part = store.entry("102m", arrays=["tokens/restype"])
    assert list(part.tokens) == ["restype"] and not part.atoms
    np.testing.assert_array_equal(part.tokens["restype"], e.tokens["restype"])
    with pytest.raises(KeyError):
        store.entry("no-such-entry")


def _hashes(path: Path) -> dict[str, str]:
    t = featurecache.open_store(path).entries
    return dict(zip(t.column("id").to_pylist(), t.column("content_hash").to_pylist(), strict=True))


SUBSET = ["102m.cif", "721p-assembly1.cif", "7DDO.pdb", "2q2k.cif", "6wg6.bcif.gz", "1ffk.cif.gz", "2crb.cif.gz",
          "1A8O.cif", "1A8O.pdb", "4oz7.pdb", "1bna-errors.cif"]  # fmt: skip


@pytest.fixture(scope="module")
def subset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("subset")
    for name in SUBSET:
        shutil.copy(STRUCTURES / name, d / name)
    return d


def test_one_and_two_workers_give_identical_bytes(
    tmp_path: Path, subset_dir: Path, corpus_store: Path, ccd_dir: Path
) -> None:
    s1 = build_store(tmp_path / "w1", subset_dir, workers=1, part_size=3, ccd=ccd_dir, own_cluster=True)
    s2 = build_store(tmp_path / "w2", subset_dir, workers=2, part_size=5, ccd=ccd_dir, own_cluster=True)
    h1, h2 = _hashes(tmp_path / "w1"), _hashes(tmp_path / "w2")
    assert s1.n_built == s2.n_built == len(SUBSET) - 1
    assert h1 == h2
    # ... and equal to the same entries inside the full-corpus build (other part boundaries, other
    # neighbours, MSAs present)
    full = _hashes(corpus_store)
    assert {k: full[k] for k in h1} == h1
    # the arrays themselves are byte-identical, not just the recorded hashes
    a, b = featurecache.open_store(tmp_path / "w1"), featurecache.open_store(tmp_path / "w2")
    for eid in h1:
        ea, eb = a.entry(eid), b.entry(eid)
        for g in ("atoms", "tokens", "bonds", "interfaces"):
            for f, arr in getattr(ea, g).items():
                assert arr.tobytes() == getattr(eb, g)[f].tobytes(), (eid, g, f)


def test_rerun_skips_and_new_files_build_alone(tmp_path: Path, subset_dir: Path) -> None:
    d = tmp_path / "in"
    shutil.copytree(subset_dir, d)
    out = tmp_path / "store"
    first = build_store(out, d, workers=1, part_size=4)
    parts_before = {p.name for p in complete_parts(out)}
    again = build_store(out, d, workers=1, part_size=4)
    assert again.n_built == 0 and again.n_failed == 0 and again.n_skipped == len(SUBSET)
    assert {p.name for p in complete_parts(out)} == parts_before
    shutil.copy(STRUCTURES / "3u8v.cif", d / "3u8v.cif")
    third = build_store(out, d, workers=1, part_size=4)
    assert third.n_built == 1 and third.n_skipped == len(SUBSET)
    store = featurecache.open_store(out)
    assert "3u8v" in store.ids and len(store.ids) == first.n_built + 1
    assert verify_store(out) == []


def _cli(*args: str) -> CliRun:
    """``featurecache ARGS`` (info, verify): the real CLI, in this process (tests/conftest.py); the
    builds run in processes of their own (_cli_start)."""
    return cli_in_process(*args, cwd=REPO)


def _cli_start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "featurecache.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)  # fmt: skip


def test_exit_statuses(tmp_path: Path) -> None:
    """0: every input built; 1: an input failed (named, no traceback); 3: the store cannot be
    written; info lists the failure; verify 0 on a sound store. The three builds are independent
    and run at once (each is mostly a CLI start and a LocalCluster's)."""
    bad_dir, good_dir = tmp_path / "bad", tmp_path / "good"
    bad_dir.mkdir()
    good_dir.mkdir()
    for name in ("102m.cif", "1bna-errors.cif"):  # one input that builds, one that fails
        shutil.copy(STRUCTURES / name, bad_dir)
    shutil.copy(STRUCTURES / "102m.cif", good_dir)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    builds = {
        name: _cli_start("build", "--pdb-dir", str(pdb), "--out", str(out), "--workers", "1", "--no-progress")
        for name, pdb, out in (
            ("bad", bad_dir, tmp_path / "s"),
            ("ok", good_dir, tmp_path / "g"),
            ("fatal", good_dir, blocker / "store"),
        )
    }
    try:
        done = {name: (proc, *proc.communicate(timeout=600)) for name, proc in builds.items()}
    finally:
        for proc in builds.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    (bad, bad_out, bad_err), (ok, _, ok_err), (fatal, _, fatal_err) = done["bad"], done["ok"], done["fatal"]
    assert bad.returncode == 1, bad_err  # 1bna-errors.cif fails
    # named in the failures table, the build's result: on stdout
    assert "1bna-errors.cif" in bad_out and "Traceback" not in bad_err, (bad_out, bad_err)
    assert ok.returncode == 0, ok_err
    assert fatal.returncode == 3 and "Traceback" not in fatal_err
    info = _cli("info", str(tmp_path / "s"))
    assert info.returncode == 0 and "1bna-errors.cif" in info.stdout
    assert _cli("verify", str(tmp_path / "g")).returncode == 0


def test_verify_detects_tampering(two_entry_copy: Path) -> None:
    """A copy of the session's two-entry store (tests/conftest.py: built sound, verified sound)."""
    out = two_entry_copy
    part = next(p for p in complete_parts(out) if p.name.startswith("s-"))
    import zarr

    # flip one byte of the first atom record behind the store's back
    arr = zarr.open_array(str(part / "atoms"), mode="r+")
    raw = arr[...]
    raw[0, 0] ^= 0xFF
    arr[...] = raw
    problems = verify_store(out)
    assert problems and "content hash" in problems[0]
    assert _cli("verify", str(out)).returncode == 4


@pytest.mark.timeout(600)
def test_sigkill_mid_build_then_resume(tmp_path: Path) -> None:
    """Kill the build with SIGKILL while parts are being written; the store stays readable and a
    re-run finishes without redoing completed parts and ends equal to an uninterrupted build."""
    inputs = interrupt_inputs(tmp_path / "in")
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(inputs), "--out", str(out),
           "--workers", "2", "--part-size", "1", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + 300
    while time.time() < deadline:
        done = [p for p in complete_parts(out)] if (out / "parts").is_dir() else []
        if len(done) >= 8:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker processes, mid-run
    proc.wait()
    parts_at_kill = {p.name: (p / "_index" / "part.json").read_text() for p in complete_parts(out)}
    assert 8 <= len(parts_at_kill) < len(INTERRUPT_INPUTS), "the kill should land mid-build"
    # readable right after the kill: only complete parts are visible, every indexed entry reads;
    # verify names what the index has not caught up with (the parts written since its last refresh)
    store = featurecache.open_store(out)
    for eid in store.ids:
        store.entry(eid)
    problems = verify_store(out)
    assert all("is not in the index (stale index" in p for p in problems), problems
    in_parts = {eid for p in complete_parts(out) if (p / "_index" / "entries.arrow").is_file()
                for eid in read_table(p / "_index" / "entries.arrow").column("id").to_pylist()}  # fmt: skip
    assert {p.split()[1] for p in problems} == in_parts - set(store.ids)
    # re-run: completes the job without touching the parts that were done
    summary = build_store(out, inputs, workers=2, part_size=1)
    assert summary.n_skipped >= len(parts_at_kill)
    for name, manifest in parts_at_kill.items():
        assert (out / "parts" / name / "_index" / "part.json").read_text() == manifest
    assert not [p for p in (out / "parts").iterdir() if p.name.startswith(TMP_PREFIX)]
    assert verify_store(out) == []
    # same entry set (and bytes) as an uninterrupted build
    ref = tmp_path / "ref"
    build_store(ref, inputs, workers=2, part_size=16)
    assert _hashes(out) == _hashes(ref)
    assert set(featurecache.open_store(out).failures.column("path").to_pylist()) == set(
        featurecache.open_store(ref).failures.column("path").to_pylist()
    )
