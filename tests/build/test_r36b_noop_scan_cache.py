"""A no-op build leaves the MSA scan cache file as it was (review R36b s49 #5).

``ScanCache.save`` replaced ``cache/msa_scan.arrow`` at every build, with the same bytes when no
MSA file had changed: a new inode and mtime, which an ``rsync`` mirror sent again and a hard-linked
snapshot (``cp -al``) stopped sharing, while the README says a no-op build rewrites nothing. It is
now written only when its rows change.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from featurecache.build.msa_stage import SCAN_CACHE_DIR, SCAN_CACHE_FILE
from tests.conftest import SAMPLES, build_store


def _stamp(path: Path) -> tuple[int, int, bytes]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, path.read_bytes()


def test_a_no_op_build_leaves_the_scan_cache_file_alone(sample_store: Path, tmp_path: Path) -> None:
    store = Path(shutil.copytree(sample_store, tmp_path / "store"))
    cache = store / SCAN_CACHE_DIR / SCAN_CACHE_FILE
    assert cache.is_file()
    before = _stamp(cache)
    summary = build_store(store, SAMPLES / "structures", msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd")
    assert summary.n_built == 0 and summary.n_failed == 0
    assert _stamp(cache) == before
