"""Input directories that hold nothing to build from.

An explicitly given ``--msa-dir`` without one alignment used to build silently (only the summary
row "alignments found 0"): it now logs a WARNING naming the directory, what was looked for and
what it held instead. A ``--pdb-dir`` without a structure file used to start a Dask cluster,
create an empty store and log a WARNING: it is now a usage error (exit 2) before either happens.
No existing test built from an empty --pdb-dir (none expected the old warning).
Real CLI builds (on the session's Dask LocalCluster, tests/clusters.py) over real files from the corpus.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import featurecache
from featurecache.build.run import run_build
from featurecache.errors import UsageError
from services.lookup.server import free_port
from tests.clusters import scheduler_args
from tests.conftest import MSAS, REPO, STRUCTURES, CliRun, cli_in_process


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "2000"}  # long lines: rich would otherwise fold paths mid-word
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600)  # fmt: skip


def _refused(*args: str) -> CliRun:
    """A build the test expects refused before it starts (exit 2): the same CLI, in this process."""
    return cli_in_process(*args, cwd=REPO, env={"COLUMNS": "2000"})


def _cli_all(commands: dict[Path, tuple[str, ...]]) -> dict[Path, subprocess.CompletedProcess[str]]:
    """Each of ``commands`` (``featurecache ARGS``), all started at once; their results, by key."""
    env = {**os.environ, "COLUMNS": "2000"}
    procs = {key: subprocess.Popen([sys.executable, "-m", "featurecache.cli", *args], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
             for key, args in commands.items()}  # fmt: skip
    try:
        outs = {key: p.communicate(timeout=600) for key, p in procs.items()}
        return {
            key: subprocess.CompletedProcess(p.args, p.returncode, *outs[key]) for key, p in procs.items()
        }
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def _warnings_about(r: subprocess.CompletedProcess[str], msa_dir: Path) -> str:
    """The WARNING that starts ``--msa-dir <msa_dir>:`` in the build's log (the CLI's rich handler
    writes the log to stdout), up to its end; "" when there is none."""
    text = " ".join((r.stdout + r.stderr).split())
    start = text.find(f"WARNING --msa-dir {msa_dir}: ")
    return "" if start < 0 else text[start : text.find("MSAs", start) + 4]


def test_an_msa_dir_without_alignments_is_warned_about(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", pdb)

    empty = tmp_path / "msa-empty"
    empty.mkdir()
    (empty / ".hidden.a3m").write_text(">q\nMVLSEGEWQLVLHVWAKVEAD\n")  # hidden files are not read
    hits = tmp_path / "msa-hits"  # template hits and a note: files, but no alignment
    (hits / "4zey_A").mkdir(parents=True)
    shutil.copy(MSAS / "openfold/4zey_A/hmm_output.sto", hits / "4zey_A")
    shutil.copy(MSAS / "hh-suite/query.hhr", hits)
    (hits / "README.txt").write_text("alignments will be copied here\n")
    real = tmp_path / "msa-real"  # 102m's own MSA (Protenix layout): no warning
    shutil.copytree(MSAS / "Protenix/mmcif_msa/3", real / "mmcif_msa" / "3")
    # three independent builds (a store each), run at once on the session's cluster: each is
    # mostly a CLI start
    build = ("build", "--pdb-dir", str(pdb), *scheduler_args(1), "--no-progress")
    stores = {msa: tmp_path / f"store-{msa.name}" for msa in (empty, hits, real)}
    runs = _cli_all({msa: (*build, "--out", str(out), "--msa-dir", str(msa)) for msa, out in stores.items()})

    r = runs[empty]
    assert r.returncode == 0, r.stderr
    said = _warnings_about(r, empty)
    assert "no alignment found" in said and "a3m and Stockholm" in said and "holds no file" in said, r.stdout

    r = runs[hits]
    assert r.returncode == 0, r.stderr
    said = _warnings_about(r, hits)
    assert "no alignment found" in said and "3 files" in said, r.stdout
    assert "2 template-hit (hhr/m8/hmmsearch) files" in said and "1 file of another format" in said, r.stdout

    r = runs[real]
    assert r.returncode == 0, r.stderr
    assert "no alignment found" not in " ".join((r.stdout + r.stderr).split()), r.stdout
    store = featurecache.open_store(stores[real])
    assert any(store.chains.column("msa_key").to_pylist())  # its alignment did reach the store


@pytest.mark.parametrize(
    ("files", "found"),
    [
        ((), "found no file"),
        (("notes.txt", ".cache/1psm.cif"), "found 1 other file (notes.txt)"),
        (("a/b.a3m", "c.json", "d.cif.txt", "e.tsv"), "found 4 other files (a/b.a3m, c.json, d.cif.txt, …)"),
    ],
)
def test_a_pdb_dir_without_structure_files_is_a_usage_error(
    tmp_path: Path, files: tuple[str, ...], found: str
) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for rel in files:
        (pdb / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(STRUCTURES / "1psm.cif", pdb / rel)  # structure content: the name decides
    out = tmp_path / "store"
    r = _refused("build", "--pdb-dir", str(pdb), "--out", str(out), "--workers", "1", "--no-progress")
    said = " ".join(r.stderr.split())
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"pdb_dir (--pdb-dir) {pdb}: no structure file" in said and ".cif" in said and found in said, (
        r.stderr
    )
    assert not out.exists()  # no store created


def test_the_refusal_comes_before_any_dask_cluster(tmp_path: Path) -> None:
    """With a scheduler address where none listens, a check made after connecting would fail with
    StoreError (cannot connect); the empty --pdb-dir is refused first."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    (pdb / "README").write_text("structures go here\n")
    with pytest.raises(UsageError, match="no structure file"):
        run_build(
            pdb_dir=pdb, out=tmp_path / "store", scheduler=f"tcp://127.0.0.1:{free_port()}", progress=False
        )
    assert not (tmp_path / "store").exists()


def test_a_store_inside_the_pdb_dir_is_not_an_input(tmp_path: Path) -> None:
    """The store's own files (zarr.json, ...) are skipped when looking for structure files, as the
    build skips them: a --pdb-dir that holds only the store is refused."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", pdb)
    out = pdb / "store"
    assert (
        _cli(
            "build", "--pdb-dir", str(pdb), "--out", str(out), *scheduler_args(1), "--no-progress"
        ).returncode
        == 0
    )
    (pdb / "1psm.cif").unlink()
    before = (out / "zarr.json").read_bytes()
    r = _refused("build", "--pdb-dir", str(pdb), "--out", str(out), "--workers", "1", "--no-progress")
    assert r.returncode == 2 and "found no file" in " ".join(r.stderr.split()), r.stderr
    assert (out / "zarr.json").read_bytes() == before  # the store is left as it was
