"""Symlinked directories under ``--pdb-dir`` / ``--msa-dir`` are followed (data farms of links), each
real directory read once (a link to an ancestor does not loop; a warning names what was not read
again), in a deterministic order, with the store left out through a link too; paths stay as seen
through the link. Before, the walk (``Path.rglob``) did not enter a symlinked directory and said
nothing: a farm of per-chain directory links gave 3 of 21 MSA files.

Expected file lists are counted here with ``os.walk(followlinks=True)`` over trees built in the
test; a real build (LocalCluster, 1 worker) checks the MSAs found through links."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

import featurecache
from featurecache.build.discover import input_paths
from featurecache.build.msa_stage import _candidate_files, lists_msa_file
from tests.conftest import MSAS, SAMPLES, build_store


def _files_through_links(top: Path) -> set[str]:
    """Relative paths of the non-hidden files under ``top``, following links (``os.walk``); only for
    trees without cycles or aliases."""
    out = set()
    for d, dirs, files in os.walk(top, followlinks=True):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        out |= {(Path(d) / f).relative_to(top).as_posix() for f in files if not f.startswith(".")}
    return out


def _farm(tmp_path: Path) -> Path:
    """An MSA directory of directory links into the real OpenFold alignments (the reviewer's case)."""
    farm = tmp_path / "msa" / "openfold"
    farm.mkdir(parents=True)
    for chain in ("1psm_A", "2q2k_A", "4zey_A"):
        (farm / chain).symlink_to(MSAS / "openfold" / chain, target_is_directory=True)
    return tmp_path / "msa"


def test_the_msa_walk_follows_directory_links(tmp_path: Path) -> None:
    top = _farm(tmp_path)
    expected = _files_through_links(top)
    assert len(expected) == sum(
        len(os.listdir(MSAS / "openfold" / c)) for c in ("1psm_A", "2q2k_A", "4zey_A")
    )
    got = [rel for rel, _size, _mtime in _candidate_files(top)]
    assert got == sorted(expected)
    assert "openfold/4zey_A/uniprot_hits.sto" in got  # the path as seen through the link
    assert all(lists_msa_file(top, rel) for rel in got)


def test_the_structure_walk_follows_directory_links(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, real / name)
    pdb = tmp_path / "pdb"
    (pdb / "plain").mkdir(parents=True)
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb / "plain" / "102m.cif")
    (pdb / "linked").symlink_to(real, target_is_directory=True)
    got = sorted(p.relative_to(pdb).as_posix() for p in input_paths(pdb))
    assert (
        got == sorted(_files_through_links(pdb)) == ["linked/1psm.cif", "linked/2q2k.cif", "plain/102m.cif"]
    )


def test_a_link_to_an_ancestor_is_read_once_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    top = tmp_path / "msa"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "x.a3m").write_text(">q\nAC\n")
    (top / "y.a3m").write_text(">q\nAC\n")
    (top / "a" / "b" / "up").symlink_to(top, target_is_directory=True)  # would loop
    (top / "a" / "up2").symlink_to(top / "a", target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="featurecache.build.discover"):
        got = [rel for rel, _size, _mtime in _candidate_files(top)]
    assert got == ["a/b/x.a3m", "y.a3m"]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "2 directories not read again" in warning
    assert str(top / "a" / "b" / "up") in warning and str(top / "a" / "up2") in warning
    assert not lists_msa_file(top, "a/b/up/y.a3m") and lists_msa_file(top, "a/b/x.a3m")


def test_two_links_to_one_directory_read_it_once_plain_path_first(tmp_path: Path) -> None:
    """The plain path wins over links that sort before it; of two links, the first in order."""
    top = tmp_path / "msa"
    (top / "z_real").mkdir(parents=True)
    (top / "z_real" / "x.a3m").write_text(">q\nAC\n")
    (top / "a_link").symlink_to(top / "z_real", target_is_directory=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.a3m").write_text(">q\nAC\n")
    (top / "m_link").symlink_to(outside, target_is_directory=True)
    (top / "n_link").symlink_to(outside, target_is_directory=True)
    got = [rel for rel, _size, _mtime in _candidate_files(top)]
    assert got == ["m_link/o.a3m", "z_real/x.a3m"]
    for _ in range(2):  # deterministic
        assert [rel for rel, _s, _m in _candidate_files(top)] == got
    assert [r for r in ("a_link/x.a3m", "n_link/o.a3m") if lists_msa_file(top, r)] == []
    assert all(lists_msa_file(top, r) for r in got)


def test_the_store_is_left_out_through_a_link(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = data / "store"
    (store / "parts").mkdir(parents=True)
    (store / "parts" / "x.a3m").write_text(">q\nAC\n")
    (data / "msa").mkdir()
    (data / "msa" / "m.a3m").write_text(">q\nAC\n")
    top = tmp_path / "msa-farm"
    top.mkdir()
    (top / "data").symlink_to(data, target_is_directory=True)  # reaches the store through a link
    (top / "s").symlink_to(store, target_is_directory=True)
    got = [rel for rel, _size, _mtime in _candidate_files(top, store)]
    assert got == ["data/msa/m.a3m"]
    assert not lists_msa_file(top, "data/store/parts/x.a3m", store)
    assert not lists_msa_file(top, "s/parts/x.a3m", store)
    assert [p.relative_to(top).as_posix() for p in input_paths(top, store)] == ["data/msa/m.a3m"]


def test_a_build_joins_msas_found_through_directory_links(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    msa = tmp_path / "msa"
    (msa / "openfold").mkdir(parents=True)
    (msa / "openfold" / "1psm_A").symlink_to(
        SAMPLES / "msas" / "openfold" / "1psm_A", target_is_directory=True
    )
    summary = build_store(tmp_path / "store", pdb, workers=1, msa_dir=msa)
    assert summary.n_failed == 0
    (row,) = featurecache.open_store(tmp_path / "store").msas.to_pylist()
    alignments = sorted(
        p.name for p in (SAMPLES / "msas" / "openfold" / "1psm_A").iterdir() if p.name != "hmm_output.sto"
    )
    assert sorted(row["sources"]) == sorted(f"openfold/1psm_A/{n}" for n in alignments)


def test_msa_files_through_a_link_under_msa_dir_inside_pdb_dir_are_not_structure_inputs(
    tmp_path: Path,
) -> None:
    """``--msa-dir data/msas`` inside ``--pdb-dir data``, its alignments linked in from elsewhere: the
    structure walk meets them through the link too, and leaves them to the MSA stage."""
    from featurecache.build.discover import discover

    data = tmp_path / "data"
    (data / "msas").mkdir(parents=True)
    shutil.copy(SAMPLES / "structures" / "1psm.cif", data / "1psm.cif")
    (data / "msas" / "1psm_A").symlink_to(SAMPLES / "msas" / "openfold" / "1psm_A", target_is_directory=True)
    rels = [i.rel for i in discover(data, "cfg", msa_dir=data / "msas")]
    assert rels == ["1psm.cif"]
    assert "msas/1psm_A/uniprot_hits.sto" in {p.relative_to(data).as_posix() for p in input_paths(data)}
