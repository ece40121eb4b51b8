"""Review R39b s50 #3: the build summary's "msa: MSA files failed" counted a ``--msa-dir``
directory that could not be listed (a failure row ``sub/`` of its own) as a failed file; it has a
row of its own now, and the failed files are the files."""

from __future__ import annotations

from pathlib import Path

from tests.build.test_r38a_unreadable_dirs import _build, _no_dac, _q2k_inputs
from tests.build.test_r39a_msa_unlisted_dir_summary import _summary_row


def test_an_unlisted_msa_directory_is_not_a_failed_file(tmp_path: Path) -> None:
    _no_dac()
    pdb, msa, out = _q2k_inputs(tmp_path)
    (msa / "bad.a3m").write_text("not an alignment\n")  # one failed file
    (msa / "locked").mkdir()
    (msa / "locked").chmod(0)
    try:
        r = _build(pdb, out, msa)
    finally:
        (msa / "locked").chmod(0o755)
    assert r.returncode == 1, r.stderr[-2000:]
    assert _summary_row(r.stdout, "msa: MSA files failed") == "1", r.stdout
    assert _summary_row(r.stdout, "msa: MSA directories that cannot be listed") == "1", r.stdout
