"""Review R42b s52 #1: an MSA file that the scan read but the MSA part task cannot read (EIO, ESTALE,
a worker without the ``--msa-dir`` mount: any OSError) was left out of its MSA, and the MSA was
stored under the inputs key planned for all its files. Every later build counted it up to date and
never read the file again: the short MSA was served for good, and the re-run exited 0. Now such an
MSA is stored under the key of the files it was built from (the next build's plan, with the file
readable again, does not match it, so the file is read and the MSA rewritten), or, where no file
could be read and an earlier build stored one from files, that one is kept. The failure row reads
as the scan's of an unreadable file: "cannot read: …; the file is left out: chains 2q2k/A, 2q2k/B
get …", with the entry id.

The read fails for real: a Dask scheduler plugin on the session's 1-worker cluster moves the file
out of ``--msa-dir`` while an MSA part task is on its way to or on the worker, and puts it back
(same bytes, same mtime) as the task ends. The scan has read it by then, so only the part task's
read fails (FileNotFoundError: as on a worker that does not see the mount). Real CLI builds of the
sample 2q2k structure with its real OpenFold alignments, each compared with a clean build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from distributed.diagnostics.plugin import SchedulerPlugin

import featurecache
from featurecache.const import MolType
from tests.clusters import _CLUSTERS, scheduler_args
from tests.conftest import REPO, SAMPLES

CHAIN_DIR = SAMPLES / "msas" / "openfold" / "2q2k_A"
LOST = "2q2k_A/uniref90_hits.sto"
PLUGIN = "r42b-msa-part-read-error"


class AwayDuringMSAParts(SchedulerPlugin):  # type: ignore[misc]
    """A scheduler plugin: ``paths`` are moved to ``aside`` when the first MSA part task
    (``msa-part-*``) is submitted, before the scheduler sends it to a worker, and put back when the
    last one in flight has ended. ``moved`` counts the times."""

    def __init__(self, paths: list[Path], aside: Path) -> None:
        self.paths, self.aside = paths, aside
        self.in_flight: set[str] = set()
        self.moved = 0

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if not str(key).startswith("msa-part-"):
            return
        if finish in ("waiting", "queued", "processing", "no-worker") and key not in self.in_flight:
            if not self.in_flight:
                for k, p in enumerate(self.paths):
                    os.rename(p, self.aside / str(k))
                self.moved += 1
            self.in_flight.add(key)
        elif finish in ("memory", "erred", "released", "forgotten") and key in self.in_flight:
            self.in_flight.discard(key)
            if not self.in_flight:
                for k, p in enumerate(self.paths):
                    os.rename(self.aside / str(k), p)


@contextmanager
def _away_during_msa_parts(paths: list[Path], tmp_path: Path) -> Iterator[AwayDuringMSAParts]:
    address = scheduler_args(1)[1]  # the session's 1-worker cluster, started here if need be
    cluster = _CLUSTERS[1][1]
    assert cluster.scheduler_address == address
    aside = tmp_path / "aside"
    aside.mkdir(exist_ok=True)
    plugin = AwayDuringMSAParts(paths, aside)
    cluster.scheduler.add_plugin(plugin, name=PLUGIN)
    try:
        yield plugin
    finally:
        cluster.scheduler.remove_plugin(name=PLUGIN)
    assert not plugin.in_flight and all(p.is_file() for p in paths)


def _build(pdb: Path, msa: Path, out: Path) -> subprocess.CompletedProcess[str]:
    args = ["build", "--pdb-dir", str(pdb), "--msa-dir", str(msa), "--ccd", str(SAMPLES / "ccd"),
            "--out", str(out), *scheduler_args(1), "--no-progress"]  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, "COLUMNS": "250"}, timeout=300)  # fmt: skip
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r


def _inputs(tmp_path: Path, files: list[str]) -> tuple[Path, Path]:
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    (msa / "2q2k_A").mkdir(parents=True)
    for name in files:
        shutil.copy2(CHAIN_DIR / name, msa / "2q2k_A")
    return pdb, msa


def _msa(store: Path) -> tuple[dict[str, Any], Any]:
    """The msas row and the stored MSA of 2q2k's protein chain A."""
    s = featurecache.open_store(store)
    (chain,) = [r for r in s.chains.to_pylist()
                if (r["entry_id"], r["auth_id"]) == ("2q2k", "A") and r["mol_type"] != MolType.LIGAND]  # fmt: skip
    (row,) = [m for m in s.msas.to_pylist() if m["key"] == chain["msa_key"]]
    return row, s.msa(row["key"])


def _same_msa(store: Path, ref: Path) -> None:
    """2q2k/A's MSA in ``store`` is the clean build's in ``ref``: its row and every array."""
    (row, block), (want_row, want) = _msa(store), _msa(ref)
    fields = ("depth", "length", "n_files", "n_input_rows", "inputs_key", "sources")
    assert {f: row[f] for f in fields} == {f: want_row[f] for f in fields}
    for name in ("residues", "deletions", "species", "source", "profile", "deletion_mean"):
        np.testing.assert_array_equal(getattr(block, name), getattr(want, name), err_msg=name)


def _failures(store: Path) -> dict[str, dict[str, Any]]:
    return {f["path"]: f for f in featurecache.open_store(store).failures.to_pylist()}


def test_a_file_the_part_task_cannot_read_is_read_again_by_the_next_build(tmp_path: Path) -> None:
    files = sorted(p.name for p in CHAIN_DIR.iterdir())
    assert len(files) == 4 and LOST.split("/")[1] in files
    ref = tmp_path / "ref"
    pdb, msa = _inputs(tmp_path, files)
    assert _build(pdb, msa, ref).returncode == 0
    assert _msa(ref)[0]["n_files"] == 4

    out = tmp_path / "store"
    with _away_during_msa_parts([msa / LOST], tmp_path) as plugin:
        r = _build(pdb, msa, out)
    assert plugin.moved >= 1
    assert r.returncode == 1, r.stderr[-3000:]
    fail = _failures(out)[LOST]
    assert (fail["stage"], fail["entry_id"], fail["error_class"]) == ("msa", "2q2k", "FileNotFoundError")
    others = sorted(f"2q2k_A/{n}" for n in files if f"2q2k_A/{n}" != LOST)
    # as the scan's row of an unreadable file says it (before: "[Errno 2] No such file or directory: …")
    assert fail["message"].startswith("cannot read: [Errno 2] No such file or directory"), fail["message"]
    # (2q2k's protein chains A and B share the sequence, and so the MSA)
    said = f"the file is left out: chains 2q2k/A, 2q2k/B get MSAs from 3 other files ({', '.join(others)})"
    assert said in fail["message"], fail["message"]
    row, _ = _msa(out)
    assert (row["n_files"], sorted(row["sources"])) == (3, others)
    assert row["inputs_key"] != _msa(ref)[0]["inputs_key"]  # before: the key planned for all 4 files

    # the file readable again: the next build reads it and writes the MSA a clean build writes
    # (before: "MSAs up to date 1", exit 0, the 3-file MSA kept for good)
    r = _build(pdb, msa, out)
    assert r.returncode == 0, r.stderr[-3000:]
    _same_msa(out, ref)
    assert _failures(out) == {}
    r = _build(pdb, msa, out)  # and then it is up to date
    assert r.returncode == 0, r.stderr[-3000:]
    _same_msa(out, ref)


def test_an_msa_of_no_readable_file_is_single_sequence_or_keeps_the_stored_one_until_read(
    tmp_path: Path,
) -> None:
    first, second = "mgnify_hits.sto", "uniref90_hits.sto"
    ref_one, ref_two = tmp_path / "ref1", tmp_path / "ref2"
    pdb, msa = _inputs(tmp_path, [first])
    assert _build(pdb, msa, ref_one).returncode == 0

    # a first build whose chain's only file cannot be read in the part task: single sequence, once
    out = tmp_path / "store"
    with _away_during_msa_parts([msa / "2q2k_A" / first], tmp_path):
        r = _build(pdb, msa, out)
    assert r.returncode == 1, r.stderr[-3000:]
    fail = _failures(out)[f"2q2k_A/{first}"]
    assert fail["entry_id"] == "2q2k" and fail["message"].startswith("cannot read: ")
    assert "the file is left out: chains 2q2k/A, 2q2k/B get single-sequence MSAs" in fail["message"]
    assert _msa(out)[0]["n_files"] == 0
    r = _build(pdb, msa, out)  # before: exit 0 with the single-sequence MSA "up to date" for good
    assert r.returncode == 0, r.stderr[-3000:]
    _same_msa(out, ref_one)

    # a second file joins; the build that would merge both can read neither: the MSA stored from
    # the first is kept (before: replaced by the single sequence, under the two files' key)
    shutil.copy2(CHAIN_DIR / second, msa / "2q2k_A")
    lost = [msa / "2q2k_A" / first, msa / "2q2k_A" / second]
    with _away_during_msa_parts(lost, tmp_path):
        r = _build(pdb, msa, out)
    assert r.returncode == 1, r.stderr[-3000:]
    fails = _failures(out)
    assert set(fails) == {f"2q2k_A/{first}", f"2q2k_A/{second}"}
    kept = (
        "the file is left out: chains 2q2k/A, 2q2k/B get the MSAs an earlier build stored from files (kept)"
    )
    for f in fails.values():
        assert f["entry_id"] == "2q2k" and f["message"].startswith("cannot read: ")
        assert kept in f["message"], f["message"]
    _same_msa(out, ref_one)
    r = _build(pdb, msa, out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _build(pdb, msa, ref_two).returncode == 0
    _same_msa(out, ref_two)
    assert _msa(out)[0]["n_files"] == 2
    assert _failures(out) == {}
