"""A store at a path that is not valid UTF-8, or at a non-ASCII path under an ASCII file-system
encoding, is built, read, shown, verified and sampled: pyarrow gets the path's bytes, not a
``str`` it encodes as strict UTF-8 (review R38a s50 #3: each raised UnicodeEncodeError)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import featurecache
from featurecache.store.verify import verify_store
from tests.conftest import SAMPLES


def _cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """The real command in a process of its own (its arguments as the OS gets them: bytes)."""
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *map(os.fsencode, args)],
                          capture_output=True, timeout=300, env={**os.environ, "FEATURECACHE_DASHBOARD": "0", **(env or {})})  # fmt: skip


def test_build_info_show_verify_at_a_path_that_is_not_utf8(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    store = tmp_path / os.fsdecode(b"ren\xffstore")  # its name decodes to a surrogate
    r = _cli("build", "--pdb-dir", pdb, "--ccd", SAMPLES / "ccd", "--out", store, "--workers", "1",
             "--no-progress", "--no-dashboard")  # fmt: skip
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    for args in (("info", store), ("show", store, "1psm"), ("verify", store)):
        r = _cli(*args)
        assert r.returncode == 0, (args, r.stderr.decode(errors="replace")[-3000:])
        assert b"UnicodeEncodeError" not in r.stderr
    assert b"1psm" in _cli("show", store, "1psm").stdout


def test_reader_verify_and_dataset_at_a_path_that_is_not_utf8(two_entry_store: Path, tmp_path: Path) -> None:
    store = tmp_path / os.fsdecode(b"copy\xff")
    shutil.copytree(two_entry_store, store)
    st = featurecache.open_store(store)
    assert st.entry("2q2k").n_tokens > 32
    assert featurecache.open_store(store, memory_map=False).entries.num_rows == st.entries.num_rows
    assert verify_store(store) == []

    from featurecache.client.dataset import FeatureDataset
    from featurecache.client.sampler import SampleKey

    ds = FeatureDataset(store, crop_size=32, workers=1)
    try:
        sample = ds.job(SampleKey(0, 0, 0, "2q2k"))
    finally:
        ds.close()
    assert len(sample["token_index"]) == 32


def test_non_ascii_store_path_under_an_ascii_locale(two_entry_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "renéstore"
    shutil.copytree(two_entry_store, store)
    # the file-system encoding is ASCII there (an ASCII stdout is test_r38a_ascii_stdout's)
    env = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "utf-8:backslashreplace"}
    for args in (("info", store), ("verify", store)):
        r = _cli(*args, env=env)
        assert r.returncode == 0, (args, r.stderr.decode(errors="replace")[-3000:])
