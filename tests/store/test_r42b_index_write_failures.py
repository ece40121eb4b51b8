"""A prune or ``verify --repair`` whose index write fails, or that is killed while it writes the
index (review R42b s52 #4, #5, #6):

* #4: the rebuild writes ``index/.published.json`` before the index files; when an index write then
  failed, the failed prune put the index files back but not the record (nor ``index/.part-rows/``),
  so the parts it had meant to remove were held back and no later prune removed them until a build
  ran. A failed prune (and a failed ``prune --sources-gone``: ``write_removals``) now leaves every
  file of ``index/`` as it was, hidden ones included.
* #5: a failed write of the record or of the kept rows' manifest left its temp file (the record's
  as ``..published.json.<pid>.tmp``), and a process killed during any index write left
  ``index/.<table>.arrow.<pid>.tmp``: nothing removed them. A failed write now removes its temp
  file, and the next prune or build removes those of killed writers; a temp file of
  ``featurecache plan`` (which takes no build lock) only once it is old.
* #6: a refused write of ``index/.part-rows/`` named ``STORE/index``; it names the file.

Real stores built from the samples; real failures: the LD_PRELOAD shim of tests/faults.py
(compiled with gcc) makes the write of one file fail with ENOSPC (or kills the process there with
SIGKILL) in a real CLI run, and a real full tmpfs (mounted when the test runs as root)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import featurecache
from featurecache.errors import StoreError
from featurecache.store.prune import prune_store
from featurecache.store.verify import verify_store
from tests.conftest import SAMPLES, build_store, cli_in_process
from tests.faults import compiled_shim, fault_env, mounted_tmpfs


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compiled_shim(tmp_path_factory, missing="skip")


def _cli_with_fault(
    shim: Path, prefix: Path, *args: str, kill: bool = False
) -> subprocess.CompletedProcess[str]:
    """``featurecache ARGS`` in a process of its own whose writes to files under ``prefix`` (a
    path prefix) fail with ENOSPC, or (``kill``) that is SIGKILLed at the first of them."""
    env = fault_env(shim, prefix, calls="write", errno=errno.ENOSPC, kill=kill, limit=None)
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)  # fmt: skip


def _index_snapshot(store: Path) -> dict[str, bytes]:
    """Every file under ``STORE/index/`` (hidden ones and ``.part-rows/`` included), by path."""
    index = store / "index"
    return {str(f.relative_to(index)): f.read_bytes() for f in sorted(index.rglob("*")) if f.is_file()}


def _temp_files(store: Path) -> list[str]:
    return sorted(str(f.relative_to(store)) for f in (store / "index").rglob("*.tmp"))


def _parts(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "parts").iterdir() if p.is_dir())


def test_a_prune_whose_index_write_fails_leaves_the_published_record(
    replaced_store: Path, tmp_path: Path, shim: Path
) -> None:
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    assert prune_store(store, dry_run=True).parts == ["s-000000"]
    before, parts = _index_snapshot(store), _parts(store)
    assert ".published.json" in before and ".part-rows/manifest.json" in before

    # the record is rewritten (s-000000 left out), then the write of index/entries.arrow fails
    failed = _cli_with_fault(shim, store / "index" / ".entries", "prune", str(store))
    assert failed.returncode == 3, failed.stderr
    assert (f"error: cannot write the store at {store / 'index' / 'entries.arrow'}: No space left on device; "
            "nothing removed") in failed.stderr, failed.stderr  # fmt: skip
    assert _index_snapshot(store) == before  # .published.json and .part-rows/ too
    assert _parts(store) == parts and not list(store.glob(".index-saved-*")) and not _temp_files(store)

    # the prune after it removes what the failed one meant to (it removed nothing until a build ran)
    assert prune_store(store, dry_run=True).parts == ["s-000000"]
    assert prune_store(store).parts == ["s-000000"]
    assert verify_store(store) == [] and featurecache.open_store(store).ids == ["102m", "1psm"]


def test_a_failed_write_of_the_kept_rows_names_its_file_and_leaves_no_temp_file(
    replaced_store: Path, tmp_path: Path, shim: Path
) -> None:
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    before = _index_snapshot(store)
    manifest = store / "index" / ".part-rows" / "manifest.json"
    failed = _cli_with_fault(shim, manifest.with_name(".manifest"), "prune", str(store))
    assert failed.returncode == 3, failed.stderr
    assert (
        f"error: cannot write the store at {manifest}: No space left on device; nothing removed"
        in failed.stderr
    ), failed.stderr
    assert _temp_files(store) == []  # was .part-rows/.manifest.json.<pid>.tmp
    assert _index_snapshot(store) == before  # the manifest that was unlinked first is back
    assert prune_store(store).parts == ["s-000000"]


def test_a_failed_sources_gone_prune_leaves_the_index_as_it_was(tmp_path: Path, shim: Path) -> None:
    """``write_removals``: its removal part is written and the index files too, then a kept rows
    file fails (after their manifest was unlinked); the index files were put back, the kept rows
    and their manifest were not."""
    pdb, store = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    assert build_store(store, pdb, workers=1, part_size=1).n_failed == 0
    (pdb / "2q2k.cif").unlink()
    before, parts = _index_snapshot(store), _parts(store)
    kept = store / "index" / ".part-rows" / "entries.arrow"
    failed = _cli_with_fault(
        shim, kept.with_name(".entries"), "prune", str(store), "--sources-gone", str(pdb)
    )
    assert failed.returncode == 3, failed.stderr
    assert f"cannot write the store at {kept}: No space left on device; nothing removed" in failed.stderr, (
        failed.stderr
    )
    assert _index_snapshot(store) == before and _parts(store) == parts and _temp_files(store) == []
    done = cli_in_process("prune", str(store), "--sources-gone", str(pdb))
    assert done.returncode == 0, done.stderr
    assert featurecache.open_store(store).ids == ["1psm"] and verify_store(store) == []


@pytest.mark.parametrize(
    ("written", "cleaner"),
    [("index/.entries", "prune"), ("index/.published", "prune"), ("index/.part-rows/.entries", "prune"),
     ("index/.entries", "build")],
)  # fmt: skip
def test_the_temp_files_of_a_killed_index_write_are_removed_by_the_next_prune_or_build(
    replaced_store: Path, tmp_path: Path, shim: Path, written: str, cleaner: str
) -> None:
    """A prune SIGKILLed while it writes an index file (``index/.entries.arrow.<pid>.tmp``, after
    every other table's), the published record, or a kept rows file (``forget_parts``)."""
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    killed = _cli_with_fault(shim, store / written, "prune", str(store), kill=True)
    assert killed.returncode == -9, killed.stderr
    left = _temp_files(store)
    assert any(n.startswith(written) for n in left), left  # (the record's: one dot, not two)
    info = cli_in_process("info", str(store))
    assert info.returncode == 0 and "temp file(s) of an interrupted write of the index" in info.stderr, (
        info.stderr
    )
    assert featurecache.open_store(store).ids == ["102m", "1psm"]  # readers never look at them

    if cleaner == "prune":
        assert "s-000000" in prune_store(store).parts
    else:
        inputs = replaced_store.parent / "in"
        build_store(store, inputs, workers=1, part_size=1, msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd")
    assert _temp_files(store) == [] and verify_store(store) == []


@pytest.fixture(scope="module")
def pair_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1psm and 2q2k built one part each (no MSAs)."""
    tmp = tmp_path_factory.mktemp("pair")
    pdb = tmp / "pdb"
    pdb.mkdir()
    for name in ("1psm.cif", "2q2k.cif"):
        shutil.copy(SAMPLES / "structures" / name, pdb)
    assert build_store(tmp / "store", pdb, workers=1, part_size=1).n_failed == 0
    return tmp / "store"


def test_a_plan_writing_its_file_is_left_alone(pair_store: Path, tmp_path: Path, shim: Path) -> None:
    """``featurecache plan`` takes no build lock: a prune while it writes ``index/plan.arrow`` must
    not take its temp file away; one that has not changed for an hour is a dead writer's."""
    store = Path(shutil.copytree(pair_store, tmp_path / "store"))
    killed = _cli_with_fault(shim, store / "index" / ".plan", "plan", str(store), kill=True)
    assert killed.returncode == -9, killed.stderr
    [temp] = _temp_files(store)
    assert temp.startswith("index/.plan.arrow.")
    prune_store(store)
    assert _temp_files(store) == [temp]  # as a live planner's would be
    old = time.time() - 2 * 3600
    os.utime(store / temp, (old, old))
    prune_store(store)
    assert _temp_files(store) == []


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 32 MB mounted for the test (root only)."""
    with mounted_tmpfs(tmp_path / "small", "32M") as mnt:
        yield mnt


def test_a_prune_on_a_full_disk_changes_nothing_and_leaves_nothing(
    replaced_store: Path, small_fs: Path
) -> None:
    store = Path(shutil.copytree(replaced_store, small_fs / "store"))
    before, parts = _index_snapshot(store), _parts(store)
    st = os.statvfs(small_fs)
    (small_fs / "filler").write_bytes(b"\0" * (st.f_bavail * st.f_frsize))  # not a byte left
    for _ in range(2):
        with pytest.raises(StoreError, match="No space left on device; nothing removed"):
            prune_store(store)
        assert _index_snapshot(store) == before and _parts(store) == parts
        assert _temp_files(store) == [] and not list(store.glob(".index-saved-*"))
    (small_fs / "filler").unlink()
    assert prune_store(store).parts == ["s-000000"]
    assert _temp_files(store) == [] and verify_store(store) == []
