"""A command refused because the store is of a newer format leaves the store's lock file as it was
(review R28c s46 #11): ``verify --repair`` and ``prune`` took the lock, which rewrites its record
(pid, host, command line), before they read the format and refused.

A real build (one worker) of the repo's sample 1psm, its root ``format_version`` set to 3; real CLI
runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from featurecache.store.root import LOCK_FILE
from tests.conftest import SAMPLES, build_store, cli_in_process, store_snapshot


def test_a_command_refused_for_a_newer_format_does_not_touch_the_lock(tmp_path: Path) -> None:
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    assert build_store(store, pdb, workers=1).n_failed == 0
    meta = store / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["format_version"] = 3
    meta.write_text(json.dumps(doc))
    lock = store / LOCK_FILE
    lock.write_text("1\nsomewhere\nfeaturecache build --out store\nbuild\n")  # the last holder's record
    before, files = lock.read_bytes(), store_snapshot(store)
    for args in (("verify", "--repair", "--no-progress"), ("prune",)):
        done = cli_in_process(args[0], str(store), *args[1:])
        assert done.returncode == 3, (args, done.stdout + done.stderr)
        assert "written by a newer featurecache" in done.stderr, done.stderr
        assert lock.read_bytes() == before, args
    assert store_snapshot(store) == files
