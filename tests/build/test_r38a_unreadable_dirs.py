"""Review R38a s50 #1 (build side) and #2: a directory of the inputs that cannot be listed or
searched, and FIFOs, broken links and link loops under ``--msa-dir``.

#1: a listed failure whose path cannot be checked (its directory is no longer searchable) crashed
the build in ``withdraw_failures`` (``Path.exists`` raises PermissionError): it is not known to be
gone, so it stays listed, with one warning naming it. #2: a subdirectory of ``--pdb-dir`` that
cannot be listed was a log line only (exit 0, no record), and unread objects under ``--msa-dir``
too: each is a failure row now (stage ``discover`` / ``msa``), withdrawn once it is readable (or
gone) again; the entries stored from the directory's files are kept.

As root, permissions bite only without the DAC capabilities: the CLI runs under ``setpriv
--bounding-set -dac_override,-dac_read_search``; a user other than root gets them directly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from featurecache.store.reader import open_store
from tests.conftest import SAMPLES

DROP = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []


def _no_dac() -> None:
    """Skip where permissions cannot be made to bite (root without a working setpriv)."""
    if not DROP:
        return
    if shutil.which("setpriv") is None:
        pytest.skip("as root, needs setpriv (util-linux) to drop the DAC capabilities")
    probe = subprocess.run([*DROP, "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot drop the DAC capabilities here: {probe.stderr.decode(errors='replace')}")


def _build(pdb: Path, out: Path, msa: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(pdb),
            *(["--msa-dir", str(msa)] if msa else []), "--ccd", str(SAMPLES / "ccd"), "--out", str(out),
            "--workers", "1", "--no-progress", "--no-dashboard"]  # fmt: skip
    env = {**os.environ, "FEATURECACHE_DASHBOARD": "0", "COLUMNS": "250"}
    r = subprocess.run([*DROP, *args], capture_output=True, text=True, timeout=300, env=env)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r


def _q2k_inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``--pdb-dir`` with 2q2k.cif, ``--msa-dir`` with its chain A's alignment (OpenFold layout), and
    the store's path: (pdb, msa, out)."""
    pdb, msa, out = tmp_path / "pdb", tmp_path / "msa", tmp_path / "store"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    (msa / "2q2k_A").mkdir(parents=True)
    shutil.copy(SAMPLES / "msas" / "openfold" / "2q2k_A" / "mgnify_hits.sto", msa / "2q2k_A")
    return pdb, msa, out


def _failures(out: Path) -> dict[str, dict[str, str]]:
    f = open_store(out).failures
    return {r["path"]: r for r in f.to_pylist()}


def test_unlistable_pdb_subdirectory_is_a_failure_and_keeps_stored_entries(tmp_path: Path) -> None:
    _no_dac()
    pdb, out = tmp_path / "pdb", tmp_path / "store"
    (pdb / "sub").mkdir(parents=True)
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    shutil.copy(SAMPLES / "structures" / "1A8O.pdb", pdb / "sub")
    (pdb / "sub" / "bad.cif").write_text("garbage\n")
    r = _build(pdb, out)
    assert r.returncode == 1, r.stderr[-2000:]  # bad.cif
    assert set(_failures(out)) == {"sub/bad.cif"}
    ids = set(open_store(out).entries.column("id").to_pylist())
    assert ids == {"102m", "1A8O"}

    (pdb / "sub").chmod(0)
    try:
        for _ in range(2):  # the first build records the directory's failure, the second finds it listed
            r = _build(pdb, out)
            assert r.returncode == 1, r.stderr[-2000:]
            fails = _failures(out)
            # the directory is a failure naming it; bad.cif's failure is not withdrawn (not known to be gone)
            assert set(fails) == {"sub/", "sub/bad.cif"}, fails
            assert fails["sub/"]["stage"] == "discover"
            assert "cannot list the directory sub/" in fails["sub/"]["message"]
            assert "Permission denied" in fails["sub/"]["message"]
            assert "cannot tell whether 1 path still exists" in r.stderr
            assert "sub/bad.cif" in r.stderr
            # the entry stored from the directory is kept
            assert set(open_store(out).entries.column("id").to_pylist()) == {"102m", "1A8O"}
    finally:
        (pdb / "sub").chmod(0o755)

    r = _build(pdb, out)  # readable again: the directory's failure is withdrawn
    assert r.returncode == 1, r.stderr[-2000:]
    assert set(_failures(out)) == {"sub/bad.cif"}
    assert set(open_store(out).entries.column("id").to_pylist()) == {"102m", "1A8O"}


def test_unread_objects_under_msa_dir_are_failures_of_stage_msa(tmp_path: Path) -> None:
    _no_dac()
    pdb, msa, out = _q2k_inputs(tmp_path)
    os.mkfifo(msa / "pipe.a3m")
    (msa / "dangle.a3m").symlink_to("nowhere.a3m")
    (msa / "l1.a3m").symlink_to("l2.a3m")
    (msa / "l2.a3m").symlink_to("l1.a3m")
    (msa / "locked" / "1psm_A").mkdir(parents=True)
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    shutil.copy(SAMPLES / "msas" / "openfold" / "1psm_A" / "mgnify_hits.sto", msa / "locked" / "1psm_A")
    os.rename(msa / "pipe.a3m", tmp_path / "pipe.a3m")  # the first build: the MSAs only
    r = _build(pdb, out, msa)
    os.rename(tmp_path / "pipe.a3m", msa / "pipe.a3m")
    (msa / "locked").chmod(0)
    try:
        r = _build(pdb, out, msa)
        assert r.returncode == 1, r.stderr[-2000:]
        fails = _failures(out)
        assert set(fails) == {"pipe.a3m", "dangle.a3m", "l1.a3m", "l2.a3m", "locked/"}, fails
        assert {f["stage"] for f in fails.values()} == {"msa"}
        assert "named pipe" in fails["pipe.a3m"]["message"]
        assert "broken symbolic link" in fails["dangle.a3m"]["message"]
        assert "cannot list the directory locked/" in fails["locked/"]["message"]
        # 1psm's MSA, stored from the directory, is kept and not reported as gone
        assert "source files are gone" not in r.stderr, r.stderr[-3000:]
        parts = sorted(p.name for p in (out / "parts").iterdir())
        r = _build(pdb, out, msa)  # a second build finds them listed: nothing written, nothing withdrawn
        assert r.returncode == 1, r.stderr[-2000:]
        assert sorted(p.name for p in (out / "parts").iterdir()) == parts
        assert set(_failures(out)) == set(fails)
    finally:
        (msa / "locked").chmod(0o755)
    (msa / "pipe.a3m").unlink()
    r = _build(pdb, out, msa)  # the FIFO gone and the directory readable: their failures are withdrawn
    assert set(_failures(out)) == {"dangle.a3m", "l1.a3m", "l2.a3m"}


def test_msa_under_a_searchable_but_unlistable_directory_is_not_sources_gone(tmp_path: Path) -> None:
    """Review R40c s51 #3: a directory under ``--msa-dir`` set to ``chmod 0o111`` can be searched but
    not listed. Its files are there (``discover.present`` is True), but this build could not list
    them: the stored MSA is kept and not reported as "sources gone", because a file lies under a
    directory that is a failure row (``under_unlisted``). ``chmod 0``, as in the test above, also
    makes the file impossible to check, which keeps the MSA by another rule."""
    _no_dac()
    pdb, msa, out = _q2k_inputs(tmp_path)
    os.renames(msa / "2q2k_A", msa / "sub" / "2q2k_A")
    r = _build(pdb, out, msa)
    assert r.returncode == 0, r.stderr[-2000:]
    msas = sorted(open_store(out).msas.select(["key", "sources"]).to_pylist(), key=lambda m: m["key"])
    assert ["sub/2q2k_A/mgnify_hits.sto"] in [m["sources"] for m in msas], msas
    (msa / "sub").chmod(0o111)
    try:
        r = _build(pdb, out, msa)
        assert r.returncode == 1, r.stderr[-2000:]  # the directory is a failure
        fails = _failures(out)
        assert set(fails) == {"sub/"}, fails
        assert fails["sub/"]["stage"] == "msa"
        assert "cannot list the directory sub/" in fails["sub/"]["message"]
        out_err = r.stdout + r.stderr
        assert "source files are gone" not in out_err, out_err[-3000:]  # neither the warning
        assert "sources gone" not in r.stdout, r.stdout[-3000:]  # nor the summary's row
        kept = open_store(out).msas.select(["key", "sources"]).to_pylist()
        assert sorted(kept, key=lambda m: m["key"]) == msas  # the MSA from files is kept
    finally:
        (msa / "sub").chmod(0o755)
