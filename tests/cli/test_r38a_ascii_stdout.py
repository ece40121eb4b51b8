"""An stdout that cannot encode the output's characters (PYTHONIOENCODING=ascii, the C locale) or
that nobody reads any more degrades the output instead of crashing, and a build's exit status is
the build's (review R38a s50 #6: a successful build exited 1 on its summary's arrow, show on "…")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import SAMPLES

ASCII = {"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii", "FEATURECACHE_DASHBOARD": "0"}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, timeout=300,
                          env={**os.environ, **(env or {})})  # fmt: skip


def _pdb(tmp_path: Path) -> Path:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    return pdb


def test_build_show_and_help_on_an_ascii_stdout(tmp_path: Path, two_entry_store: Path) -> None:
    store = tmp_path / "s"
    r = _cli("build", "--pdb-dir", str(_pdb(tmp_path)), "--out", str(store), "--workers", "1", "--no-progress",
             env=ASCII)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    assert b"Traceback" not in r.stderr
    assert f"featurecache build -> {store}".encode() in r.stdout, r.stdout[:500]
    assert r.stdout.isascii()
    for args in (("show", str(two_entry_store), "2q2k"), ("--help",), ("info", str(store))):
        r = _cli(*args, env=ASCII)
        assert r.returncode == 0, (args, r.stderr.decode()[-3000:])
        assert b"Traceback" not in r.stderr and r.stdout.isascii(), args


def test_a_closed_stdout_leaves_the_build_exit_status(tmp_path: Path) -> None:
    store = tmp_path / "s"
    args = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(_pdb(tmp_path)), "--out", str(store),
            "--workers", "1", "--no-progress"]  # fmt: skip
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "FEATURECACHE_DASHBOARD": "0"})  # fmt: skip
    assert p.stdout is not None
    p.stdout.close()  # `build ... | head -0`: the summary meets a closed pipe
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err.decode()[-3000:]
    assert b"Traceback" not in err and b"Exception ignored" not in err, err.decode()[-3000:]
    assert (store / "index" / "entries.arrow").is_file()


def test_the_failures_tables_more_row_is_ascii(tmp_path: Path) -> None:
    """Review R40c s51 #9: past the failures shown, the summary's table ends in a row "... N more"
    (5203d14): on an ASCII stdout its first cell is three dots, not "…" escaped as ``\\u2026``."""
    from featurecache.build.summary import SHOWN_FAILURES

    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    for i in range(SHOWN_FAILURES + 2):
        (pdb / f"bad{i:03d}.cif").write_text("garbage\n")
    r = _cli("build", "--pdb-dir", str(pdb), "--out", str(tmp_path / "s"), "--workers", "1", "--no-progress",
             env={**ASCII, "COLUMNS": "200"})  # fmt: skip
    assert r.returncode == 1, r.stderr.decode()[-3000:]
    assert b"Traceback" not in r.stderr
    assert r.stdout.isascii()
    out = r.stdout.decode()
    more = [line for line in out.splitlines() if "2 more: featurecache info STORE --failures" in line]
    assert len(more) == 1, out[-3000:]
    assert more[0].split("|")[1].strip() == "...", more
    assert "\\u2026" not in out, out[-3000:]
