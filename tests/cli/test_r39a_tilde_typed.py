"""The ``~`` refusal judges a path by its text as typed, before pathlib drops a leading ``./``: the
advice it gives, ``./~x`` for a directory named so, is accepted (a store or report directory named
``~x`` made in the working directory), as is an absolute path; a bare leading ``~`` is still
refused (review R39a s50 #4: ``--out ./~rep`` was refused as ``--out ~rep``)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import cli_in_process


def test_dot_slash_tilde_is_accepted(tmp_path: Path, two_entry_store: Path) -> None:
    r = cli_in_process("report", str(two_entry_store), "--out", "./~rep", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "begins with '~'" not in r.stderr, r.stderr
    assert (tmp_path / "~rep" / "index.html").is_file()

    absolute = tmp_path / "~abs"
    r = cli_in_process("report", str(two_entry_store), "--out", str(absolute), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (absolute / "index.html").is_file()

    # a STORE argument: not refused as an unexpanded ~, but the store's own error (exit 3)
    r = cli_in_process("info", "./~nostore", cwd=tmp_path)
    assert r.returncode == 3 and "begins with '~'" not in r.stderr, r.stderr

    # a bare leading ~ still is (exit 2, nothing made)
    r = cli_in_process("report", str(two_entry_store), "--out", "~rep2", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error: --out ~rep2 begins with '~'") and "./~rep2" in r.stderr, r.stderr
    assert not (tmp_path / "~rep2").exists()
