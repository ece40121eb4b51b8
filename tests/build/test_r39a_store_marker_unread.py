"""Review R39a s50 #1: the "another featurecache store inside the inputs" check (review R38a s50 #8)
opened every entry named ``zarr.json`` it met: a FIFO of that name hung the build and ``prune
--sources-gone`` forever (``open()`` waits for a writer), and a symlink to ``/dev/zero`` read until
memory ran out. The check reads a ``zarr.json`` only when it is a small regular file (not a link,
not a FIFO, socket or device; opened without blocking); anything else is no store, and stays what
it was before that check: an input that is never opened, a failure row naming what it is.

Each such ``zarr.json`` lies in a directory laid out as a store root (``index/`` and ``parts/``
beside it): since c8f34bb ``discover.is_store_root`` looks at those two first and reads no
``zarr.json`` without them, so a bare directory never reached the read this file is about (review
R40c s51 #1: with the read guard replaced by a plain blocking ``open().read()`` every test here
still passed). A reader that blocks fails by the timeout in :func:`_run`, not by hanging CI."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from featurecache.store.reader import open_store
from tests.conftest import SAMPLES


def _run(args: list[str], timeout: float, **kw: object) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in a session of its own; past ``timeout`` every process of it is killed (a hung
    build's workers too) and the test fails."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, **kw)  # type: ignore[call-overload]  # fmt: skip
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        pytest.fail(f"{args[2:4]}: still running after {timeout} s (blocked opening a zarr.json?)")
    return subprocess.CompletedProcess(args, p.returncode, out, err)


def _cli(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FEATURECACHE_DASHBOARD": "0", "COLUMNS": "250"}
    r = _run([sys.executable, "-m", "featurecache.cli", *args], timeout, env=env)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r


def _store_shaped(directory: Path) -> Path:
    """``directory`` with the empty ``index/`` and ``parts/`` of a store root: only then is its
    ``zarr.json`` looked at (``discover.is_store_root``)."""
    (directory / "index").mkdir(parents=True)
    (directory / "parts").mkdir()
    return directory


@pytest.mark.timeout(400)
def test_a_fifo_named_zarr_json_is_a_failure_row_and_never_opened(tmp_path: Path) -> None:
    pdb, msa, out = tmp_path / "pdb", tmp_path / "msa", tmp_path / "store"
    msa.mkdir()
    _store_shaped(pdb / "sub")
    (pdb / "1A8O.pdb").write_bytes((SAMPLES / "structures" / "1A8O.pdb").read_bytes())
    os.mkfifo(pdb / "sub" / "zarr.json")
    _store_shaped(pdb / "zz")
    (pdb / "zz" / "zarr.json").symlink_to("/dev/zero")

    r = _cli("build", "--pdb-dir", str(pdb), "--msa-dir", str(msa), "--ccd", str(SAMPLES / "ccd"),
             "--out", str(out), "--workers", "1", "--no-progress", "--no-dashboard")  # fmt: skip
    assert r.returncode == 1, r.stderr[-3000:]
    fails = {f["path"]: f for f in open_store(out).failures.to_pylist()}
    assert set(fails) == {"sub/zarr.json", "zz/zarr.json"}, fails
    assert "is a named pipe (FIFO); not opened" in fails["sub/zarr.json"]["message"]
    assert "is a character device; not opened" in fails["zz/zarr.json"]["message"]
    assert open_store(out).entries.column("id").to_pylist() == ["1A8O"]
    assert "featurecache store inside" not in r.stderr

    # prune walks the inputs the same way
    r = _cli("prune", str(out), "--sources-gone", str(pdb), "--dry-run", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "would remove 0" in r.stdout + r.stderr


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _fifo(meta: Path, tmp_path: Path) -> None:
    os.mkfifo(meta)


def _link_to_fifo(meta: Path, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # outside the inputs: only the link is an input
    meta.symlink_to(tmp_path / "fifo")


def _link_to_dev_zero(meta: Path, tmp_path: Path) -> None:
    meta.symlink_to("/dev/zero")


def _big_file(meta: Path, tmp_path: Path) -> None:
    with open(meta, "wb") as f:  # a regular zarr.json too big for a store root's (sparse)
        f.truncate(3 << 30)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("make", [_fifo, _link_to_fifo, _link_to_dev_zero, _big_file])
def test_a_zarr_json_that_is_no_small_file_is_not_read(
    tmp_path: Path, make: Callable[[Path, Path], None]
) -> None:
    """In a directory laid out as a store root, a ``zarr.json`` that is a FIFO, a link to one, a link
    to ``/dev/zero`` or a 3 GiB file: the walk returns (under a 2 GiB address-space limit) and the
    directory's files, that one too, are inputs."""
    pdb = tmp_path / "pdb"
    zz = _store_shaped(pdb / "zz")
    make(zz / "zarr.json", tmp_path)
    (zz / "a.cif").write_text("x\n")
    code = ("import sys; from pathlib import Path; from featurecache.build.discover import walk_inputs; "
            "print(sorted(p.relative_to(sys.argv[1]).as_posix() for p in walk_inputs(Path(sys.argv[1]))))")  # fmt: skip
    r = _run([sys.executable, "-c", code, str(pdb)], 120, preexec_fn=_limit_memory)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "['zz/a.cif', 'zz/zarr.json']"
