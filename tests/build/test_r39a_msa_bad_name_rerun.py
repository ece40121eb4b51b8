"""Review R39a s50 #3: a ``--msa-dir`` file whose name is not valid UTF-8 is a failure row (its path
recorded escaped, ``bad\\xff.a3m``). Each later build withdrew that failure as "no such file" (the
escaped path names no file: the check looked for the file before asking the MSA stage's listing,
which has the escaped path) and listed it again: two new MSA parts per build, and a false "no
longer under --msa-dir" line. An escaped path (or a directory's, ending in ``/``) is looked up in
the listing; a build with nothing changed writes nothing and withdraws nothing."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from featurecache.store.reader import open_store
from tests.conftest import SAMPLES, build_store


def test_a_non_utf8_msa_file_stays_listed_and_a_rerun_writes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pdb, msa, out = tmp_path / "pdb", tmp_path / "msa", tmp_path / "store"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb)
    shutil.copytree(SAMPLES / "msas" / "openfold" / "2q2k_A", msa / "2q2k_A")
    bad = msa / os.fsdecode(b"bad\xff.a3m")
    shutil.copy(msa / "2q2k_A" / "bfd_uniclust_hits.a3m", bad)

    build_store(out, pdb, workers=1, msa_dir=msa)
    fails = open_store(out).failures.to_pylist()
    assert [(f["path"], f["stage"]) for f in fails] == [("bad\\xff.a3m", "msa")]
    parts = sorted(p.name for p in (out / "parts").iterdir())

    caplog.set_level(logging.INFO)
    for _ in range(2):
        build_store(out, pdb, workers=1, msa_dir=msa)
        messages = [r.getMessage() for r in caplog.records]
        assert not [m for m in messages if "withdrawn" in m], messages
        assert sorted(p.name for p in (out / "parts").iterdir()) == parts
        fails = open_store(out).failures.to_pylist()
        assert [(f["path"], f["stage"]) for f in fails] == [("bad\\xff.a3m", "msa")]

    bad.unlink()  # gone: its failure is withdrawn
    caplog.clear()
    build_store(out, pdb, workers=1, msa_dir=msa)
    assert open_store(out).failures.num_rows == 0
    assert [r for r in caplog.records if "1 listed MSA failure(s) withdrawn" in r.getMessage()]
