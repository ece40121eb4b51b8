"""Review R38a s50 leftovers #2: under an ASCII file-system encoding (``LC_ALL=C PYTHONUTF8=0``) an
MSA file (or a structure file) in a non-ASCII subdirectory crashed the build after every stage had
run: ``msa_input_bytes`` joined the recorded (UTF-8) relative path to the directory and resolved it
(UnicodeEncodeError). And ``prune --msa-dir``'s content check read such a file by its recorded path,
failing to open it ("not an alignment: 'ascii' codec can't encode ...") and refusing the prune as if
the directory held no MSA. A recorded path becomes a file-system path through ``discover.native``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from featurecache.store.reader import open_store
from tests.build.test_r38a_names_ascii_fs import ASCII_FS, _build
from tests.conftest import SAMPLES


def _prune(store: Path, pdb: Path, msa: Path) -> subprocess.CompletedProcess[bytes]:
    args = [sys.executable.encode(), b"-m", b"featurecache.cli", b"prune", os.fsencode(store), b"--sources-gone",
            os.fsencode(pdb), b"--msa-dir", os.fsencode(msa), b"--dry-run"]  # fmt: skip
    base = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONUTF8")}
    r = subprocess.run(args, capture_output=True, timeout=120, env={**base, "COLUMNS": "250", **ASCII_FS})
    assert b"Traceback" not in r.stderr, r.stderr[-3000:].decode(errors="replace")
    return r


def test_non_ascii_subdirectories_under_an_ascii_file_system_encoding(tmp_path: Path) -> None:
    pdb, msa, out = tmp_path / "pdb", tmp_path / "msa", tmp_path / "store"
    (pdb / "é").mkdir(parents=True)
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb / "é")
    shutil.copytree(SAMPLES / "msas" / "openfold" / "2q2k_A", msa / "é" / "2q2k_A")
    b = os.fsencode
    r = _build(b(pdb), b(out), b(msa), ASCII_FS)
    assert r.returncode == 0, r.stderr[-2000:].decode(errors="replace")
    st = open_store(out)
    assert st.entries.select(["id", "source_path"]).to_pylist() == [
        {"id": "2q2k", "source_path": "é/2q2k.cif"}
    ]
    (from_files,) = [m for m in st.msas.select(["n_files", "sources"]).to_pylist() if m["n_files"]]
    assert all(s.startswith("é/2q2k_A/") for s in from_files["sources"]), from_files
    assert b"MSAs" in r.stdout  # the summary's input size counts the MSA files

    # the MSA files regenerated under names the guard judges by content (a .fasta name says nothing):
    # the directory holds MSAs, so the stored MSA is gone from it, not the directory unmounted
    shutil.rmtree(msa / "é" / "2q2k_A")
    (msa / "é" / "2q2k_A").mkdir()
    shutil.copy(
        SAMPLES / "msas" / "openfold" / "2q2k_A" / "bfd_uniclust_hits.a3m", msa / "é" / "2q2k_A" / "bfd.fasta"
    )
    r = _prune(out, pdb, msa)
    text = (r.stdout + r.stderr).decode(errors="replace")
    assert r.returncode == 0, text[-2000:]
    assert "would remove 1 MSA whose files are gone" in text, text[-2000:]
