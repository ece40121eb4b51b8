"""A write to the store that the OS refuses during a build (a file-size limit: EFBIG; an immutable
index: EPERM; a full disk or a quota the same way) ends the build with one line naming the store
file and the OS's reason, exit status 3 (README: unwritable output), not a traceback and exit 1
(review R3 finding 2): not an input's failure either (a structure part whose write failed was
listed as "the worker process died while featurizing this file"). The parts finished before stay
valid and the same build run again once the cause is gone completes.

The limit is set in the build's process (``RLIMIT_FSIZE``, inherited by its Dask workers); Python
ignores SIGXFSZ, so a write past it raises EFBIG instead of killing the writer. Real CLI builds on
real corpus files, one worker; the thresholds come from a reference build's own file sizes. The
builds that fail run on an embedded LocalCluster of their own (the limit must reach its workers;
their logs are the CLI's stderr, checked for tracebacks); the builds that only make a store or
complete it again (exit 0 asserted) run on the session's 1-worker cluster (tests/clusters.py),
which saves a cluster start and shutdown each, by the CLI in this process (as verify), which saves
a Python process start.
"""

from __future__ import annotations

import errno
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from featurecache.store.index import read_table
from tests.clusters import scheduler_args
from tests.conftest import MSAS, STRUCTURES, build_store, cli_in_process


def _inputs(tmp: Path) -> tuple[Path, Path]:
    pdb, msa = tmp / "pdb", tmp / "msa"
    pdb.mkdir()
    for name in ("3zee.cif", "5wkd.pdb"):
        shutil.copy(STRUCTURES / name, pdb)
    shutil.copytree(MSAS / "openfold" / "3zee_A", msa / "3zee_A")
    return pdb, msa


def _build(
    pdb: Path, msa: Path | None, out: Path, fsize: int | None = None, shared: bool = False
) -> subprocess.CompletedProcess[str]:
    """``featurecache build`` (1 worker) in a process of its own, its files limited to ``fsize`` bytes;
    ``shared``: on the session's 1-worker cluster (``--scheduler``) instead of an embedded one (which
    the limit would not reach), by the CLI in this process (tests/conftest.cli_in_process)."""
    assert not (shared and fsize is not None), "the limit must reach the build's workers"

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    cluster = scheduler_args(1) if shared else ["--workers", "1"]
    args = ["build", "--pdb-dir", str(pdb), *(["--msa-dir", str(msa)] if msa else []), "--out", str(out),
            *cluster, "--no-progress"]  # fmt: skip
    if shared:  # no limit, no cluster of its own: the same CLI in this process saves a Python start
        run = cli_in_process(*args)
        return subprocess.CompletedProcess(args, run.returncode, run.stdout, run.stderr)
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          preexec_fn=limit, timeout=300)  # fmt: skip


def _largest(files: list[Path]) -> int:
    return max(f.stat().st_size for f in files if f.is_file())


def _one_line(proc: subprocess.CompletedProcess[str], pattern: str) -> None:
    """Exit 3 with exactly one error line, matching ``pattern``; no traceback, Dask's included."""
    assert proc.returncode == 3, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and re.fullmatch(pattern, errors[0]), proc.stderr
    assert "Traceback" not in proc.stderr and "Compute Failed" not in proc.stderr, proc.stderr


def _part_dirs(store: Path) -> list[str]:
    """The part directories of ``store`` (complete or temp)."""
    parts = store / "parts"
    return sorted(p.name for p in parts.iterdir() if p.is_dir()) if parts.is_dir() else []


def _hashes(store: Path, table: str) -> list[tuple[str, str]]:
    t = read_table(store / "index" / f"{table}.arrow", memory_map=False)
    key = "id" if table == "entries" else "key"
    return sorted(zip(t.column(key).to_pylist(), t.column("content_hash").to_pylist(), strict=True))


def _no_failures(store: Path) -> None:
    f = store / "index" / "failures.arrow"
    assert not f.exists() or read_table(f, memory_map=False).num_rows == 0  # not blamed on an input


def _rerun_completes(pdb: Path, msa: Path | None, store: Path, ref: Path) -> None:
    again = _build(pdb, msa, store, shared=True)
    assert again.returncode == 0, again.stderr
    verify = cli_in_process("verify", str(store))  # the CLI, in this process
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert _hashes(store, "entries") == _hashes(ref, "entries")
    if msa is not None:
        assert _hashes(store, "msas") == _hashes(ref, "msas")


@pytest.mark.timeout(600)
def test_a_part_write_past_a_file_size_limit_ends_the_build_in_one_line(tmp_path: Path) -> None:
    pdb, msa = _inputs(tmp_path)
    ref = tmp_path / "ref"
    build_store(ref, pdb, msa_dir=msa, workers=1)
    parts = list((ref / "parts").glob("*/**/*"))
    msa_files = [f for f in parts if f.relative_to(ref / "parts").parts[0].startswith("m-")]
    structure_files = [f for f in parts if f.relative_to(ref / "parts").parts[0].startswith("s-")]
    other_files = [f for f in ref.rglob("*") if f not in msa_files]
    too_large = f"File too large|{re.escape(os.strerror(errno.EFBIG))}"

    # an MSA part: a limit above every other file of the store, below its MSA residues shard
    limit = _largest(other_files) + 1024
    assert limit < _largest(msa_files)
    store = tmp_path / "msa_part"
    proc = _build(pdb, msa, store, fsize=limit)
    _one_line(
        proc, rf"error: cannot write the store at {re.escape(str(store))}/parts/\.tmp-m-\S+: ({too_large})"
    )
    _no_failures(store)
    # the finished structure part is kept, the MSA part's temp dir is gone
    assert _part_dirs(store) == ["s-000000"]
    _rerun_completes(pdb, msa, store, ref)

    # a structure part (3zee and 5wkd in one): a limit below its largest file (3zee's atoms)
    limit = _largest(structure_files) - 1
    store = tmp_path / "structure_part"
    proc = _build(pdb, msa, store, fsize=limit)
    _one_line(
        proc, rf"error: cannot write the store at {re.escape(str(store))}/parts/\.tmp-s-\S+: ({too_large})"
    )
    _no_failures(store)  # before: split, 5wkd built, 3zee listed as "the worker process died ..."
    assert _part_dirs(store) == []
    _rerun_completes(pdb, msa, store, ref)


@pytest.mark.timeout(600)
def test_an_index_the_build_cannot_write_ends_it_in_one_line(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "5wkd.pdb", pdb)
    store = tmp_path / "store"
    assert _build(pdb, None, store, shared=True).returncode == 0
    shutil.copy(STRUCTURES / "3zee.cif", pdb)
    ref = tmp_path / "ref"
    build_store(ref, pdb, workers=1)
    # immutable: even root gets EPERM (a read-only mount says EROFS, permissions EACCES: the same path)
    if subprocess.run(["chattr", "+i", str(store / "index")], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a file system that has it)")
    try:
        proc = _build(pdb, None, store)
    finally:
        subprocess.run(["chattr", "-i", str(store / "index")], check=True)
    _one_line(proc, rf"error: cannot write the store at {re.escape(str(store))}/index/\S+\.arrow: "
                    rf"{re.escape(os.strerror(errno.EPERM))}")  # fmt: skip
    _no_failures(store)
    _rerun_completes(pdb, None, store, ref)
