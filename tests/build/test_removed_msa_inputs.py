"""A failed MSA file (stage ``msa``) whose file is gone from ``--msa-dir``: the next build from that
``--msa-dir`` withdraws its listed failure, as c6331d4 does for a structure file gone from
``--pdb-dir`` (``index/withdrawn.arrow``); put back, it fails and is listed again. Before, the
failure stayed listed in ``featurecache info --failures`` for good: the withdrawal covered
structure failures only (``index._latest_failures`` keeps MSA failures apart).

With the same care as for structures: MSA failure paths are relative to ``--msa-dir``, so each MSA
part now records the resolved ``--msa-dir`` (its manifest's ``source_dir``); a build without
``--msa-dir``, or from another one, withdraws nothing, nor does one of a part that recorded no
directory (written before this change).

Real builds (LocalCluster, 1 worker) of the sample 1psm structure with its real OpenFold MSA; the
failing MSA files are real alignments gzipped and cut in half (a gzip stream without its end)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

import featurecache
from tests.conftest import SAMPLES, build_store, build_with_package, featurecache_at

GOOD = "1psm_A/bfd_uniclust_hits.a3m"
BROKEN = ("1psm_A/uniref90_hits.a3m.gz", "1psm_A/mgnify_hits.sto.gz")


def _truncated(source: str) -> bytes:
    packed = gzip.compress((SAMPLES / "msas" / "openfold" / source).read_bytes(), mtime=0)
    return packed[: len(packed) // 2]


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    """(--pdb-dir with 1psm.cif, --msa-dir with 1psm's real a3m and the two broken files)."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    msa = tmp_path / "msa"
    (msa / "1psm_A").mkdir(parents=True)
    shutil.copy(SAMPLES / "msas" / "openfold" / GOOD, msa / GOOD)
    for name, source in zip(BROKEN, ("1psm_A/uniref90_hits.sto", "1psm_A/mgnify_hits.sto"), strict=True):
        (msa / name).write_bytes(_truncated(source))
    for name in BROKEN:  # gzip itself cannot read them
        with pytest.raises(EOFError):
            gzip.decompress((msa / name).read_bytes())
    return pdb, msa


def _listed(store: Path) -> tuple[set[tuple[str, str]], set[str]]:
    """((path, stage) of the listed failures, paths of the withdrawn ones) of the store's index."""
    s = featurecache.open_store(store)
    return ({(f["path"], f["stage"]) for f in s.failures.to_pylist()},
            {w["path"] for w in s.table("withdrawn").to_pylist()})  # fmt: skip


def _msa_sources(store: Path) -> list[list[str]]:
    return [m["sources"] for m in featurecache.open_store(store).msas.to_pylist()]


def test_a_removed_msa_files_failure_is_withdrawn_and_listed_again_when_put_back(tmp_path: Path) -> None:
    pdb, msa = _inputs(tmp_path)
    store = tmp_path / "store"
    first = build_store(store, pdb, workers=1, msa_dir=msa)
    assert first.n_failed == 2 and first.failed_by_stage == {"msa": 2}
    assert _listed(store) == ({(b, "msa") for b in BROKEN}, set())
    assert _msa_sources(store) == [[GOOD]]

    # one broken file removed; the build names the directory through a symlink
    removed, kept = BROKEN
    (msa / removed).unlink()
    link = tmp_path / "link-to-msa"
    link.symlink_to(msa, target_is_directory=True)
    again = build_store(store, pdb, workers=1, msa_dir=link)
    assert again.n_failed == 0 and again.n_failed_earlier == 1  # the kept one: same bytes, still failing
    # before: both still listed, nothing withdrawn
    assert _listed(store) == ({(kept, "msa")}, {removed})
    (row,) = featurecache.open_store(store).table("withdrawn").to_pylist()
    assert row["stage"] == "withdrawn" and "no such file" in row["message"] and row["part"].startswith("m-")
    assert _msa_sources(store) == [[GOOD]]  # the stored MSA stays

    # put back: it fails again and is listed again
    (msa / removed).write_bytes(_truncated("1psm_A/uniref90_hits.sto"))
    back = build_store(store, pdb, workers=1, msa_dir=msa)
    assert back.n_failed == 1 and back.failures[0]["path"] == removed
    assert _listed(store) == ({(b, "msa") for b in BROKEN}, set())
    # every MSA part records the --msa-dir it read (resolved), whatever name the build was given
    manifests = [json.loads(p.read_text()) for p in sorted(store.glob("parts/m-*/_index/part.json"))]
    assert len(manifests) == 3  # the first build's, the withdrawal's, the put-back file's failure
    assert {m["source_dir"] for m in manifests} == {str(msa.resolve())}


def test_no_or_another_msa_dir_withdraws_nothing(tmp_path: Path) -> None:
    """A build without ``--msa-dir``, and one from another ``--msa-dir`` (a store extended from
    two), did not see the first directory's paths: its failures stay listed."""
    pdb, msa = _inputs(tmp_path)
    store = tmp_path / "store"
    assert build_store(store, pdb, workers=1, msa_dir=msa).n_failed == 2
    for name in BROKEN:
        (msa / name).unlink()
    listed = ({(b, "msa") for b in BROKEN}, set[str]())

    without = build_store(store, pdb, workers=1)
    assert without.n_failed == without.n_failed_earlier == 0
    assert _listed(store) == listed

    other = tmp_path / "other"
    (other / "1psm_A").mkdir(parents=True)
    shutil.copy(SAMPLES / "msas" / "openfold" / GOOD, other / GOOD)
    from_other = build_store(store, pdb, workers=1, msa_dir=other)
    assert from_other.n_failed == from_other.n_failed_earlier == 0
    assert _listed(store) == listed


#: the last commit whose MSA parts did not record their --msa-dir
BEFORE_MSA_SOURCE_DIR = "c6331d4"


def test_a_failure_of_an_msa_part_without_its_directory_stays_listed(tmp_path: Path) -> None:
    """An MSA failure in a part written by the :data:`BEFORE_MSA_SOURCE_DIR` code (no
    ``source_dir`` in its manifest): nothing says which directory its path belongs to, so a build
    after its file was removed keeps it listed (as before)."""
    old = featurecache_at(BEFORE_MSA_SOURCE_DIR, tmp_path / "old")
    pdb, msa = _inputs(tmp_path)
    store = tmp_path / "store"
    r = build_with_package(old, pdb, store, msa_dir=msa)
    assert r.returncode == 1, r.stdout + r.stderr  # the broken files failed
    (manifest,) = [json.loads(p.read_text()) for p in store.glob("parts/m-*/_index/part.json")]
    assert "source_dir" not in manifest

    (msa / BROKEN[0]).unlink()
    summary = build_store(store, pdb, workers=1, msa_dir=msa)
    assert summary.n_failed == 0 and summary.n_failed_earlier == 1
    assert _listed(store) == ({(b, "msa") for b in BROKEN}, set())


def test_lists_msa_file_is_what_the_scan_lists(tmp_path: Path) -> None:
    """The per-path test the withdrawal uses agrees with the MSA stage's walk: hidden names, the
    store inside ``--msa-dir`` and gone files are not listed; a symlinked file is, and so is a file
    under a symlinked directory (followed since session 20)."""
    from featurecache.build.msa_stage import _candidate_files, lists_msa_file

    top = tmp_path / "msa"
    listed = ["a.a3m", "d/b.sto", "d/e/c.a3m.gz", "file-link.a3m", "dir-link/y.a3m"]
    not_listed = [".hidden.a3m", "d/.h/x.a3m", "store/index/failures.arrow", "gone.a3m",
                  "d", "", "../msa/a.a3m"]  # fmt: skip
    for rel in [
        "a.a3m",
        "d/b.sto",
        "d/e/c.a3m.gz",
        ".hidden.a3m",
        "d/.h/x.a3m",
        "store/index/failures.arrow",
    ]:
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(">q\nAC\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "y.a3m").write_text(">q\nAC\n")
    (top / "dir-link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (top / "file-link.a3m").symlink_to(top / "a.a3m")
    store = top / "store"
    assert sorted(rel for rel, _size, _mtime in _candidate_files(top, store)) == sorted(listed)
    assert [r for r in listed if not lists_msa_file(top, r, store)] == []
    assert [r for r in not_listed if lists_msa_file(top, r, store)] == []
