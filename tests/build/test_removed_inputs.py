"""A failed input whose file is gone from ``--pdb-dir``: the next build from that directory
withdraws its listed failure (``index/withdrawn.arrow``, as for MSA files under ``--pdb-dir``);
a stored entry whose file is gone stays. Before, the failure stayed listed in ``featurecache info
--failures`` for good (while no longer counting in the exit status).

The index records input paths relative to ``--pdb-dir`` only, so each structure part now records
the resolved ``--pdb-dir`` (its manifest's ``source_dir``): a failure recorded from another
directory (a store extended from several) is not withdrawn by a build that did not see its path,
nor one of a part that recorded no directory (written before session 19).

Real builds (LocalCluster, 1 worker) of real corpus files; the malformed ones are listed as
``EDGE/MALFORMED`` in SOURCES.tsv (mmCIF without ``_atom_site``)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import gemmi

import featurecache
from tests.conftest import STRUCTURES, build_store, build_with_package, featurecache_at

GOOD = ("3zee.cif", "1orc.pdb")
MALFORMED = ("4Q9R_min.cif", "1MOM_min.cif")


def _atom_sites(name: str) -> int:
    """Rows of ``_atom_site`` in a corpus mmCIF, as gemmi reads the file."""
    return len(gemmi.cif.read(str(STRUCTURES / name)).sole_block().find_mmcif_category("_atom_site."))


def _copy(d: Path, *names: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(STRUCTURES / name, d / name)
    return d


def _listed(store: Path) -> tuple[set[str], set[str]]:
    """(paths of the listed failures, paths of the withdrawn ones) of the store's index."""
    s = featurecache.open_store(store)
    return {f["path"] for f in s.failures.to_pylist()}, {w["path"] for w in s.table("withdrawn").to_pylist()}


def test_a_removed_inputs_failure_is_withdrawn_and_its_entry_is_kept(tmp_path: Path) -> None:
    # the malformed files have no coordinates (gemmi), the good ones have
    assert [_atom_sites(m) for m in MALFORMED] == [0, 0] and _atom_sites("3zee.cif") > 0
    pdb = _copy(tmp_path / "pdb", *GOOD, *MALFORMED)
    store = tmp_path / "store"
    first = build_store(store, pdb, workers=1)
    assert first.n_failed == 2 and first.n_built == 2
    assert _listed(store) == (set(MALFORMED), set())

    # one malformed file and one good file removed
    (pdb / "4Q9R_min.cif").unlink()
    (pdb / "1orc.pdb").unlink()
    again = build_store(store, pdb, workers=1)
    assert again.n_failed == 0 and again.n_built == 0
    assert again.n_failed_earlier == 1  # 1MOM_min.cif: same bytes, still failing
    # before: {"4Q9R_min.cif", "1MOM_min.cif"} listed, nothing withdrawn
    assert _listed(store) == ({"1MOM_min.cif"}, {"4Q9R_min.cif"})
    s = featurecache.open_store(store)
    (row,) = s.table("withdrawn").to_pylist()
    assert row["stage"] == "withdrawn" and "no such file" in row["message"] and "4Q9R_min.cif" not in s.ids
    # the entry whose file is gone stays, its arrays readable
    assert sorted(s.ids) == ["1orc", "3zee"]
    (kept,) = [r for r in s.entries.to_pylist() if r["id"] == "1orc"]
    assert kept["source_sha256"] == hashlib.sha256((STRUCTURES / "1orc.pdb").read_bytes()).hexdigest()
    assert len(s.entry("1orc").atoms["coords"]) == kept["atom_count"] > 0

    # the file put back: built again, listed again
    _copy(pdb, "4Q9R_min.cif")
    back = build_store(store, pdb, workers=1)
    assert back.n_failed == 1 and back.failures[0]["path"] == "4Q9R_min.cif"
    assert _listed(store) == (set(MALFORMED), set())


def test_failures_of_another_pdb_dir_are_not_withdrawn(tmp_path: Path) -> None:
    """A store extended from two directories: the build from the second does not withdraw the
    first one's failure (it never saw that path); a build from the first (named through a symlink)
    after the file was removed does."""
    a = _copy(tmp_path / "a", "3zee.cif", "4Q9R_min.cif")
    b = _copy(tmp_path / "b", "1orc.pdb")
    store = tmp_path / "store"
    assert build_store(store, a, workers=1).n_failed == 1
    from_b = build_store(store, b, workers=1)
    assert from_b.n_built == 1 and from_b.n_failed == from_b.n_failed_earlier == 0
    assert _listed(store) == ({"4Q9R_min.cif"}, set())  # a's failure stays listed

    (a / "4Q9R_min.cif").unlink()
    link = tmp_path / "link-to-a"
    link.symlink_to(a, target_is_directory=True)
    from_a = build_store(store, link, workers=1)
    assert from_a.n_failed == from_a.n_failed_earlier == 0
    assert _listed(store) == (set(), {"4Q9R_min.cif"})  # before: still listed
    assert sorted(featurecache.open_store(store).ids) == ["1orc", "3zee"]  # b's entry stays


#: the last commit before parts recorded their --pdb-dir
BEFORE_SOURCE_DIR = "4161354"


def test_a_failure_of_a_part_without_its_directory_stays_listed(tmp_path: Path) -> None:
    """A failure in a part written before parts recorded their ``--pdb-dir`` (built by the
    :data:`BEFORE_SOURCE_DIR` code): nothing says which directory its path belongs to, so a build
    after its file was removed keeps it listed (as before); a new failure of that path would be
    withdrawn."""
    old = featurecache_at(BEFORE_SOURCE_DIR, tmp_path / "old")
    pdb = _copy(tmp_path / "pdb", "3zee.cif", "4Q9R_min.cif")
    store = tmp_path / "store"
    r = build_with_package(old, pdb, store)
    assert r.returncode == 1, r.stdout + r.stderr  # the malformed file failed
    assert _listed(store) == ({"4Q9R_min.cif"}, set())

    (pdb / "4Q9R_min.cif").unlink()
    summary = build_store(store, pdb, workers=1)
    assert summary.n_failed == summary.n_failed_earlier == 0  # not an input: not in the exit status
    assert _listed(store) == ({"4Q9R_min.cif"}, set())
