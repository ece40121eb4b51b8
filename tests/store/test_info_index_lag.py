"""``featurecache info`` warns (stderr, exit 0) when the index is behind the store's parts.

Before, ``info`` on a store whose build was killed said "entries 0" (or the count of the index's
last refresh), exit 0, with no hint that the parts hold more; ``verify`` named it, at the cost of
reading every array. Now ``info`` says so from the parts' ``part.json`` counts, and says when the
store's first build has not finished (its index then lists only the entries written so far, and
the lookup service answers 503 until the build ends: tests/services/test_lookup_first_build.py).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from featurecache import open_store
from featurecache.store.verify import verify_store
from tests.conftest import STRUCTURES, CliRun, build_store, cli_in_process

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"


def _info(store: Path) -> CliRun:
    """``featurecache info STORE``: the real CLI, in this process (tests/conftest.py)."""
    return cli_in_process("info", str(store), cwd=REPO)


def _entries_in(part: Path) -> int:
    """Rows of a part's own entries index, as pyarrow reads the file."""
    with pa.memory_map(str(part / "_index" / "entries.arrow")) as source:
        return int(ipc.open_file(source).read_all().num_rows)


def _structure_parts(store: Path) -> set[str]:
    return {p.name for p in (store / "parts").iterdir() if p.name.startswith("s-") and p.is_dir()}


def test_info_warns_about_parts_written_after_the_index(tmp_path: Path) -> None:
    """An extension whose index was not rebuilt (the index as it was before the build: what a
    build killed before its first refresh leaves): the entries of the newer parts are named."""
    structures = sorted((SAMPLES / "structures").iterdir())
    inputs = tmp_path / "in"
    inputs.mkdir()
    for f in structures[:2]:
        shutil.copy(f, inputs / f.name)
    store = tmp_path / "store"
    build_store(store, inputs, workers=1, part_size=1)
    before = _structure_parts(store)
    old_index = tmp_path / "old-index"
    shutil.copytree(store / "index", old_index)
    for f in structures[2:]:
        shutil.copy(f, inputs / f.name)
    build_store(store, inputs, workers=1, part_size=2)
    r = _info(store)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr  # up to date
    added = sorted(_structure_parts(store) - before)
    n_added = sum(_entries_in(store / "parts" / p) for p in added)
    assert n_added == len(structures) - 2  # one entry per added input
    shutil.rmtree(store / "index")
    shutil.copytree(old_index, store / "index")
    r = _info(store)
    assert r.returncode == 0, r.stderr
    want = f"{n_added} entries in {len(added)} structure parts written after the index was last rebuilt"
    assert want in " ".join(r.stderr.split()), r.stderr
    # a store without the rebuild's record of its parts: told from the entries index's part names
    shutil.rmtree(store / "index" / ".part-rows")
    r = _info(store)
    assert r.returncode == 0 and want in " ".join(r.stderr.split()), r.stderr


@pytest.mark.timeout(600)
def test_info_on_a_killed_first_build_says_it_has_not_finished(tmp_path: Path) -> None:
    """SIGKILL a fresh build after a few parts: ``info`` exits 0 with both warnings, the lookup
    service is not ready (503), and the resumed build finishes the store: no warning, served."""
    from services.lookup.server import ThreadedServer
    from services.lookup.settings import Settings

    names = ("102m.cif", "1A8O.cif", "1LCD.cif", "7DDO.pdb", "2q2k.cif", "4oz7.pdb", "pdb1gdr.ent",
             "5e5z.pdb", "3u8v.cif", "721p-assembly1.cif")  # fmt: skip
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in names:
        shutil.copy(STRUCTURES / name, inputs / name)
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(inputs), "--out", str(store),
           "--workers", "1", "--part-size", "1", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not ((store / "parts").is_dir() and len(_structure_parts(store)) >= 3):
            assert proc.poll() is None, f"the build ended before its 3rd part (exit {proc.returncode})"
            assert time.monotonic() < deadline, "3 structure parts not committed within 300 s"
            time.sleep(0.05)
        assert proc.poll() is None, "the build should still be running"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    parts = sorted(_structure_parts(store))
    in_parts = sum(_entries_in(store / "parts" / p) for p in parts)
    assert 3 <= len(parts) < len(names)
    r = _info(store)
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stderr.split())
    assert "first build has not finished" in said, r.stderr
    # the index has the entries of its last refresh (none when the kill came before the first one)
    listed = int(re.search(r"lists the (\d+) entries written so far", said).group(1))  # type: ignore[union-attr]
    assert listed == len(open_store(store).ids) <= in_parts
    if listed < in_parts:  # (a refresh may have caught up just before the kill)
        assert re.search(rf"\b{in_parts - listed} entr(y|ies) in \d+ structure part", said), r.stderr
    with ThreadedServer(Settings(store_path=store)) as url:
        resp = httpx.get(f"{url}/v1/ready")
        assert resp.status_code == 503 and "retry-after" in resp.headers, (resp.status_code, resp.text)
    build_store(store, inputs, workers=1, part_size=4)  # resumed: finishes the store
    r = _info(store)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert len(open_store(store).ids) == len(names)  # one entry per input
    assert verify_store(store) == []
    with ThreadedServer(Settings(store_path=store)) as url:
        resp = httpx.get(f"{url}/v1/ready")
        assert resp.status_code == 200 and resp.json()["entries"] == len(names), resp.text
