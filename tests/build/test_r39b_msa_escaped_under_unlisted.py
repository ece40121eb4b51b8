"""Review R39b s50 #2: an MSA failure whose name is not UTF-8 (recorded escaped, ``bad\\xff.a3m``)
under a ``--msa-dir`` directory that could no longer be listed was withdrawn ("no longer under
--msa-dir") and listed again once the directory could be listed, where a plain-named failure beside
it was kept (not known to be gone). Both are kept now while the directory is a failure row of its
own; the failure list ends where it began once the directory can be listed again.

Every directory above the failure's file is asked, not only its own: the test runs with the files
in ``sub/`` (``sub`` made unlistable) and in ``a/sub/`` with ``a`` made unlistable (review R40c s51
#5: asking only the immediate parent ``a/sub/`` withdrew the failure there)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from featurecache.store.reader import open_store
from tests.build.test_r38a_unreadable_dirs import _build, _no_dac, _q2k_inputs


def _failures(out: Path) -> list[str]:
    return sorted(open_store(out).failures.column("path").to_pylist())


@pytest.mark.parametrize(("here", "locked"), [("sub", "sub"), ("a/sub", "a")], ids=["parent", "grandparent"])
def test_an_escaped_msa_failure_under_an_unlistable_directory_is_kept(
    tmp_path: Path, here: str, locked: str
) -> None:
    _no_dac()
    pdb, msa, out = _q2k_inputs(tmp_path)
    sub = msa / here
    sub.mkdir(parents=True)
    bad = os.fsencode(sub) + b"/bad\xff.a3m"
    with open(bad, "wb") as fh:
        fh.write(b">q\nACDEFG\n")
    (sub / "junk.a3m").write_text(">q\nACDEFG\n>h\nAC\n")
    old = time.time() - 3600
    for f in (bad, sub / "junk.a3m", msa / "2q2k_A" / "mgnify_hits.sto"):
        os.utime(f, (old, old))

    assert _build(pdb, out, msa).returncode == 1
    first = _failures(out)
    assert first == [f"{here}/bad\\xff.a3m", f"{here}/junk.a3m"], first

    (msa / locked).chmod(0)
    try:
        r = _build(pdb, out, msa)
    finally:
        (msa / locked).chmod(0o755)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "withdrawn" not in r.stderr, r.stderr[-3000:]
    assert _failures(out) == [f"{locked}/", *first]

    r = _build(pdb, out, msa)  # listable again: only the directory's own row goes
    assert r.returncode == 1, r.stderr[-3000:]
    assert _failures(out) == first
