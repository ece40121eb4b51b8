"""Review R38a s50 #4 and #3 (the MSA scan cache): input names under an ASCII file-system encoding,
and an ``--msa-dir`` whose path is not valid UTF-8.

#4: under ``LC_ALL=C PYTHONUTF8=0`` (Python's file-system encoding ASCII) every non-ASCII input
name was rejected as "not valid UTF-8" (``escaped_path(raw) != raw``): the name's bytes decide now,
and the build stores what a build under a UTF-8 locale stores (ids, paths, content hashes).
#3: the MSA scan cache's ``dir`` column held the raw ``--msa-dir``, so a path with a byte that is
not UTF-8 crashed the build in ``pa.table``; it is kept escaped, as the structure digest cache
keeps ``--pdb-dir``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from featurecache.build.msa_stage import SCAN_CACHE_DIR, SCAN_CACHE_FILE
from featurecache.store.index import read_table
from featurecache.store.reader import open_store
from tests.conftest import SAMPLES

#: Python's file-system encoding ASCII (no UTF-8 mode, the C locale not coerced)
ASCII_FS = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": "utf-8"}


def _build(pdb: bytes, out: bytes, msa: bytes, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    args = [sys.executable.encode(), b"-m", b"featurecache.cli", b"build", b"--pdb-dir", pdb, b"--msa-dir", msa,
            b"--ccd", os.fsencode(SAMPLES / "ccd"), b"--out", out, b"--workers", b"1", b"--no-progress",
            b"--no-dashboard"]  # fmt: skip
    base = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONUTF8")}
    r = subprocess.run(
        args, capture_output=True, timeout=300, env={**base, "FEATURECACHE_DASHBOARD": "0", **env}
    )
    assert b"Traceback" not in r.stderr, r.stderr[-3000:].decode(errors="replace")
    return r


def _signature(out: Path) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]], list[str]]:
    st = open_store(out)
    entries = sorted(
        (r["id"], r["source_path"], r["content_hash"])
        for r in st.entries.select(["id", "source_path", "content_hash"]).to_pylist()
    )
    msas = sorted((r["key"], r["content_hash"]) for r in st.msas.select(["key", "content_hash"]).to_pylist())
    return entries, msas, sorted(st.failures.column("path").to_pylist())


def test_non_ascii_names_build_alike_under_an_ascii_file_system_encoding(tmp_path: Path) -> None:
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb / "é 102m.cif")
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb / "蛋白.cif")
    (msa / "2q2k_A").mkdir(parents=True)
    shutil.copy(SAMPLES / "msas" / "openfold" / "2q2k_A" / "mgnify_hits.sto", msa / "2q2k_A" / "mgnify_é.sto")
    b = os.fsencode
    utf8, ascii_ = tmp_path / "utf8", tmp_path / "ascii"
    r = _build(b(pdb), b(utf8), b(msa), {"LC_ALL": "C.UTF-8"})
    assert r.returncode == 0, r.stderr[-2000:].decode(errors="replace")
    r = _build(b(pdb), b(ascii_), b(msa), ASCII_FS)
    assert r.returncode == 0, r.stderr[-2000:].decode(errors="replace")
    want = _signature(utf8)
    assert [e[:2] for e in want[0]] == [("é 102m", "é 102m.cif"), ("蛋白", "蛋白.cif")]
    assert len(want[1]) >= 1 and want[2] == []
    assert _signature(ascii_) == want
    # a re-run under the ASCII encoding over the UTF-8 build's store: nothing new, nothing failed
    parts = sorted(p.name for p in (utf8 / "parts").iterdir())
    r = _build(b(pdb), b(utf8), b(msa), ASCII_FS)
    assert r.returncode == 0, r.stderr[-2000:].decode(errors="replace")
    assert sorted(p.name for p in (utf8 / "parts").iterdir()) == parts
    assert _signature(utf8) == want


def test_msa_dir_path_not_utf8(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    msa = os.fsencode(tmp_path) + b"/m\xffdir"
    os.makedirs(msa + b"/2q2k_A")
    sto = os.fsdecode(msa + b"/2q2k_A/mgnify_hits.sto")
    shutil.copy(SAMPLES / "msas" / "openfold" / "2q2k_A" / "mgnify_hits.sto", sto)
    # an hour old: a file modified within 2 s of a build's start is not cached (digest_cache.RACY_NS),
    # so with the copy's fresh mtime the second build read it again (the test failed by timing)
    os.utime(sto, (time.time() - 3600, time.time() - 3600))
    out = tmp_path / "store"
    for _ in range(2):  # the second build reads the cache back: the file is not read again
        r = _build(os.fsencode(pdb), os.fsencode(out), msa, {"LC_ALL": "C.UTF-8"})
        assert r.returncode == 0, r.stderr[-2000:].decode(errors="replace")
    dirs = read_table(out / SCAN_CACHE_DIR / SCAN_CACHE_FILE, memory_map=False).column("dir").to_pylist()
    assert dirs == [str(tmp_path / "m\\xffdir")]
    assert b"0 to read" in r.stderr
    assert _signature(out)[2] == []
    assert (
        sum(1 for n in open_store(out).msas.column("n_files").to_pylist() if n) == 1
    )  # 2q2k_A's, from the file
