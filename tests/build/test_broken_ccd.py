"""A damaged ``--ccd`` (R1 H1, M3): never a crash, never a failure that blames the structures.

- A ``components.cif.gz`` cut short (an interrupted download of the 400 MB file): the build ended
  "Aborted." (click's reading of gzip's EOFError), exit 1, no summary, the store left unfinished,
  and the structures that reached the CCD were failed at ``tokenize`` with the bare EOFError. Now
  it is refused before anything is written, one line naming the file and why (exit 2, as the
  other CCDs the up-front check refuses: an empty or garbage one).
- One broken definition (HEM) in a components.cif, a CCD directory's HEM.cif or HEM.cif.gz: built
  from the file's atoms after a log line (components.cif), or failed naming no CCD file with
  gemmi's ``string:29:0`` or gzip's EOFError at ``tokenize`` (directory). Now each entry with HEM
  fails at stage ``ccd`` naming the CCD file and HEM (exit 1); the others are built.

Real builds of real files on a real Dask LocalCluster, the CCD damaged in a temp dir.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

import featurecache
from tests.conftest import CCD, REPO, STRUCTURES, build_store, cli_in_process
from tests.parse.test_ccd import broken_hem_ccds


def test_gzip_ccd_cut_short_is_refused_in_one_line(tmp_path: Path) -> None:
    pdb_dir = tmp_path / "in"
    pdb_dir.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", pdb_dir)
    whole = b"".join((f.read_bytes().rstrip(b"\n") + b"\n") for f in sorted(CCD.glob("*.cif")))
    data = gzip.compress(whole)
    cut = tmp_path / "components.cif.gz"
    cut.write_bytes(data[: int(len(data) * 0.6)])  # its first blocks are whole
    store = tmp_path / "store"
    run = cli_in_process("build", "--pdb-dir", str(pdb_dir), "--ccd", str(cut), "--out", str(store), "--workers",
                         "1", "--no-progress", cwd=REPO, env={"COLUMNS": "200", "NO_COLOR": "1"})  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [
        f"error: ccd (--ccd): cannot read the CCD {cut}: its gzip stream ends early: the file is cut short "
        "(an interrupted download?)"
    ]
    assert "Aborted" not in run.stderr + run.stdout
    assert not store.exists()  # refused before anything is written


@pytest.mark.parametrize("kind", ["file: bad row", "dir: bad row", "dir: gz cut short"])
def test_broken_definition_fails_its_entries_naming_the_ccd_file(tmp_path: Path, kind: str) -> None:
    ccd, file = broken_hem_ccds(tmp_path)[kind]
    pdb_dir = tmp_path / "in"
    pdb_dir.mkdir()
    for name in ("102m.cif", "1psm.cif"):  # 102m has a HEM, 1psm none
        shutil.copy(STRUCTURES / name, pdb_dir)
    store = tmp_path / "store"
    summary = build_store(store, pdb_dir, workers=1, ccd=ccd)
    assert summary.n_built == 1 and summary.n_failed == 1
    rows = featurecache.open_store(store).failures.to_pylist()
    assert [(r["path"], r["stage"], r["error_class"]) for r in rows] == [("102m.cif", "ccd", "CCDError")]
    assert rows[0]["message"].startswith(f"CCD {file}: the definition of HEM")
    assert featurecache.open_store(store).ids == ["1psm"]
