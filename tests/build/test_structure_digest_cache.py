"""The structure digest cache (STORE/cache/structure_digests.arrow): a no-op build opens no structure
file, a changed file is read and rebuilt (also when its size and mtime are put back: its ctime
changed), and a cache that is corrupt, of another format, stale or of another --pdb-dir never makes
a build wrong.

Real builds on a real Dask LocalCluster. Which files are opened is seen by the kernel, not mocked:
an inotify watch (IN_OPEN) on every structure file, which reports an open by any process (the
build's driver, which lists --pdb-dir, and its Dask workers, which read the inputs they build).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest

import featurecache
from featurecache.build.digest_cache import DIGEST_CACHE_VERSION, RACY_NS, SCHEMA, cache_path
from featurecache.store.index import read_table, replace_table
from tests.conftest import SAMPLES, build_store

FILES = ("102m.cif", "1psm.cif", "2q2k.cif")
IN_OPEN = 0x20
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)


@contextmanager
def opened_files(paths: list[Path]) -> Iterator[set[str]]:
    """The names of ``paths`` that any process opened inside the block (filled when it ends)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    names: set[str] = set()
    try:
        watches = {}
        for p in paths:
            wd = libc.inotify_add_watch(fd, os.fsencode(p), IN_OPEN)
            assert wd >= 0, os.strerror(ctypes.get_errno())
            watches[wd] = p.name
        yield names
        buf = b""
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            buf += chunk
        at = 0
        while at < len(buf):
            wd, mask, _cookie, n = _EVENT.unpack_from(buf, at)
            at += _EVENT.size + n
            if mask & IN_OPEN:
                names.add(watches[wd])
    finally:
        os.close(fd)


def _settle() -> None:
    """Wait until files written just now are older than the cache's racy window."""
    time.sleep(RACY_NS / 1e9 + 0.2)


def _copy_inputs(d: Path) -> Path:
    d.mkdir()
    for f in FILES:
        shutil.copy(SAMPLES / "structures" / f, d / f)
    return d


#: the input directories the module's tests take (test_digests_of_another_pdb_dir_are_not_taken two)
N_INPUT_DIRS = 6


@pytest.fixture(scope="module")
def settled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Fresh input directories (copies of FILES), one for each :func:`_inputs` of the module's tests,
    written first and settled together: the racy window waited out once for all of them instead of
    once per directory (2.2 s each). More, each settled on its own, if a run asks for more."""
    root = tmp_path_factory.mktemp("inputs")
    ready = [_copy_inputs(root / f"in{i}") for i in range(N_INPUT_DIRS)]
    _settle()

    def dirs() -> Iterator[Path]:
        yield from ready
        n = N_INPUT_DIRS
        while True:
            d = _copy_inputs(root / f"in{n}")
            _settle()
            yield d
            n += 1

    return dirs()


def _inputs(settled: Iterator[Path]) -> Path:
    """A fresh input directory of FILES, no other test's, whose files are older than the racy window."""
    return next(settled)


def _files(d: Path) -> list[Path]:
    return sorted(d.iterdir())


def _stored_sha(store: Path) -> dict[str, str]:
    return {r["id"]: r["source_sha256"] for r in featurecache.open_store(store).entries.to_pylist()}


def _cache_rows(store: Path) -> dict[tuple[str, str], dict[str, object]]:
    return {(r["dir"], r["rel"]): r for r in read_table(cache_path(store), memory_map=False).to_pylist()}


def _same_size_edit(p: Path) -> bytes:
    """Other bytes of the same length (one letter of the title), the mtime put back; returns them."""
    st = p.stat()
    data = p.read_bytes()
    k = data.index(b"_struct.title")
    at = data.index(b"O", k)  # MYOGLOBIN -> MYQGLOBIN
    new = data[:at] + b"Q" + data[at + 1 :]
    assert len(new) == len(data) and new != data
    p.write_bytes(new)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (p.stat().st_size, p.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    return new


def test_noop_build_opens_no_structure_file_and_a_changed_one_is_read(
    tmp_path: Path, settled: Iterator[Path]
) -> None:
    inputs, store = _inputs(settled), tmp_path / "store"
    first = build_store(store, inputs, workers=1)
    assert (first.n_built, first.n_failed) == (3, 0)

    # (a) a no-op build: nothing built, and no process opened any structure file
    with opened_files(_files(inputs)) as opened:
        again = build_store(store, inputs, workers=1)
    assert (again.n_built, again.n_skipped, again.n_failed) == (0, 3, 0)
    assert opened == set()
    rows = _cache_rows(store)
    here = str(inputs.resolve())
    assert sorted(rows) == [(here, f) for f in FILES]
    for f in FILES:
        p, row = inputs / f, rows[(here, f)]
        st = p.stat()
        assert row["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
        assert (row["size"], row["mtime_ns"], row["ctime_ns"], row["inode"]) == (
            st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
        )  # fmt: skip
    cache_stamp = cache_path(store).stat().st_mtime_ns
    assert build_store(store, inputs, workers=1).n_built == 0
    assert cache_path(store).stat().st_mtime_ns == cache_stamp  # nothing changed: not rewritten

    # other bytes with the size and mtime put back (what the MSA scan cache misses): the ctime
    # changed, so 102m.cif is read and rebuilt, and only it
    new = _same_size_edit(inputs / "102m.cif")
    _settle()  # so that this build keeps its new digest
    with opened_files(_files(inputs)) as opened:
        edited = build_store(store, inputs, workers=1)
    assert opened == {"102m.cif"}
    assert (edited.n_built, edited.n_skipped) == (1, 2)
    assert _stored_sha(store)["102m"] == hashlib.sha256(new).hexdigest()

    # (b) a file rewritten (another size, a new mtime) is read and rebuilt, the others are not read
    p = inputs / "2q2k.cif"
    p.write_bytes(p.read_bytes() + b"#\n")
    with opened_files(_files(inputs)) as opened:
        rewritten = build_store(store, inputs, workers=1)
    assert opened == {"2q2k.cif"}
    assert (rewritten.n_built, rewritten.n_skipped) == (1, 2)
    assert _stored_sha(store)["2q2k"] == hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_file_changed_just_before_the_listing_keeps_no_digest(
    tmp_path: Path, settled: Iterator[Path]
) -> None:
    """Within the racy window a second write in the same timestamp tick could keep the stat: such a
    file is read again by the next build."""
    inputs, store = _inputs(settled), tmp_path / "store"
    assert build_store(store, inputs, workers=1).n_built == 3
    p = inputs / "1psm.cif"
    p.write_bytes(p.read_bytes() + b"#\n")
    assert build_store(store, inputs, workers=1).n_built == 1  # right after the write
    assert (str(inputs.resolve()), "1psm.cif") not in _cache_rows(store)
    with opened_files(_files(inputs)) as opened:
        assert build_store(store, inputs, workers=1).n_built == 0
    assert opened == {"1psm.cif"}


def test_a_corrupt_or_older_cache_is_ignored_and_written_again(
    tmp_path: Path, settled: Iterator[Path], caplog: pytest.LogCaptureFixture
) -> None:
    """(c) for each damage (one store, in turn): every file is read (the keys are right: nothing
    is rebuilt) and the cache is written again; the build after the last opens no file."""
    inputs, store = _inputs(settled), tmp_path / "store"
    assert build_store(store, inputs, workers=1).n_built == 3
    f = cache_path(store)
    caplog.set_level(logging.INFO, logger="featurecache.build.digest_cache")
    for damage in ("garbage", "cut", "older-format", "missing-column"):
        good = f.read_bytes()
        table = read_table(f, memory_map=False)
        if damage == "garbage":
            f.write_bytes(b"not an arrow file\n" * 10)
        elif damage == "cut":
            f.write_bytes(good[: len(good) // 2])
        elif damage == "older-format":
            replace_table(f, table.replace_schema_metadata({"version": "0"}))
        else:
            replace_table(f, table.drop_columns(["inode"]))
        caplog.clear()
        with opened_files(_files(inputs)) as opened:
            again = build_store(store, inputs, workers=1)
        assert (again.n_built, again.n_skipped, again.n_failed) == (0, 3, 0), damage
        assert opened == set(FILES), damage
        said = (
            "ignoring the structure digest cache"
            if damage != "older-format"
            else f"not {DIGEST_CACHE_VERSION!r}"
        )
        assert said in caplog.text, damage
        rewritten = read_table(f, memory_map=False)
        assert rewritten.schema.metadata == SCHEMA.metadata and rewritten.equals(table), damage
    with opened_files(_files(inputs)) as opened:
        assert build_store(store, inputs, workers=1).n_built == 0
    assert opened == set()


def test_a_stale_digest_costs_one_rebuild(tmp_path: Path, settled: Iterator[Path]) -> None:
    """A row whose stat matches but whose digest is wrong (the cache's blind spot, forged here): the
    part task hashes the bytes it reads, so the entry is stored as the file is; the row is dropped,
    so the next build reads the file once more and builds nothing, and the one after reads nothing."""
    inputs, store = _inputs(settled), tmp_path / "store"
    assert build_store(store, inputs, workers=1).n_built == 3
    stored = _stored_sha(store)
    table = read_table(cache_path(store), memory_map=False)
    sha = table.column("sha256").to_pylist()
    rels = table.column("rel").to_pylist()
    sha[rels.index("102m.cif")] = "0" * 64
    replace_table(cache_path(store), table.set_column(6, "sha256", pa.array(sha)))
    with opened_files(_files(inputs)) as opened:
        stale = build_store(store, inputs, workers=1)
    assert opened == {"102m.cif"}  # by the part task only
    assert (stale.n_built, stale.n_failed) == (1, 0)
    assert _stored_sha(store) == stored
    assert (str(inputs.resolve()), "102m.cif") not in _cache_rows(store)
    with opened_files(_files(inputs)) as opened:
        assert build_store(store, inputs, workers=1).n_built == 0
    assert opened == {"102m.cif"}
    with opened_files(_files(inputs)) as opened:
        assert build_store(store, inputs, workers=1).n_built == 0
    assert opened == set()


def test_digests_of_another_pdb_dir_are_not_taken(tmp_path: Path, settled: Iterator[Path]) -> None:
    """The same names under another --pdb-dir are read (their rows are kept apart); a symlink to the
    first directory resolves to it and takes its digests."""
    a, store = _inputs(settled), tmp_path / "store"
    assert build_store(store, a, workers=1).n_built == 3
    b = _inputs(settled)
    with opened_files(_files(b)) as opened:
        build_store(store, b, workers=1)
    assert opened == set(FILES)
    dirs = {d for d, _rel in _cache_rows(store)}
    assert dirs == {str(a.resolve()), str(b.resolve())}
    link = tmp_path / "link"
    link.symlink_to(a)
    with opened_files(_files(a)) as opened:
        build_store(store, link, workers=1)
    assert opened == set()
