"""A store the command's user may not read: exit 3 (each command's --help: "the store ... cannot
be opened / is unreadable") and one line naming the path, the uid the command runs as and the fix;
before, click's own ``readable`` check made it a usage error, exit 2, "Invalid value for 'store':
path '/store' is not readable." (review R1 s27 #5: the lookup image serves as uid 10001 a store
mounted from the host). Real CLI runs as another uid (as root: uid 65534 through setuid; as
another user: the store made unreadable by chmod)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES, build_store

VENV_BIN = Path(sys.executable).parent
NOBODY = 65534
AS_ROOT = os.geteuid() == 0
RUN_UID = NOBODY if AS_ROOT else os.getuid()


#: as root, each command runs as uid/gid 65534 through setpriv (util-linux): it execs the venv's
#: interpreter, which lies under root's 0700 home here, before the capabilities go; the command
#: itself then runs without any (a setuid in a preexec_fn could not exec it)
AS_OTHER = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if AS_ROOT else []


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AS_OTHER, *argv], capture_output=True, text=True, timeout=120, cwd="/",
        env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="400"),
    )  # fmt: skip


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _run(str(VENV_BIN / "featurecache"), *args)


def _may_read(path: Path) -> bool:
    """Whether the uid the commands run as may read ``path`` (asked as that uid)."""
    res = _run(sys.executable, "-c", f"import os; print(os.getuid(), os.access({str(path)!r}, os.R_OK))")
    assert res.returncode == 0, res.stderr[-1000:]
    uid, ok = res.stdout.split()
    assert int(uid) == RUN_UID
    return ok == "True"


@pytest.fixture(scope="module")
def store() -> Iterator[Path]:
    """A real store in a directory every user may search (pytest's own tmp dirs are root's 0700)."""
    top = Path(tempfile.mkdtemp(prefix="e3s27-store-", dir="/tmp"))
    try:
        top.chmod(0o755)
        out = top / "store"
        build_store(out, SAMPLES / "structures", workers=1)
        for p in [out, *out.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        if AS_ROOT and shutil.which("setpriv") is None:
            pytest.skip(f"no setpriv to run the CLI as uid {NOBODY}")
        assert _may_read(out)
        yield out
    finally:
        for p in [top, *top.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(top)


@pytest.fixture
def private_store(store: Path) -> Iterator[Path]:
    """``store`` unreadable to the uid the CLI runs as (0700 root's; 0000 for its own user)."""
    store.chmod(0o700 if AS_ROOT else 0o000)
    try:
        assert not _may_read(store)  # the premise
        yield store
    finally:
        store.chmod(0o755)


def _check_refusal(res: subprocess.CompletedProcess[str], path: Path) -> None:
    err = " ".join(res.stderr.split())
    assert res.returncode == 3, (res.returncode, err[-2000:])
    assert "Invalid value" not in err and "Traceback" not in err, err[-2000:]
    assert f"error: cannot read {path}: uid {RUN_UID} " in err, err[-2000:]
    assert (
        "may not read it" in err
        and f"chmod -R a+rX {path.parent if path.name == 'zarr.json' else path}" in err
    )


def test_serve_on_an_unreadable_store_exits_3_naming_uid_and_fix(private_store: Path) -> None:
    res = _cli("serve", str(private_store), "--port", "18999")
    _check_refusal(res, private_store)
    assert "the user this server runs as" in res.stderr
    assert "a container: run it with --user " in " ".join(res.stderr.split())


@pytest.mark.parametrize(
    "args",
    [["info", "{s}"], ["show", "{s}", "1psm"], ["verify", "{s}"], ["prune", "{s}", "--dry-run"],
     ["plan", "{s}"], ["report", "{s}", "--out", "/tmp/e3s27-report-never-written"],
     ["build", "--pdb-dir", str(SAMPLES / "structures"), "--out", "{s}", "--workers", "1"],
     ["train", "--store", "{s}", "--steps", "1"]],
    ids=lambda a: a[0],
)  # fmt: skip
def test_other_commands_on_an_unreadable_store_exit_3(private_store: Path, args: list[str]) -> None:
    res = _cli(*(a.format(s=private_store) for a in args))
    _check_refusal(res, private_store)
    assert "the user this command runs as" in res.stderr
    assert not Path("/tmp/e3s27-report-never-written").exists()


def test_unreadable_zarr_json_in_a_readable_store_exits_3(store: Path) -> None:
    (store / "zarr.json").chmod(0o600 if AS_ROOT else 0o000)
    try:
        res = _cli("info", str(store))
    finally:
        (store / "zarr.json").chmod(0o644)
    _check_refusal(res, store / "zarr.json")


def test_readable_store_is_served_and_usage_errors_stay_exit_2(store: Path) -> None:
    """The check does not misfire: the same store, readable, is read by that uid; a bad option is
    still a usage error (exit 2)."""
    ok = _cli("info", str(store))
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "cannot read" not in ok.stderr
    bad = _cli("serve", str(store), "--port", "0")
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "--port 0" in bad.stderr
