"""Tasks of a killed build that outlive it, and the damage they used to leave.

A task orphaned by a SIGKILLed driver goes on writing its part while the next build removes the
temp dirs; it must not commit a half-written part. And a committed part that is damaged (an
array gone) must stop the chem stage's scan with a StoreError naming the part, not a raw
FileNotFoundError or an empty scan recorded as done.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from featurecache.build.chem_stage import scan_structure_part
from featurecache.errors import StoreError
from featurecache.store.index import complete_parts
from featurecache.store.layout import STRUCTURE_PART_PREFIX
from featurecache.store.verify import verify_store
from tests.conftest import REPO, SAMPLES, build_store

#: An orphaned task of a killed build: starts its part with the real writer functions, writes
#: ``atoms``, says so, waits, then writes the rest and commits (exit 0 when the commit happens).
ORPHAN = """
import sys, time
from pathlib import Path
import numpy as np, zarr
from featurecache.store.index import table_from_rows, write_table
from featurecache.store.layout import ENTRY_GROUPS, PARTS_DIR
from featurecache.store.writer import commit_part, part_tmp_dir, write_record_array

root, name, ready, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])

def arrays(group, names):
    for g in names:
        rec = np.zeros(2, dtype=ENTRY_GROUPS[g])
        rec.view(np.uint8)[:] = 5
        write_record_array(group, g, rec)

with part_tmp_dir(root, name) as tmp:
    group = zarr.open_group(str(tmp), mode="w", attributes={"kind": "structures", "part": name})
    arrays(group, ["atoms"])
    ready.with_name(ready.name + '.tmp').write_text(str(tmp))
    ready.with_name(ready.name + '.tmp').replace(ready)  # whole, or not there: never read half-written
    deadline = time.time() + 300
    while not go.exists() and time.time() < deadline:
        time.sleep(0.05)
    arrays(group, ["tokens", "bonds", "interfaces"])
    for t in ("entries", "chains", "interfaces", "failures"):
        write_table(tmp / "_index" / f"{t}.arrow", table_from_rows(t, []))
    commit_part(tmp, root / PARTS_DIR / name, {"part": name, "kind": "structures", "keys": []})
"""


def _structure_parts(store: Path) -> list[Path]:
    return [p for p in complete_parts(store) if p.name.startswith(STRUCTURE_PART_PREFIX)]


def test_orphaned_task_cannot_commit_after_the_next_build_cleans_up(
    sample_store: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    before = sorted(p.name for p in complete_parts(store))
    s_parts = _structure_parts(store)
    name = f"{STRUCTURE_PART_PREFIX}{int(s_parts[-1].name[2:]) + 1:06d}"
    ready, go = tmp_path / "ready", tmp_path / "go"
    orphan = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, str(store), name, str(ready), str(go)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert orphan.poll() is None, orphan.communicate()
            assert time.monotonic() < deadline, "the orphan never started its part"
            time.sleep(0.05)
        tmp = Path(ready.read_text())
        assert tmp.is_dir()
        # the same command run again: its remove_leftovers deletes the orphan's temp dir
        build_store(store, SAMPLES / "structures", msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd", workers=1)
        assert not tmp.exists()
        go.write_text("")
        _, err = orphan.communicate(timeout=120)
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
    assert orphan.returncode != 0
    assert "StoreError" in err and name in err, err
    assert sorted(p.name for p in complete_parts(store)) == before  # nothing half-written committed
    assert verify_store(store, workers=1) == []


def test_scan_of_a_part_missing_its_atoms_names_the_part(sample_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    part = _structure_parts(store)[0]
    shutil.rmtree(part / "atoms")
    with pytest.raises(StoreError, match=rf"{part.name}.*atoms"):
        scan_structure_part(str(part))


def test_scan_of_a_part_that_does_not_exist_raises(tmp_path: Path) -> None:
    missing = tmp_path / "parts" / "s-000000"
    with pytest.raises(StoreError, match="s-000000"):
        scan_structure_part(str(missing))


def test_build_over_a_damaged_part_says_which_part_without_a_traceback(
    sample_store: Path, tmp_path: Path
) -> None:
    """A committed structure part not yet scanned whose atoms are gone: the build stops with one
    line naming the part (exit 3, a store error), not a worker traceback."""
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    damaged = store / "parts" / f"{STRUCTURE_PART_PREFIX}000099"
    shutil.copytree(_structure_parts(store)[0], damaged)
    shutil.rmtree(damaged / "atoms")
    run = subprocess.run(
        [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(SAMPLES / "structures"),
         "--out", str(store), "--msa-dir", str(SAMPLES / "msas"), "--ccd", str(SAMPLES / "ccd"), "--workers", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 3, out
    assert "Traceback" not in out, out
    last = run.stderr.strip().splitlines()[-1]
    assert damaged.name in last and "atoms" in last, out
