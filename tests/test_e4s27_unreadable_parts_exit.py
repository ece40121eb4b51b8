"""A store whose top, ``zarr.json`` and ``index/`` the user may read but not one of its parts
(external Dask workers, which write the parts, running with umask 077 while the driver, which
writes the index, does not), or not one of its index files: every command exits 3 with one line
naming what it may not read, the uid, the owner and mode and the fix, as for the store itself
(``featurecache.store.index.access_problem``, c2bdaa1's wording). Before, ``verify`` and ``prune``
died of a PermissionError traceback (exit 1, review RF2 s27 #3), an unreadable index file got the
advice to rebuild the index, which that uid cannot do (#5), and a directory above the store that
may not be searched was not named (#6). Real CLI runs as another uid (as root: uid 65534 through
setpriv), on real stores built here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, build_store
from tests.test_e3s27_unreadable_store_exit import AS_ROOT, RUN_UID, _cli, _may_read, _run

#: the mode that makes a file or directory unreadable to the uid the CLI runs as (root owns them)
CLOSED_DIR, CLOSED_FILE = (0o700, 0o600) if AS_ROOT else (0o000, 0o000)
OWNER = os.getuid()


@pytest.fixture(scope="module")
def built() -> Iterator[Path]:
    """A real store of the sample structures, 2 entries per part, readable by everyone."""
    if AS_ROOT and shutil.which("setpriv") is None:
        pytest.skip("no setpriv to run the CLI as another uid")
    top = Path(tempfile.mkdtemp(prefix="e4s27-built-", dir="/tmp"))
    try:
        build_store(top / "store", SAMPLES / "structures", workers=1, part_size=2)
        yield top / "store"
    finally:
        shutil.rmtree(top)


@pytest.fixture
def top(built: Path) -> Iterator[Path]:
    """A directory every user may search, holding a copy of ``built`` as ``store`` (0755/0644)."""
    top = Path(tempfile.mkdtemp(prefix="e4s27-", dir="/tmp"))
    try:
        top.chmod(0o755)
        shutil.copytree(built, top / "store")
        for p in [top / "store", *(top / "store").rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        assert _may_read(top / "store")
        yield top
    finally:
        for p in [top, *top.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(top)


def _one_line(res: subprocess.CompletedProcess[str]) -> str:
    """The refusal: exit 3, no traceback, one ``error:`` line (joined as the terminal wraps it)."""
    err = " ".join(res.stderr.split())
    assert res.returncode == 3, (res.returncode, res.stdout[-1000:], err[-3000:])
    assert "Traceback" not in err and "PermissionError" not in err, err[-3000:]
    assert err.count("error: ") == 1, err[-3000:]
    return err


def _names_uid_and_fix(err: str, path: Path, store: Path, mode: int) -> None:
    assert f"error: cannot read {path}: uid {RUN_UID} " in err, err
    assert f"may not read it (owner uid {OWNER}, mode {mode:04o})" in err, err
    assert f"chmod -R a+rX {store}" in err and f"run the command as uid {OWNER}" in err, err


def _first_part(store: Path) -> Path:
    parts = sorted(p for p in (store / "parts").iterdir() if p.name.startswith("s-"))
    assert len(parts) >= 2, parts  # the premise: the others stay readable
    return parts[0]


@pytest.mark.parametrize(
    "args",
    [["verify", "{s}"], ["prune", "{s}", "--dry-run"],
     ["prune", "{s}", "--sources-gone", str(SAMPLES / "structures"), "--dry-run"]],
    ids=["verify", "prune", "prune-sources-gone"],
)  # fmt: skip
def test_an_unreadable_part_exits_3_naming_it(top: Path, args: list[str]) -> None:
    store = top / "store"
    part = _first_part(store)
    part.chmod(CLOSED_DIR)
    err = _one_line(_cli(*(a.format(s=store) for a in args)))
    _names_uid_and_fix(err, part, store, CLOSED_DIR)


@pytest.mark.parametrize("command", ["verify", "prune"])
def test_an_unreadable_part_index_dir_exits_3_naming_it(top: Path, command: str) -> None:
    """The part may be listed, its ``_index/`` not (``Path.glob`` found no file there: a part of
    no rows, not an error)."""
    store = top / "store"
    idx = _first_part(store) / "_index"
    idx.chmod(CLOSED_DIR)
    err = _one_line(_cli(command, str(store), *(["--dry-run"] if command == "prune" else [])))
    _names_uid_and_fix(err, idx, store, CLOSED_DIR)


@pytest.mark.parametrize("command", ["info", "verify", "show"])
def test_an_unreadable_index_file_gets_the_permission_fix(top: Path, command: str) -> None:
    store = top / "store"
    for f in (store / "index").glob("*.arrow"):
        f.chmod(CLOSED_FILE)
    err = _one_line(_cli(command, str(store), *(["1psm"] if command == "show" else [])))
    assert "rebuilds the index" not in err, err  # that uid cannot rebuild the owner's store
    assert f"error: cannot read {store / 'index'}/" in err and ".arrow: uid" in err, err
    assert f"may not read it (owner uid {OWNER}, mode {CLOSED_FILE:04o})" in err, err
    assert f"chmod -R a+rX {store}" in err, err


@pytest.mark.parametrize("via", ["path", "symlink"])
def test_a_directory_above_the_store_that_cannot_be_searched_is_named(top: Path, via: str) -> None:
    hid = top / "hid"
    hid.mkdir()
    (top / "store").rename(hid / "s")
    hid.chmod(CLOSED_DIR)
    arg = hid / "s"
    if via == "symlink":
        arg = top / "link"
        arg.symlink_to(hid / "s")
    err = _one_line(_cli("info", str(arg)))
    assert (
        f"error: cannot read {arg}: the directory {hid} on its path is not searchable by uid {RUN_UID} "
        in err
    )
    assert f"(owner uid {OWNER}, mode {CLOSED_DIR:04o})" in err and f"chmod a+x {hid}" in err, err


def test_open_store_with_an_index_dir_it_may_not_search_names_it(top: Path) -> None:
    """From Python (no CLI check first): ``featurecache.open_store`` raises a StoreError naming
    ``index/``, the uid and the fix (a PermissionError came out of ``Path.is_file`` before)."""
    store = top / "store"
    (store / "index").chmod(0o700 if AS_ROOT else 0o000)
    code = (
        "import featurecache, sys\n"
        "from featurecache.errors import StoreError\n"
        f"try:\n    featurecache.open_store({str(store)!r})\n"
        "except StoreError as exc:\n    print('StoreError:', exc)\n"
    )
    res = _run(sys.executable, "-c", code)
    assert res.returncode == 0, res.stderr[-3000:]
    out = " ".join(res.stdout.split())
    assert f"StoreError: cannot read {store / 'index'}: uid {RUN_UID} " in out, out
    assert f"chmod -R a+rX {store}" in out, out


@pytest.mark.parametrize("repair", [False, True], ids=["verify", "verify-repair"])
def test_unreadable_array_files_in_a_readable_part_are_not_damage(top: Path, repair: bool) -> None:
    """The part and its ``_index/`` readable, its arrays' shard files not (E4 s27's left-alone
    case): ``verify`` said "MISMATCH … unreadable (… PermissionError …)", exit 4, and advised
    ``--repair``, which took the entries out of the index. Now the same one line as for a part."""
    store = top / "store"
    part = _first_part(store)
    shards = [f for f in part.rglob("*") if f.is_file() and "_index" not in f.parts and f.name != "zarr.json"]
    assert shards, part
    for f in shards:
        f.chmod(CLOSED_FILE)
    if repair:  # the uid may write the store (its lock, its index): only the part's arrays are closed
        for p in [store, *store.rglob("*")]:
            if p.is_dir() and p != part:
                p.chmod(0o777)
            elif p.is_file() and p not in shards:
                p.chmod(0o666)
    index_before = {f.name: f.read_bytes() for f in (store / "index").glob("*.arrow")}
    err = _one_line(_cli("verify", str(store), *(["--repair"] if repair else [])))
    assert "MISMATCH" not in err and "--repair" not in err, err
    assert f"error: cannot read {part}/" in err and f"uid {RUN_UID} " in err, err
    assert f"chmod -R a+rX {store}" in err, err
    assert {
        f.name: f.read_bytes() for f in (store / "index").glob("*.arrow")
    } == index_before  # nothing removed
