"""A file or directory name that is not valid UTF-8 under ``--pdb-dir`` or ``--msa-dir`` is that
file's failure row, naming its path with the bad bytes written ``\\xNN``, and not read; the other
inputs build and the first build finishes (review R3 finding 1: the name, a lone surrogate as
``os.fsdecode`` gives it, could not be written to an Arrow table, so every build of the directory
crashed and a first build never finished: the lookup service answered 503 for good).

Real builds (the session's one-worker cluster) on real corpus files, a real ``featurecache serve``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx

from featurecache import open_store
from featurecache.store.index import first_build_finished, read_table
from services.lookup.server import background_server
from tests.conftest import MSAS, STRUCTURES, build_store

NOT_UTF8 = "file name is not valid UTF-8"


def _bad(parent: Path, name: bytes) -> Path:
    """``parent / name`` for a name of raw bytes (not valid UTF-8)."""
    return Path(os.fsdecode(os.path.join(os.fsencode(parent), name)))


def _inputs(tmp: Path) -> tuple[Path, Path]:
    pdb, msa = tmp / "pdb", tmp / "msa"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", pdb)
    shutil.copy(STRUCTURES / "5wkd.pdb", _bad(pdb, b"bad\xff\xfename.pdb"))  # a file
    sub = _bad(pdb, b"sub\xfe")  # a directory
    sub.mkdir()
    shutil.copy(STRUCTURES / "5wkd.pdb", sub / "5wkd.pdb")
    shutil.copytree(MSAS / "openfold" / "1psm_A", msa / "1psm_A")
    shutil.copy(
        MSAS / "openfold" / "1psm_A" / "bfd_uniclust_hits.a3m", _bad(msa / "1psm_A", b"extra\xff.a3m")
    )
    shutil.copytree(MSAS / "openfold" / "1psm_A", _bad(msa, b"1psm_A\xfe"))
    return pdb, msa


def _failures(store: Path) -> list[tuple[str, str, str]]:
    t = read_table(store / "index" / "failures.arrow", memory_map=False)
    return sorted((r["path"], r["stage"], r["message"]) for r in t.to_pylist())


def test_names_that_are_not_utf8_are_failure_rows_and_the_rest_builds(tmp_path: Path) -> None:
    pdb, msa = _inputs(tmp_path)
    store = tmp_path / "store"
    first = build_store(store, pdb, msa_dir=msa, workers=1)

    assert first.n_built == 1  # 1psm.cif
    rows = _failures(store)
    # the paths as the bytes were: \xNN written out, as Python's backslashreplace writes them
    structure_paths = ["bad\\xff\\xfename.pdb", "sub\\xfe/5wkd.pdb"]
    msa_paths = [f"1psm_A\\xfe/{f.name}" for f in sorted((MSAS / "openfold" / "1psm_A").iterdir())]
    msa_paths.append("1psm_A/extra\\xff.a3m")
    assert [p for p, stage, _m in rows if stage == "discover"] == structure_paths
    assert sorted(p for p, stage, _m in rows if stage == "msa") == sorted(msa_paths)
    assert len(rows) == len(structure_paths) + len(msa_paths)
    for path, _stage, message in rows:
        assert message.startswith(f"{NOT_UTF8}: {path} "), message
    assert first.n_failed == len(rows)

    assert first_build_finished(store)
    s = open_store(store)
    assert s.ids == ["1psm"]
    (chain,) = s.entry_chains("1psm")
    assert chain["msa_depth"] > 1  # chain A's MSA from its four alignment files, not the single sequence
    with background_server(store) as url:
        ready = httpx.get(f"{url}/v1/ready", timeout=30)
        assert ready.status_code == 200 and ready.json()["entries"] == 1
        assert httpx.get(f"{url}/v1/entries/1psm", timeout=30).status_code == 200

    # a rerun builds nothing, writes nothing, and still reports the same failures (exit status 1)
    second = build_store(store, pdb, msa_dir=msa, workers=1)
    assert (second.n_built, second.n_failed) == (0, 0)
    assert second.n_failed_earlier == len(rows)
    assert _failures(store) == rows
    assert not (store / "index" / "withdrawn.arrow").exists()
