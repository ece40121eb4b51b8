"""Review R39a s50 #1: the "another featurecache store inside the inputs" check (review R38a s50 #8)
opened every entry named ``zarr.json`` it met: a FIFO of that name hung the build and ``prune
--sources-gone`` forever (``open()`` waits for a writer), and a symlink to ``/dev/zero`` read until
memory ran out. The check reads a ``zarr.json`` only when it is a small regular file (not a link,
not a FIFO, socket or device; opened without blocking); anything else is no store, and stays what
it was before that check: an input that is never opened, a failure row naming what it is."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
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


def test_a_fifo_named_zarr_json_is_a_failure_row_and_never_opened(tmp_path: Path) -> None:
    pdb, msa, out = tmp_path / "pdb", tmp_path / "msa", tmp_path / "store"
    (pdb / "sub").mkdir(parents=True)
    msa.mkdir()
    (pdb / "1A8O.pdb").write_bytes((SAMPLES / "structures" / "1A8O.pdb").read_bytes())
    os.mkfifo(pdb / "sub" / "zarr.json")
    (pdb / "zz").mkdir()
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


def test_a_zarr_json_link_to_dev_zero_is_not_read(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    (pdb / "zz").mkdir(parents=True)
    (pdb / "zz" / "zarr.json").symlink_to("/dev/zero")
    (pdb / "zz" / "a.cif").write_text("x\n")
    (pdb / "big").mkdir()  # a regular zarr.json too big for a store root's: not read
    with open(pdb / "big" / "zarr.json", "wb") as f:
        f.truncate(3 << 30)
    code = ("import sys; from pathlib import Path; from featurecache.build.discover import walk_inputs; "
            "print(sorted(p.relative_to(sys.argv[1]).as_posix() for p in walk_inputs(Path(sys.argv[1]))))")  # fmt: skip
    r = _run([sys.executable, "-c", code, str(pdb)], 120, preexec_fn=_limit_memory)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "['big/zarr.json', 'zz/a.cif', 'zz/zarr.json']"
