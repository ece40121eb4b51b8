"""``featurecache prune --sources-gone PDB_DIR [--msa-dir DIR]`` refuses a directory that holds no
input file of its kind while the store has entries (or MSAs) built from it: "not mounted?".

Review R1 (s26) #1: the PDB_DIR guard counted any file, so a directory holding only a README.txt
(a mount point whose volume is not mounted) or only ``1orc.pdb1`` (a name the build does not read
as a structure) removed and deleted every entry built from it. The guard now counts what ``build``
counts as a structure file (``build.run.check_structure_files``: ``structure_format``). On the
``--msa-dir`` side, a name was an MSA file if any of its suffixes was one (``notes.a3m.txt``
disarmed the guard) and only in lower case (``1PSM_A.A3M``, which the MSA stage reads, did not
count); now its last suffix (``.gz`` aside), in any case.

Real builds (1 worker) of the repo's sample 1psm and 2q2k structures with their real OpenFold MSAs;
the real CLI, run in this process (tests/conftest.py's cli_in_process)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import featurecache
from tests.conftest import SAMPLES, STRUCTURES, CliRun, build_store, cli_in_process, store_snapshot

OPENFOLD = SAMPLES / "msas" / "openfold"
IDS = ["1psm", "2q2k"]


def _cli(*args: str | Path) -> CliRun:
    """``featurecache ARGS`` (prune): the real CLI, in this process (tests/conftest.py)."""
    return cli_in_process(*map(str, args))


def _refused(*args: str | Path) -> CliRun:
    """A prune the test expects refused (exit 2): the same CLI, in this process."""
    return cli_in_process(*map(str, args))


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(store, pdb, msa): 1psm and 2q2k, each with its two OpenFold MSA files."""
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    for entry in IDS:
        shutil.copy(SAMPLES / "structures" / f"{entry}.cif", pdb)
        (msa / f"{entry}_A").mkdir(parents=True)
        for name in ("bfd_uniclust_hits.a3m", "mgnify_hits.sto"):
            shutil.copy(OPENFOLD / f"{entry}_A" / name, msa / f"{entry}_A")
    store = tmp_path / "s"
    summary = build_store(store, pdb, workers=1, msa_dir=msa, part_size=1)
    assert summary.n_failed == 0 and featurecache.open_store(store).ids == IDS
    assert featurecache.open_store(store).msas.num_rows >= 2
    return store, pdb, msa


def _empty(d: Path, aside: Path) -> None:
    """Move ``d``'s contents to ``aside`` (``d`` stays, as a mount point does)."""
    aside.mkdir()
    for p in d.iterdir():
        p.rename(aside / p.name)


@pytest.mark.parametrize(
    ("left", "named"),
    [
        ({"README.txt": "the structures live on /mnt/nfs\n"}, "1 other file (README.txt)"),
        (
            {"1orc.pdb1": STRUCTURES / "1orc.pdb"},
            "1 other file (1orc.pdb1)",
        ),  # a real PDB file, assembly name
        (
            {"notes/a.txt": "x\n", "b.md": "y\n", "c.cif.bz2": "z\n", "d.pdb1": "w\n"},
            "4 other files (b.md, c.cif.bz2, d.pdb1, …)",
        ),
    ],
    ids=["readme", "pdb1", "several"],
)
def test_a_pdb_dir_holding_no_structure_file_is_refused(
    built: tuple[Path, Path, Path], tmp_path: Path, left: dict[str, str | Path], named: str
) -> None:
    store, pdb, _msa = built
    _empty(pdb, tmp_path / "aside")
    for rel, what in left.items():
        (pdb / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, Path):
            shutil.copy(what, pdb / rel)
        else:
            (pdb / rel).write_text(what)
    before = store_snapshot(store)
    for dry in ([], ["--dry-run"]):
        r = _refused("prune", store, "--sources-gone", pdb, *dry)
        out = r.stdout + r.stderr
        assert r.returncode == 2, (dry, out)
        assert r.stdout == "", (dry, out)  # nothing listed as removed
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, (dry, out)  # one line, no traceback
        assert f"--sources-gone {pdb}: no structure file under it" in lines[0], (dry, out)
        assert named in lines[0] and "2 stored entries" in lines[0], (dry, out)
        assert "not mounted?" in lines[0] and "nothing removed" in lines[0], (dry, out)
        assert store_snapshot(store) == before, dry
    assert featurecache.open_store(store).ids == IDS
    # the volume back: nothing is gone, nothing is removed
    for p in (tmp_path / "aside").iterdir():
        p.rename(pdb / p.name)
    ok = _cli("prune", store, "--sources-gone", pdb)
    assert ok.returncode == 0 and ok.stdout.startswith("removed 0 entries"), ok.stdout + ok.stderr
    assert featurecache.open_store(store).ids == IDS


def test_structure_files_for_some_entries_among_other_files_remove_the_others(
    built: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The normal prune: 1psm's file is there (with unrelated files), 2q2k's is gone: 2q2k goes."""
    store, pdb, _msa = built
    (pdb / "2q2k.cif").rename(tmp_path / "2q2k.cif")
    (pdb / "README.txt").write_text("notes\n")
    shutil.copy(STRUCTURES / "1orc.pdb", pdb / "1orc.pdb1")
    dry = _cli("prune", store, "--sources-gone", pdb, "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith(
        f"would remove 1 entry whose files are gone from {pdb}: 2q2k"
    ), dry.stdout + dry.stderr
    assert featurecache.open_store(store).ids == IDS
    r = _cli("prune", store, "--sources-gone", pdb)
    assert r.returncode == 0 and r.stdout.startswith(
        f"removed 1 entry whose files are gone from {pdb}: 2q2k"
    ), r.stdout + r.stderr
    assert featurecache.open_store(store).ids == ["1psm"]
    # a structure file of no stored entry is a structure file: the guard lets it through, and 1psm goes
    (pdb / "1psm.cif").rename(tmp_path / "1psm.cif")
    shutil.copy(STRUCTURES / "1orc.pdb", pdb / "1orc.pdb")
    r = _cli("prune", store, "--sources-gone", pdb)
    assert r.returncode == 0 and "removed 1 entry whose files are gone" in r.stdout, r.stdout + r.stderr
    assert featurecache.open_store(store).ids == []


def _msa_keys(store: Path) -> list[str]:
    return sorted(featurecache.open_store(store).msas.column("key").to_pylist())


def test_an_msa_dir_holding_only_a_name_with_an_msa_suffix_inside_is_refused(
    built: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """``notes.a3m.txt`` is not an MSA file (``.txt``, and its text is not an MSA's): the --msa-dir
    guard refuses, nothing removed. (A file whose content is an MSA's counts whatever its name, as
    the MSA stage reads it: :func:`test_an_msa_file_known_by_its_content_counts_as_one`.)"""
    store, pdb, msa = built
    keys = _msa_keys(store)
    _empty(msa, tmp_path / "msa-away")
    (msa / "notes.a3m.txt").write_text("the MSAs live on the cluster volume\n")
    (msa / "hits.sto.bak").write_text("backup of the hit lists, moved to the cluster volume\n")
    before = store_snapshot(store)
    for dry in ([], ["--dry-run"]):
        r = _refused("prune", store, "--sources-gone", pdb, "--msa-dir", msa, *dry)
        assert r.returncode == 2, (dry, r.stdout + r.stderr)
        assert f"--msa-dir {msa}: no MSA file" in r.stderr and "not mounted?" in r.stderr, r.stdout + r.stderr
        assert r.stdout == "" and store_snapshot(store) == before, dry
    assert _msa_keys(store) == keys


def test_an_msa_file_named_in_upper_case_counts_as_one(
    built: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The MSA stage reads ``1PSM_A.A3M`` (names in any case): the guard lets it through, and the
    MSAs whose files are gone are removed (both stored MSA sets' files are gone)."""
    store, pdb, msa = built
    _empty(msa, tmp_path / "msa-away")
    shutil.copy(tmp_path / "msa-away" / "1psm_A" / "bfd_uniclust_hits.a3m", msa / "1PSM_A.A3M")
    r = _cli("prune", store, "--sources-gone", pdb, "--msa-dir", msa, "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"would remove 2 MSAs whose files are gone from {msa}" in r.stdout, r.stdout + r.stderr


def test_prune_prints_the_summary_lines_the_readme_describes(
    built: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Review R1 (s26) #4: the README said prune's result was one line; with --sources-gone and
    --msa-dir it is three, on stdout: the entries, the MSAs, the parts (in that order)."""
    store, pdb, msa = built
    (pdb / "2q2k.cif").rename(tmp_path / "2q2k.cif")  # 2q2k's structure gone
    shutil.move(msa / "1psm_A", tmp_path / "1psm_A")  # 1psm's MSA files gone (1psm stays)
    r = _cli("prune", store, "--sources-gone", pdb, "--msa-dir", msa)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 3, r.stdout
    assert lines[0].startswith(f"removed 1 entry whose files are gone from {pdb}: 2q2k"), r.stdout
    assert lines[1].startswith(f"removed 1 MSA whose files are gone from {msa} (used by 1psm/A)"), r.stdout
    assert lines[2].startswith("removed ") and " part(s), " in lines[2], r.stdout
    plain = _cli("prune", store)
    assert plain.returncode == 0 and len(plain.stdout.strip().splitlines()) == 1, plain.stdout
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    assert "`prune`'s summary lines (the parts; with `--sources-gone`, first the entries, and with " \
        "`--msa-dir` the MSAs)" in readme  # fmt: skip
    assert "`prune`'s and `report`'s one line" not in readme


def test_an_msa_file_known_by_its_content_counts_as_one(
    built: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Review RF1 s26 #1: the MSA stage reads a file by its content (``bfd.a3m.txt`` is an a3m), so
    a store can be built from one; regenerated as ``bfd_v2.a3m.txt`` (no MSA suffix, not a stored
    file), the guard refused the prune saying there was no MSA file. It now looks at the content as
    the MSA stage does: the prune runs and removes the MSAs whose files are gone."""
    store, pdb, msa = built
    _empty(msa, tmp_path / "msa-away")
    (msa / "1psm_A").mkdir()
    shutil.copy(tmp_path / "msa-away" / "1psm_A" / "bfd_uniclust_hits.a3m", msa / "1psm_A" / "bfd_v2.a3m.txt")
    r = _cli("prune", store, "--sources-gone", pdb, "--msa-dir", msa, "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"would remove 2 MSAs whose files are gone from {msa}" in r.stdout, r.stdout + r.stderr


def test_the_refusals_count_one_stored_entry_or_msa_in_the_singular(tmp_path: Path) -> None:
    """Review RF1 s26 #3: '1 stored entries were' / '1 stored MSAs were'."""
    pdb, msa = tmp_path / "pdb", tmp_path / "msa"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    (msa / "1psm_A").mkdir(parents=True)
    shutil.copy(OPENFOLD / "1psm_A" / "bfd_uniclust_hits.a3m", msa / "1psm_A")
    store = tmp_path / "s"
    assert build_store(store, pdb, workers=1, msa_dir=msa).n_failed == 0
    _empty(msa, tmp_path / "msa-away")
    (msa / "README.txt").write_text("on the cluster volume\n")
    r = _refused("prune", store, "--sources-gone", pdb, "--msa-dir", msa, "--dry-run")
    assert r.returncode == 2 and "but 1 stored MSA was built from it" in r.stderr, r.stderr
    _empty(pdb, tmp_path / "pdb-away")
    (pdb / "README.txt").write_text("on the cluster volume\n")
    r = _refused("prune", store, "--sources-gone", pdb, "--dry-run")
    assert r.returncode == 2 and "but 1 stored entry was built from it" in r.stderr, r.stderr
