"""``show``'s entry id is judged by its bytes, as the build judges a file's name: under an ASCII
file-system encoding (``LC_ALL=C PYTHONUTF8=0``) ``show STORE 'é 1a8o'`` finds the entry the build
made of ``é 1a8o.pdb`` (review R39a s50 #7: the argument arrived as lone surrogates and was answered
"no entry '\\udcc3\\udca9 1a8o' ...; did you mean é 1a8o?")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SAMPLES, build_store

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "FEATURECACHE_DASHBOARD": "0"}


def test_show_a_non_ascii_id_under_an_ascii_encoding(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1A8O.pdb", pdb / "é 1a8o.pdb")
    store = tmp_path / "s"
    summary = build_store(store, pdb, workers=1)
    assert summary.n_failed == 0
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONIOENCODING"},
        "PYTHONPATH": str(REPO),
        **C_LOCALE,
    }
    probe = subprocess.run([sys.executable, "-c", "import sys; print(sys.getfilesystemencoding())"],
                           capture_output=True, text=True, env=env)  # fmt: skip
    assert probe.stdout.strip() == "ascii", probe.stdout  # the locale the finding is about
    r = subprocess.run([sys.executable, "-m", "featurecache.cli", "show", str(store), "é 1a8o"], capture_output=True,
                       env=env, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    assert b"1a8o" in r.stdout and b"Traceback" not in r.stderr
