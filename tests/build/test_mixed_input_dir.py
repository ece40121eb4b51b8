"""MSA files under ``--pdb-dir`` when ``--msa-dir`` is the same directory or lies inside it.

Every non-hidden file under ``--pdb-dir`` was a structure input, so with ``--msa-dir`` there
(``data/`` with ``data/msas/``, or both ``data/``) each MSA, template-hit and other file of the MSA
stage was also a failed structure input (``not a structure file name``): such builds always
exited 1. Now a file the MSA stage reads whose name is an MSA file name (``.a3m``, ``.sto``,
``.hhr``, ``.m8``, optionally ``.gz``) and not a structure format is not a structure input (any
other file stays a failure: neither stage can use it); the build gives the same entries and MSAs as with separate directories, and a re-run over
a store that lists those failures withdraws them (``index/withdrawn.arrow``). A stray file under
``--pdb-dir`` outside ``--msa-dir`` is still a failure. Real builds (LocalCluster, 1 worker) over
real structures and MSAs of the corpus.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import featurecache
from featurecache.store.layout import ENTRY_GROUPS
from tests.clusters import scheduler_args
from tests.conftest import MSAS, REPO, STRUCTURES, CliRun, build_store, cli_in_process

CIFS = ("1psm.cif", "3zee.cif")
#: real MSA-stage inputs: OpenFold alignments (a3m, sto, sto.gz), template hits (hmm_output.sto,
#: an hhr), an empty a3m
MSA_FILES = {
    "1psm_A/bfd_uniclust_hits.a3m": MSAS / "openfold/1psm_A/bfd_uniclust_hits.a3m",
    "1psm_A/mgnify_hits.sto": MSAS / "openfold/1psm_A/mgnify_hits.sto",
    "1psm_A/hmm_output.sto": MSAS / "openfold/1psm_A/hmm_output.sto",
    "3zee_A/bfd_uniclust_hits.a3m": MSAS / "openfold/3zee_A/bfd_uniclust_hits.a3m",
    "3zee_A/uniref90_hits.sto.gz": MSAS / "openfold/3zee_A/uniref90_hits.sto.gz",
    "hits/2uvo_hhblits_emptytable.hhr": MSAS / "biopython/2uvo_hhblits_emptytable.hhr",
    "empty.a3m": MSAS / "ColabFold/empty.a3m",
}


def _put(structures: Path, msas: Path) -> None:
    structures.mkdir(parents=True, exist_ok=True)
    for name in CIFS:
        shutil.copy(STRUCTURES / name, structures / name)
    for rel, src in MSA_FILES.items():
        (msas / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, msas / rel)


def _layout(tmp: Path, layout: str) -> tuple[Path, Path]:
    """(--pdb-dir, --msa-dir) of ``layout``, files copied into ``tmp``."""
    data = tmp / "data"
    if layout == "same dir":
        _put(data, data)
        return data, data
    if layout == "msa dir inside":
        _put(data, data / "msas")
        return data, data / "msas"
    if layout == "msa dir inside, named through a symlink":
        _put(data, data / "msas")
        (tmp / "link").symlink_to(data / "msas", target_is_directory=True)
        return data, tmp / "link"
    if layout == "pdb dir inside":
        _put(data / "pdb", data)
        return data / "pdb", data
    raise AssertionError(layout)


@pytest.fixture(scope="module")
def separate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: the same files, structures and MSAs in two unrelated directories."""
    tmp = tmp_path_factory.mktemp("separate")
    _put(tmp / "pdb", tmp / "msas")
    store = tmp / "store"
    summary = build_store(store, tmp / "pdb", workers=1, msa_dir=tmp / "msas")
    assert summary.n_failed == 0 and summary.n_failed_earlier == 0
    return store


def _without_part(t: pa.Table) -> list[dict[str, Any]]:
    """The rows without their part names, NaN written "nan" (a missing resolution: NaN != NaN)."""
    rows = t.drop_columns([c for c in ("part",) if c in t.column_names]).to_pylist()
    return [{k: "nan" if isinstance(v, float) and np.isnan(v) else v for k, v in r.items()} for r in rows]


def _assert_same_store(store: Path, reference: Path) -> None:
    """The same index rows (part names aside) and the same entry arrays and MSAs as ``reference``."""
    got, ref = featurecache.open_store(store), featurecache.open_store(reference)
    assert sorted(ref.ids) == ["1psm", "3zee"]
    for name in ("entries", "chains", "interfaces", "msas"):
        assert _without_part(getattr(got, name)) == _without_part(getattr(ref, name)), name
    for eid in ref.ids:
        a, b = got.read_groups(eid, list(ENTRY_GROUPS)), ref.read_groups(eid, list(ENTRY_GROUPS))
        for group in ENTRY_GROUPS:
            assert a[group].tobytes() == b[group].tobytes(), (eid, group)
    keys = [k for k in ref.chains.column("msa_key").to_pylist() if k]
    assert keys  # the alignments were joined (not only single-sequence MSAs)
    for key in keys:
        m, r = got.msa(key), ref.msa(key)
        assert np.array_equal(m.residues, r.residues) and np.array_equal(m.deletions, r.deletions)


def _listed_failures(store: Path) -> list[tuple[str, str]]:
    return sorted((f["path"], f["stage"]) for f in featurecache.open_store(store).failures.to_pylist())


@pytest.mark.parametrize(
    "layout", ["same dir", "msa dir inside", "msa dir inside, named through a symlink", "pdb dir inside"]
)
def test_msa_files_are_not_structure_inputs(tmp_path: Path, separate: Path, layout: str) -> None:
    pdb_dir, msa_dir = _layout(tmp_path, layout)
    # every file under --pdb-dir, counted here: the structures and, but for "pdb dir inside", the MSA files
    files = sorted(p.relative_to(pdb_dir).as_posix() for p in pdb_dir.rglob("*") if p.is_file())
    n_msa_files = 0 if layout == "pdb dir inside" else len(MSA_FILES)
    assert len(files) == len(CIFS) + n_msa_files
    store = tmp_path / "store"
    summary = build_store(store, pdb_dir, workers=1, msa_dir=msa_dir)
    # before: n_inputs 9 and 7 failures 'not a structure file name', one per MSA file (exit 1)
    assert summary.n_inputs == len(CIFS) and summary.n_built == len(CIFS)
    assert summary.n_failed == 0 and summary.n_failed_earlier == 0, summary.failures
    assert _listed_failures(store) == []
    _assert_same_store(store, separate)


def _cli_build(pdb_dir: Path, store: Path, msa_dir: Path | None) -> CliRun:
    """``featurecache build`` on the session's 1-worker cluster: the same CLI, in this process
    (tests/conftest.py; a build on an external cluster leaves no thread or process running), which
    saves a Python process start each (the imports of the CLI, Dask and RDKit)."""
    args = ["build", "--pdb-dir", str(pdb_dir), "--out", str(store), *scheduler_args(1), "--no-progress"]
    if msa_dir is not None:
        args += ["--msa-dir", str(msa_dir)]
    return cli_in_process(*args, env={"COLUMNS": "2000"}, cwd=REPO)


def test_same_dir_build_exits_0_and_a_stray_file_still_fails(tmp_path: Path) -> None:
    pdb_dir, msa_dir = _layout(tmp_path, "msa dir inside")
    store = tmp_path / "store"
    r = _cli_build(pdb_dir, store, msa_dir)
    assert r.returncode == 0, r.stdout + r.stderr  # before: 1
    (pdb_dir / "notes.txt").write_text("not a structure\n")  # under --pdb-dir, outside --msa-dir
    r = _cli_build(pdb_dir, store, msa_dir)
    assert r.returncode == 1, r.stdout + r.stderr
    assert _listed_failures(store) == [("notes.txt", "read")]


def test_a_rerun_withdraws_the_failures_an_earlier_build_listed(tmp_path: Path, separate: Path) -> None:
    """A store whose index lists a structure failure per MSA file (as every build before this fix
    wrote them; here from a build without --msa-dir, which takes them as structure inputs): the
    re-run with --msa-dir withdraws them, says nothing still fails, and serves what a build with
    separate directories does. A later build without --msa-dir lists them again (latest outcome)."""
    pdb_dir, msa_dir = _layout(tmp_path, "msa dir inside")
    store = tmp_path / "store"
    first = build_store(store, pdb_dir, workers=1)
    expected = sorted(("msas/" + rel, "read") for rel in MSA_FILES)
    assert first.n_failed == len(MSA_FILES) and _listed_failures(store) == expected

    again = build_store(store, pdb_dir, workers=1, msa_dir=msa_dir)
    assert again.n_failed == 0 and again.n_failed_earlier == 0  # exit status 0
    assert _listed_failures(store) == []  # before: the 7 failures stayed listed
    withdrawn = featurecache.open_store(store).table("withdrawn").to_pylist()
    assert sorted(w["path"] for w in withdrawn) == [p for p, _ in expected]
    _assert_same_store(store, separate)
    parts = sorted(p.name for p in (store / "parts").iterdir())

    third = build_store(store, pdb_dir, workers=1, msa_dir=msa_dir)  # nothing to do, nothing written
    assert third.n_built == 0 and third.n_failed == third.n_failed_earlier == 0
    assert sorted(p.name for p in (store / "parts").iterdir()) == parts

    fourth = build_store(store, pdb_dir, workers=1)  # the MSA files are structure inputs again
    assert fourth.n_failed == len(MSA_FILES)
    assert _listed_failures(store) == expected
    assert not (store / "index" / "withdrawn.arrow").exists()


def _unusable_files(pdb_dir: Path) -> list[str]:
    """Files neither stage can use, put under ``pdb_dir`` (the reviewer's: a PDB assembly file
    ``.pdb1``, a bzip2-compressed mmCIF, an mmCIF named ``.txt``, a README); returns their names."""
    import bz2

    shutil.copy(STRUCTURES / "1A8O.pdb", pdb_dir / "1A8O.pdb1")
    (pdb_dir / "2q2k.cif.bz2").write_bytes(bz2.compress((STRUCTURES / "2q2k.cif").read_bytes()))
    shutil.copy(STRUCTURES / "1psm.cif", pdb_dir / "1psm.cif.txt")
    (pdb_dir / "README.txt").write_text("structures and their MSAs\n")
    return sorted(["1A8O.pdb1", "2q2k.cif.bz2", "1psm.cif.txt", "README.txt"])


def test_a_file_neither_stage_uses_still_fails_in_a_shared_dir(tmp_path: Path) -> None:
    """Only MSA file names (.a3m, .sto, .hhr, .m8, optionally .gz) under --msa-dir leave the
    structure inputs: a file that is neither a structure nor an MSA file name stays a failure, as
    with separate directories (before: silently dropped, the MSA stage counted it as an 'other
    file', exit 0)."""
    pdb_dir, msa_dir = _layout(tmp_path, "same dir")
    unusable = _unusable_files(pdb_dir)
    store = tmp_path / "store"
    r = _cli_build(pdb_dir, store, msa_dir)
    assert r.returncode == 1, r.stdout + r.stderr  # before: 0
    assert _listed_failures(store) == [(name, "read") for name in unusable]  # before: []
    for name in unusable:
        assert name in r.stdout + r.stderr
    assert sorted(featurecache.open_store(store).ids) == ["1psm", "3zee"]  # the MSA files are not inputs


def test_a_rerun_does_not_withdraw_failures_of_files_neither_stage_uses(tmp_path: Path) -> None:
    """An earlier build without --msa-dir listed a failure per non-structure file; the re-run with
    --msa-dir = --pdb-dir withdraws those of the MSA files only, the others stay listed (before:
    all were withdrawn, exit 0)."""
    pdb_dir, msa_dir = _layout(tmp_path, "same dir")
    unusable = _unusable_files(pdb_dir)
    store = tmp_path / "store"
    first = build_store(store, pdb_dir, workers=1)
    assert first.n_failed == len(MSA_FILES) + len(unusable)

    again = build_store(store, pdb_dir, workers=1, msa_dir=msa_dir)
    assert again.n_failed_earlier == len(unusable)  # still failing: exit status 1 (before: 0)
    assert _listed_failures(store) == [(name, "read") for name in unusable]  # before: []
    withdrawn = featurecache.open_store(store).table("withdrawn").to_pylist()
    assert sorted(w["path"] for w in withdrawn) == sorted(MSA_FILES)
