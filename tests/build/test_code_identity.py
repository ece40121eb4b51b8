"""The code identity the build compares between the driver and its workers
(:func:`featurecache.source_digest`): any edit to the package's source changes it, where the
versions (``featurecache.__version__``, the featurizer version) stay the same."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import featurecache
from featurecache.build.discover import discover
from featurecache.build.tasks import PACKAGE_PATH, build_structure_part, worker_versions
from featurecache.errors import StoreError
from featurecache.store.root import init_store
from tests.conftest import REPO, SAMPLES


def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "featurecache"
    shutil.copytree(REPO / "featurecache", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _installed_files(root: Path) -> list[str]:
    """What an install of the package carries, from pyproject.toml itself: every ``*.py`` (setuptools
    packages) and the ``[tool.setuptools.package-data]`` globs of each subpackage."""
    import tomllib

    with (REPO / "pyproject.toml").open("rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]
    files = {p for p in root.glob("**/*.py") if p.is_file()}
    for package, globs in package_data.items():
        base = root.joinpath(*package.split(".")[1:])
        for pattern in globs:
            files |= {p for p in base.glob(pattern) if p.is_file()}
    return sorted(str(p.relative_to(root)).replace("\\", "/") for p in files)


def test_digest_is_over_every_installed_file(tmp_path: Path) -> None:
    """Reference: sha256 over the sorted relative paths and bytes of every file an install carries
    (pyproject's packages and package-data; __pycache__ is left out of the copy), framed as
    documented, computed here from a listing of our own."""
    root = _copy(tmp_path)
    files = _installed_files(root)
    assert "build/tasks.py" in files and len(files) > 50
    assert "chem/data/standard_components.cif" in files and "model/KERNEL_NOTES.md" not in files
    h = hashlib.sha256()
    for rel in files:
        data = (root / rel).read_bytes()
        h.update(f"{len(rel)}:{rel}:{len(data)}:".encode() + data)
    assert featurecache.digest_sources(root) == h.hexdigest()[:16]
    # the copy holds the same code as the package this process runs
    assert featurecache.digest_sources(root) == featurecache.source_digest()


def test_files_an_install_does_not_carry_do_not_count(tmp_path: Path) -> None:
    """A wheel-installed worker and a checkout driver at one commit must agree: the checkout's notes
    (model/KERNEL_NOTES.md, not package-data) and stray files are not installed, so they are not
    hashed (before: every file was, and such a worker was refused)."""
    root = _copy(tmp_path)
    before = featurecache.digest_sources(root)
    (root / "model" / "KERNEL_NOTES.md").unlink()
    (root / "build" / "run.py.orig").write_text("stray\n")
    assert featurecache.digest_sources(root) == before


@pytest.mark.parametrize("edit", ["comment", "function", "new module", "renamed module"])
def test_any_code_edit_changes_the_digest(tmp_path: Path, edit: str) -> None:
    root = _copy(tmp_path)
    before = featurecache.digest_sources(root)
    entry = root / "featurize" / "entry.py"
    if edit == "comment":
        entry.write_text(entry.read_text() + "# edited\n")
    elif edit == "function":
        text = (root / "build" / "discover.py").read_text()
        assert "def entry_key(" in text
        (root / "build" / "discover.py").write_text(text.replace("def entry_key(", "def entry_key_(", 1))
    elif edit == "new module":
        (root / "build" / "extra.py").write_text("X = 1\n")
    else:
        (root / "build" / "summary.py").rename(root / "build" / "summary2.py")
    after = featurecache.digest_sources(root)
    assert after != before
    # byte code is not: a new file in a __pycache__ directory leaves it unchanged
    (root / "build" / "__pycache__").mkdir(exist_ok=True)
    (root / "build" / "__pycache__" / "extra.cpython-311.pyc").write_bytes(b"\x00" * 16)
    assert featurecache.digest_sources(root) == after


@pytest.mark.parametrize("edit", ["one atom of ALA", "new data file"])
def test_a_package_data_edit_changes_the_digest(tmp_path: Path, edit: str) -> None:
    """The package's data is read by the featurizer (chem/data/standard_components.cif: the
    tokenizer's and the chem library's standard residues): a worker whose copy differs writes other
    features under the same keys, so it must not report the same code (before: only *.py hashed)."""
    root = _copy(tmp_path)
    before = featurecache.digest_sources(root)
    data = root / "chem" / "data"
    if edit == "one atom of ALA":
        cif = data / "standard_components.cif"
        text = cif.read_text()
        line = next(ln for ln in text.splitlines() if ln.startswith("ALA CB "))  # ALA's CB atom row
        cif.write_text(text.replace(line, line.replace(" C ", " N ", 1), 1))
        assert cif.read_text() != text
    else:
        (data / "extra_components.cif").write_text("data_XYZ\n")
    assert featurecache.digest_sources(root) != before


def test_a_part_task_refuses_a_worker_whose_source_differs(tmp_path: Path) -> None:
    """Same versions, other code (another digest from the driver): the part task refuses before it
    writes, naming the source difference and both package directories."""
    out = tmp_path / "store"
    init_store(out, {"config_hash": "t", "entry_config_hash": "t", "config": {}})
    driver = dict(
        worker_versions(), **{"featurecache source": "0" * 16, PACKAGE_PATH: "/elsewhere/featurecache"}
    )
    inputs = [i for i in discover(SAMPLES / "structures", "t", {}) if i.entry_id == "102m"]
    with pytest.raises(StoreError, match="featurecache source") as err:
        build_structure_part(str(out), "s-000000", inputs, "t", versions=driver)
    msg = str(err.value)
    assert f"at {featurecache.package_dir()} differs from the driver's at /elsewhere/featurecache" in msg
    assert [p.name for p in (out / "parts").iterdir()] == ["zarr.json"]
    # the same directory, other code: the files changed after one of them loaded them
    stale = dict(worker_versions(), **{"featurecache source": "0" * 16})
    with pytest.raises(
        StoreError, match=r"the driver.s directory too: the featurecache source files at .* changed"
    ):
        build_structure_part(str(out), "s-000000", inputs, "t", versions=stale)
    assert [p.name for p in (out / "parts").iterdir()] == ["zarr.json"]
    # a driver in another directory with the same code is accepted: the path is not compared
    same = dict(worker_versions(), **{PACKAGE_PATH: "/elsewhere/featurecache"})
    assert build_structure_part(str(out), "s-000000", inputs, "t", versions=same).n_entries == 1


def test_the_driver_reads_its_files_again_at_each_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """source_digest() is computed once per process (a worker keeps the identity of the code it
    loaded) unless refreshed, as the build driver does at each build's start."""
    root = _copy(tmp_path)
    monkeypatch.setattr(featurecache, "package_dir", lambda: root)
    first = featurecache.source_digest(refresh=True)
    assert first == featurecache.digest_sources(root)
    (root / "const.py").write_text((root / "const.py").read_text() + "# edited\n")
    assert featurecache.source_digest() == first  # cached
    assert featurecache.source_digest(refresh=True) == featurecache.digest_sources(root) != first
    monkeypatch.undo()
    assert featurecache.source_digest(refresh=True) == featurecache.digest_sources(featurecache.package_dir())


#: an Emacs lock file: a symlink whose target names the user, host and pid (it never exists)
EMACS_LOCK = "root@host.12345:1700000000"


def _cli_build_with(package_parent: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``featurecache build`` of the real 102m.cif run by the package copy under ``package_parent``
    (the driver and its LocalCluster worker import it: PYTHONPATH)."""
    pdb = package_parent / "pdb"
    pdb.mkdir(exist_ok=True)
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    env = {**os.environ, "PYTHONPATH": str(package_parent), "COLUMNS": "2000"}
    args = ["build", "--pdb-dir", str(pdb), "--out", str(out), "--workers", "1", "--no-progress"]
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=package_parent, env=env, timeout=300)  # fmt: skip


def test_hidden_and_dangling_py_files_are_not_hashed(tmp_path: Path) -> None:
    """An editor's lock symlink ``.#run.py`` (dangling), a dangling ``gone.py`` and a file in a
    hidden directory leave the digest as it was (before: FileNotFoundError from the dangling links,
    so every build failed, exit 1); a symlink to a real file is hashed as that file."""
    root = _copy(tmp_path)
    before = featurecache.digest_sources(root)
    (root / "build" / ".#run.py").symlink_to(EMACS_LOCK)
    (root / "build" / "gone.py").symlink_to(root / "build" / "no_such_file.py")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.py").write_text("X = 1\n")
    (root / "build" / ".notes.py").write_text("Y = 2\n")
    assert featurecache.digest_sources(root) == before
    (root / "build" / "linked.py").symlink_to(root / "const.py")
    assert featurecache.digest_sources(root) != before  # a new module (through a link) is code


def test_an_unreadable_source_file_is_a_store_error(tmp_path: Path) -> None:
    """A listed file that cannot be read: a StoreError naming it (before: a bare OSError).
    /proc/self/mem is a regular file whose reading at offset 0 fails (EIO), even for root."""
    mem = Path("/proc/self/mem")
    if not mem.is_file():
        pytest.skip("needs Linux /proc/self/mem")
    with pytest.raises(OSError) as check:
        mem.read_bytes()
    assert not isinstance(check.value, StoreError)
    root = _copy(tmp_path)
    (root / "build" / "mem.py").symlink_to(mem)
    with pytest.raises(StoreError, match=r"cannot read the featurecache source file .*build/mem\.py: "):
        featurecache.digest_sources(root)


def test_a_build_runs_by_a_lock_symlink_and_refuses_an_unreadable_file(tmp_path: Path) -> None:
    """The CLI, run by a copy of the package: with a dangling ``.#run.py`` the build succeeds
    (before: FileNotFoundError traceback, exit 1); with an unreadable source file it exits 3 with
    one line naming the file, no traceback."""
    root = _copy(tmp_path)
    (root / "build" / ".#run.py").symlink_to(EMACS_LOCK)
    r = _cli_build_with(tmp_path, tmp_path / "store")
    assert r.returncode == 0, r.stdout + r.stderr
    assert featurecache.open_store(tmp_path / "store").ids == ["102m"]
    if Path("/proc/self/mem").is_file():
        (root / "build" / "mem.py").symlink_to("/proc/self/mem")
        r = _cli_build_with(tmp_path, tmp_path / "store2")
        assert r.returncode == 3, r.stdout + r.stderr
        assert "Traceback" not in r.stderr
        lines = [ln for ln in r.stderr.splitlines() if "cannot read the featurecache source file" in ln]
        assert len(lines) == 1 and str(root / "build" / "mem.py") in lines[0], r.stderr
