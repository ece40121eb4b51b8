"""A directory reachable by several paths (symlinked directories) is read once, and a re-run keeps
what the store holds (a review's findings RF1 1, 3, 4 on 01ff4a7):

- a second link to a stored directory, or a stored directory turned into a link, leaves each file
  one entry under its stored path and id (README: "Ids never change once stored");
- a layout join may use any path to a file (an MSA named by a link's name joins though the walk
  read the file through another path), and an extra link does not rewrite a stored MSA;
- the listed MSA failures of files read through a link are checked against one listing of
  ``--msa-dir`` per build, and its "not read again" warning is given once per build.

Expected values come from the trees built here (``os.listdir`` / ``os.walk(followlinks=True)``
counts, the links made) and the shipped MSA's own text; builds are real (LocalCluster, 1 worker)."""

from __future__ import annotations

import gzip
import logging
import os
import shutil
from pathlib import Path

import pytest

import featurecache
from tests.conftest import MSAS, STRUCTURES, build_store

NOT_READ_AGAIN = "not read again"


def _entries(store: Path) -> dict[str, str]:
    """source path -> id of a store's entries."""
    rows = featurecache.open_store(store).entries.select(["id", "source_path"]).to_pylist()
    return {r["source_path"]: r["id"] for r in rows}


def test_the_walk_names_every_other_path_of_a_file(tmp_path: Path) -> None:
    """Each file read once; its path and its other paths are every path os.walk (following links)
    finds for it, once each."""
    from featurecache.build.discover import alias_paths, input_paths

    top = tmp_path / "top"
    (top / "d" / "sub").mkdir(parents=True)
    (top / "d" / "x.cif").write_text("x")
    (top / "d" / "sub" / "y.cif").write_text("y")
    (top / "L1").symlink_to(top / "d", target_is_directory=True)
    (top / "m").mkdir()
    (top / "m" / "L2").symlink_to(top / "d" / "sub", target_is_directory=True)
    (top / "d" / "sub" / "up").symlink_to(top / "d", target_is_directory=True)  # a loop: no alias
    loop = {"up"}
    aliases: dict[str, list[str]] = {}
    read = [p.relative_to(top).as_posix() for p in input_paths(top, aliases=aliases)]
    assert sorted(read) == ["d/sub/y.cif", "d/x.cif"]
    seen: list[str] = []
    for d, dirs, files in os.walk(top, followlinks=True):
        dirs[:] = [x for x in dirs if x not in loop]  # os.walk would follow the loop once more
        seen += [(Path(d) / f).relative_to(top).as_posix() for f in files]
    expected = {r: {s for s in seen if s.rsplit("/", 1)[-1] == r.rsplit("/", 1)[-1]} for r in read}
    assert expected == {"d/x.cif": {"d/x.cif", "L1/x.cif"},
                        "d/sub/y.cif": {"d/sub/y.cif", "L1/sub/y.cif", "m/L2/y.cif"}}  # fmt: skip
    for r in read:
        assert {r, *alias_paths(r, aliases)} == expected[r]


def test_a_second_link_to_a_stored_directory_keeps_one_entry_per_file(tmp_path: Path) -> None:
    """Repro A: structures/b -> ext/d built; structures/a -> ext/d added (walked first)."""
    ext = tmp_path / "ext" / "d"
    ext.mkdir(parents=True)
    for name in ("102m.cif", "5y2e.cif"):
        shutil.copy(STRUCTURES / name, ext / name)
    pdb = tmp_path / "structures"
    pdb.mkdir()
    (pdb / "b").symlink_to(ext, target_is_directory=True)
    store = tmp_path / "store"
    build_store(store, pdb, workers=1)
    first = _entries(store)
    assert sorted(first) == sorted(f"b/{n}" for n in os.listdir(ext))
    (pdb / "a").symlink_to(ext, target_is_directory=True)
    build_store(store, pdb, workers=1)
    assert _entries(store) == first  # one entry per file of ext/d, same paths and ids


def test_a_stored_directory_turned_into_a_link_keeps_its_path(tmp_path: Path) -> None:
    """Repro B: plain structures/data/5y2e.cif next to structures/alias -> data, built; then data is
    moved away and replaced by a link to it (alias, a link met first, now reaches it too)."""
    pdb = tmp_path / "structures"
    (pdb / "data").mkdir(parents=True)
    shutil.copy(STRUCTURES / "5y2e.cif", pdb / "data" / "5y2e.cif")
    (pdb / "alias").symlink_to("data", target_is_directory=True)
    store = tmp_path / "store"
    build_store(store, pdb, workers=1)
    first = _entries(store)
    assert list(first) == ["data/5y2e.cif"]
    shutil.move(pdb / "data", tmp_path / "moved")
    (pdb / "data").symlink_to(tmp_path / "moved", target_is_directory=True)
    summary = build_store(store, pdb, workers=1)
    assert _entries(store) == first
    assert summary.n_built == 0


def _query(a3m: Path) -> str:
    """The first sequence of an a3m file (its query), read here line by line."""
    opener = gzip.open if a3m.name.endswith(".gz") else open
    with opener(a3m, "rt") as f:
        lines = [ln.strip() for ln in f if ln.strip()]
    return lines[1]


def test_a_layout_join_through_a_link_the_walk_did_not_read(tmp_path: Path) -> None:
    """Repro RF1 3: msa/pool/p1/bfd_uniclust_hits.a3m is read as such (plain first); the layout name
    is the link alignments/209d-assembly1_C -> ../pool/p1. 209d's chain C query leaves out its PXA,
    so only the layout joins it."""
    src = MSAS / "alphafold3-pytorch" / "209d-assembly1C_protein.a3m"
    pdb = tmp_path / "structures"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "209d-assembly1.cif", pdb)
    msa = tmp_path / "msa"
    (msa / "pool" / "p1").mkdir(parents=True)
    shutil.copy(src, msa / "pool" / "p1" / "bfd_uniclust_hits.a3m")
    (msa / "alignments").mkdir()
    (msa / "alignments" / "209d-assembly1_C").symlink_to("../pool/p1", target_is_directory=True)
    store = tmp_path / "store"
    summary = build_store(store, pdb, workers=1, msa_dir=msa)
    assert summary.stages["msa"]["alignments joined (exact / by layout)"] == "0 / 1"
    s = featurecache.open_store(store)
    chains = s.chains.select(["entry_id", "auth_id", "label_id", "sequence_hash", "sequence"]).to_pylist()
    (c,) = [r for r in chains if "C" in (r["auth_id"], r["label_id"]) and r["sequence"]]
    assert len(_query(src).replace("-", "")) < len(c["sequence"])  # a query that leaves residues out
    msas = {r["key"]: r for r in s.msas.to_pylist()}
    assert msas[c["sequence_hash"]]["sources"] == ["pool/p1/bfd_uniclust_hits.a3m"]
    # a second link to the pool, met first now: the stored MSA is up to date
    (msa / "alignments" / "00extra").symlink_to("../pool/p1", target_is_directory=True)
    again = build_store(store, pdb, workers=1, msa_dir=msa)
    assert again.stages["msa"]["MSAs written (from files / single sequence)"] == "0 / 0"
    assert again.stages["msa"]["alignments joined (exact / by layout)"] == "0 / 1"


def test_an_extra_link_does_not_write_a_stored_msa_again(tmp_path: Path) -> None:
    """Repro RF1 3 (second part): alignments/3u8v_A -> msastore/3u8v built; alignments/00extra ->
    msastore/3u8v added, met first: the file is read under another path, its content unchanged."""
    pdb = tmp_path / "structures"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "3u8v.cif", pdb)
    pool = tmp_path / "msastore" / "3u8v"
    pool.mkdir(parents=True)
    shutil.copy(MSAS / "openfold" / "3u8v_A" / "bfd_uniclust_hits.a3m", pool)
    msa = tmp_path / "msa"
    (msa / "alignments").mkdir(parents=True)
    (msa / "alignments" / "3u8v_A").symlink_to(pool, target_is_directory=True)
    store = tmp_path / "store"
    first = build_store(store, pdb, workers=1, msa_dir=msa)
    assert first.stages["msa"]["MSAs written (from files / single sequence)"].startswith("1 / ")
    (msa / "alignments" / "00extra").symlink_to(pool, target_is_directory=True)
    again = build_store(store, pdb, workers=1, msa_dir=msa)
    assert again.stages["msa"]["MSAs written (from files / single sequence)"] == "0 / 0"


N_BAD = 4


def test_msa_failures_through_a_link_walk_the_msa_dir_once_and_warn_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Repro RF1 4: N listed MSA failures whose paths go through a link; a no-change re-run checks
    them against one listing of --msa-dir and gives one "not read again" warning (the second link
    to the bad files' directory), not N + 1."""
    pdb = tmp_path / "structures"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", pdb)
    bad = tmp_path / "bad"
    bad.mkdir()
    for k in range(N_BAD):
        (bad / f"b{k}.a3m").write_bytes(b"\x1f\x8bnot gzip")  # gzip magic, damaged stream: fails
    msa = tmp_path / "msa"
    msa.mkdir()
    (msa / "farm").symlink_to(bad, target_is_directory=True)
    (msa / "twin").symlink_to(bad, target_is_directory=True)  # not read again: one warning
    store = tmp_path / "store"
    build_store(store, pdb, workers=1, msa_dir=msa)
    listed = featurecache.open_store(store).failures
    assert sorted(listed.column("path").to_pylist()) == sorted(f"farm/{n}" for n in os.listdir(bad))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="featurecache.build.discover"):
        summary = build_store(store, pdb, workers=1, msa_dir=msa)
    warnings = [r.getMessage() for r in caplog.records if NOT_READ_AGAIN in r.getMessage()]
    assert len(warnings) == 1 and str(msa / "twin") in warnings[0]
    assert summary.n_msa_failed_earlier == N_BAD  # still failing, none withdrawn
    s = featurecache.open_store(store)
    assert sorted(s.failures.column("path").to_pylist()) == sorted(f"farm/{n}" for n in os.listdir(bad))
