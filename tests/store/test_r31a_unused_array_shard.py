"""After the documented repair of a deleted MSA shard (``verify --repair``, the build it prints,
``prune``), ``verify`` says ok (review R31a s47 #1).

The repair takes the damaged MSA out of the index and the build rebuilds it into a new part; its
old part still serves its other MSAs, so ``prune`` keeps it, with the taken-out MSA's
``residues/NNNNNN`` array and its missing file. ``verify`` reported that file as a MISMATCH for good
(exit 4) and ``--repair`` said there was nothing it could fix. A missing file that no MSA the
store serves reads is now a note; one that a served MSA reads is still a MISMATCH.

The repo's sample store (real structures, MSAs and CCD), one shard file deleted as a bad copy
deletes it; every step a real CLI process."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import featurecache
from featurecache.store.verify import verify_store
from tests.conftest import cli_in_process


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``featurecache ARGS``: verify and prune by the CLI in this process (tests/conftest.py), a
    build (its embedded cluster) in a process of its own."""
    if args[0] != "build":
        run = cli_in_process(*args)
        return subprocess.CompletedProcess(["featurecache", *args], run.returncode, run.stdout, run.stderr)
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip


def _data_file(array_dir: Path) -> Path:
    (shard,) = [f for f in array_dir.rglob("*") if f.is_file() and f.name != "zarr.json"]
    return shard


@dataclass
class Repaired:
    store: Path
    part: str  # the MSA part that lost a shard, kept by prune: it serves other MSAs
    key: str  # the MSA whose residues shard was deleted
    array: str  # its residues array in ``part``
    shard: Path  # the deleted file
    before: np.ndarray  # the MSA's residues as built
    runs: dict[str, subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def repaired(sample_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Repaired:
    store = Path(shutil.copytree(sample_store, tmp_path_factory.mktemp("r31a_unused") / "s"))
    msas = featurecache.open_store(store).msas.to_pylist()
    # a part of several MSAs: its last MSA loses its residues shard
    part = next(p for p in sorted({r["part"] for r in msas}) if sum(r["part"] == p for r in msas) > 1)
    row = max((r for r in msas if r["part"] == part), key=lambda r: r["array"])
    shard = _data_file(store / "parts" / part / row["array"])
    before = featurecache.open_store(store).msa(row["key"]).residues
    shard.unlink()
    runs = {"verify": _cli("verify", str(store), "--no-progress")}
    runs["repair"] = _cli("verify", str(store), "--repair", "--no-progress")
    command = re.search(r"now run `(featurecache build [^`]*)`", runs["repair"].stdout)
    assert command, runs["repair"].stdout + runs["repair"].stderr
    runs["build"] = _cli(*shlex.split(command[1])[1:], "--workers", "1", "--no-progress")
    runs["prune"] = _cli("prune", str(store))
    runs["verify again"] = _cli("verify", str(store), "--no-progress")
    return Repaired(store, part, row["key"], row["array"], shard, before, runs)


def test_verify_says_ok_after_the_documented_repair(repaired: Repaired) -> None:
    r, runs = repaired, repaired.runs
    line = f"part {r.part}: array {r.array} is missing its data file {r.shard}"
    first = runs["verify"]
    assert first.returncode == 4 and f"MISMATCH {line}" in first.stdout, first.stdout
    assert runs["repair"].returncode == 0, runs["repair"].stdout + runs["repair"].stderr
    assert f"removed from the index: MSA {r.key[:12]}" in runs["repair"].stdout, runs["repair"].stdout
    assert runs["build"].returncode == 0, runs["build"].stdout[-3000:] + runs["build"].stderr[-3000:]
    assert runs["prune"].returncode == 0, runs["prune"].stdout + runs["prune"].stderr
    # the part still serves its other MSAs: prune keeps it, with the array of the MSA taken out
    assert (r.store / "parts" / r.part / r.array).is_dir() and not r.shard.exists()
    s = featurecache.open_store(r.store)
    rows = {row["key"]: row for row in s.msas.to_pylist()}
    assert rows[r.key]["part"] != r.part and any(row["part"] == r.part for row in rows.values())
    assert np.array_equal(s.msa(r.key).residues, r.before)  # rebuilt as it was

    done = runs["verify again"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok: store verified", done.stdout
    assert "MISMATCH" not in done.stdout
    # said, as a note: nothing the store serves reads it
    assert f"note: {line}, which no MSA the store serves reads" in done.stderr, done.stderr
    assert f"`featurecache prune` deletes it with part {r.part}" in done.stderr


def test_a_missing_shard_an_msa_the_store_serves_reads_is_still_a_mismatch(
    repaired: Repaired, tmp_path: Path
) -> None:
    """In the same part as the unused array: a served MSA's own residues file, then the part's
    shared row records (which every served MSA of the part reads a range of)."""
    assert repaired.runs["verify again"].returncode == 0
    store = Path(shutil.copytree(repaired.store, tmp_path / "s"))
    s = featurecache.open_store(store)
    served = [row for row in s.msas.to_pylist() if row["part"] == repaired.part]
    live = _data_file(store / "parts" / repaired.part / served[0]["array"])
    live.unlink()
    gone = store / repaired.shard.relative_to(repaired.store)
    unused = f"part {repaired.part}: array {repaired.array} is missing its data file {gone}"
    live_line = f"part {repaired.part}: array {served[0]['array']} is missing its data file {live}"
    problems = verify_store(store)
    assert live_line in problems and unused not in problems, problems
    run = _cli("verify", str(store), "--no-progress")
    assert run.returncode == 4, run.stdout + run.stderr
    assert f"MISMATCH {live_line}" in run.stdout, run.stdout
    assert f"MISMATCH MSA {served[0]['key']}: unreadable" in run.stdout
    assert f"note: {unused}, which no MSA the store serves reads" in run.stderr

    rows_file = _data_file(store / "parts" / repaired.part / "rows")
    rows_file.unlink()
    assert f"part {repaired.part}: array rows is missing its data file {rows_file}" in verify_store(store)
