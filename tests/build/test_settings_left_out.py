"""A build that leaves out a setting its store records is refused (review R15 s40 #2).

Before, re-running `featurecache build` over a store built with ``--ccd`` (or ``--msa-depth 16``,
``--keep-cryst-aids``) but without that option rebuilt every entry or MSA at the default, replacing
the served ones, with exit status 0 and only a generic "no --ccd" warning: on a PDB-scale store an
hours-long, downgrading rebuild from a forgotten flag. Now it is a usage error (exit 2) naming each
setting left out, and nothing is written; given, the same settings rebuild nothing.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import featurecache
from tests.clusters import scheduler_args
from tests.conftest import SAMPLES, CliRun, cli_in_process, featurecache_at


def _cli(*args: str | Path) -> CliRun:
    """A build on the session's 1-worker cluster (``scheduler_args``): the same CLI, in this process
    (tests/conftest.py; a build on an external cluster leaves no thread or process running), which
    saves a Python process start each (the imports of the CLI, Dask and RDKit)."""
    return cli_in_process(*map(str, args))


def _refused(*args: str | Path) -> CliRun:
    """A build the test expects refused before it starts (exit 2): the same CLI, in this process."""
    return cli_in_process(*map(str, args))


def _digest(store: Path) -> str:
    """Every file of the store (root metadata, index, parts), by path and bytes."""
    h = hashlib.sha256()
    for p in sorted(store.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(store)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def test_a_build_leaving_out_recorded_settings_is_refused(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)  # heme (a CCD component) and SO4 (an aid)
    store = tmp_path / "store"
    base = ["build", "--pdb-dir", pdb, "--msa-dir", SAMPLES / "msas", "--out", store, *scheduler_args(1),
            "--no-progress"]  # fmt: skip
    settings = ["--ccd", SAMPLES / "ccd", "--msa-depth", "16", "--keep-cryst-aids"]
    first = _cli(*base, *settings)
    assert first.returncode == 0, first.stdout + first.stderr
    before = _digest(store)
    keys = featurecache.open_store(store).entries.column("key").to_pylist()

    left_out = _refused(*base)
    assert left_out.returncode == 2, left_out.stdout + left_out.stderr
    err = left_out.stderr
    assert f"{store} records build settings this command leaves out" in err, err
    assert f"--ccd {SAMPLES / 'ccd'}" in err and "--msa-depth 16" in err and "--keep-cryst-aids" in err, err
    assert "nothing was written" in err
    assert _digest(store) == before

    # one left out is enough, and it alone is named
    one = _refused(*base, "--ccd", SAMPLES / "ccd", "--keep-cryst-aids")
    assert one.returncode == 2 and "--msa-depth 16" in one.stderr and "--ccd" not in one.stderr, one.stderr
    both = _refused(*base, *settings, "--no-ccd")
    assert both.returncode == 2 and "--ccd and --no-ccd" in both.stderr, both.stderr
    aids = _refused(*base, *settings, "--drop-cryst-aids")
    assert aids.returncode == 2 and "--keep-cryst-aids and --drop-cryst-aids" in aids.stderr, aids.stderr
    assert _digest(store) == before

    again = _cli(*base, *settings)  # the recorded settings given: nothing to rebuild
    assert again.returncode == 0, again.stdout + again.stderr
    assert featurecache.open_store(store).entries.column("key").to_pylist() == keys


def test_what_the_directory_was_built_with_decides_not_the_latest_build(tmp_path: Path) -> None:
    """Review R19 s41 #1: the check read the settings of the store's latest build only, so a build of
    another directory with other settings switched it off for the first; and #2: a build leaving out
    ``--conformer-timeout`` was refused though the timeout is in no key and nothing is rebuilt."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", a)  # heme (a CCD component) and SO4 (an aid)
    shutil.copy(SAMPLES / "structures" / "1psm.cif", b)
    store = tmp_path / "store"

    def build(pdb: Path, *settings: str | Path) -> CliRun:
        return _cli("build", "--pdb-dir", pdb, "--out", store, *scheduler_args(1), "--no-progress", *settings)

    first = build(a, "--ccd", SAMPLES / "ccd", "--keep-cryst-aids", "--conformer-timeout", "60")
    assert first.returncode == 0, first.stdout + first.stderr
    other = build(b, "--no-ccd", "--drop-cryst-aids")
    assert other.returncode == 0, other.stdout + other.stderr
    keys = featurecache.open_store(store).entries.column("key").to_pylist()
    before = _digest(store)

    left_out = _refused("build", "--pdb-dir", a, "--out", store, *scheduler_args(1), "--no-progress")
    assert left_out.returncode == 2, left_out.stdout + left_out.stderr
    err = left_out.stderr
    assert f"--ccd {(SAMPLES / 'ccd').resolve()}" in err and "--keep-cryst-aids" in err, err
    assert "--conformer-timeout" not in err, err
    assert _digest(store) == before

    # the timeout left out: nothing of the store changes but the root's record of the latest build
    again = build(a, "--ccd", SAMPLES / "ccd", "--keep-cryst-aids")
    assert again.returncode == 0, again.stdout + again.stderr
    assert featurecache.open_store(store).entries.column("key").to_pylist() == keys


#: the last commit whose structure parts recorded no settings (session 40's HEAD)
BEFORE_SETTINGS = "e2d6983bbe47640c593a3637466c47cb262ace85"


def test_a_directory_built_before_parts_recorded_settings_is_still_judged(tmp_path: Path) -> None:
    """Review R22 s41 #1: once another directory's parts recorded their settings, a directory whose
    parts predate the record was judged by nothing: rebuilt without --ccd, exit 0. The root remembers
    only the latest build (here: another directory's, without --ccd), so the store's conformers of CCD
    definitions are what says its entries may have been built with one."""
    import os

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", a)  # heme: a CCD component
    shutil.copy(SAMPLES / "structures" / "1psm.cif", b)
    store = tmp_path / "store"
    old = featurecache_at(BEFORE_SETTINGS, tmp_path / "old")
    first = subprocess.run(
        [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(a), "--ccd", str(SAMPLES / "ccd"),
         "--out", str(store), "--workers", "1", "--no-progress"],
        capture_output=True, text=True, cwd=old, env={**os.environ, "PYTHONPATH": str(old)}, timeout=300,
    )  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr

    def build(pdb: Path, *settings: str | Path) -> CliRun:
        return _cli("build", "--pdb-dir", pdb, "--out", store, *scheduler_args(1), "--no-progress", *settings)

    other = build(b, "--no-ccd")
    assert other.returncode == 0, other.stdout + other.stderr
    before = _digest(store)
    left_out = _refused("build", "--pdb-dir", a, "--out", store, *scheduler_args(1), "--no-progress")
    assert left_out.returncode == 2, left_out.stdout + left_out.stderr
    assert "may have been built with --ccd" in left_out.stderr, left_out.stderr
    assert _digest(store) == before
    kept = build(a, "--ccd", SAMPLES / "ccd")  # given: accepted
    assert kept.returncode == 0, kept.stdout + kept.stderr
