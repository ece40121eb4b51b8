"""Started from a working directory that was deleted, a relative path in an environment variable
the command reads is refused like a relative argument (exit 3, the one line, naming the variable),
instead of being taken from ``/``, where the command goes on (review R39a s50 #5:
``FEATURECACHE_AUTH_TOKEN_FILE=tmp/x`` read ``/tmp/x`` and served with it,
``DASK_TEMPORARY_DIRECTORY=rel`` made ``/rel``). Every variable of every command's list is
checked (review R40c s51 #8: one variable dropped from ``cli.PATH_VARIABLES``, ``TRITON_CACHE_DIR``
for train, failed no test)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from services.lookup.server import free_port
from tests.cli.test_r38a_deleted_cwd import _cli, _env
from tests.conftest import SAMPLES


def _refused(r: subprocess.CompletedProcess[str], variable: str) -> None:
    assert r.returncode == 3, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: the current directory no longer exists"), lines
    assert f", and {variable} is relative to it: " in lines[0], lines


def test_a_relative_token_file(two_entry_store: Path, tmp_path: Path) -> None:
    token = tmp_path / "tok"
    token.write_text("secret-from-root-relative\n")
    token.chmod(0o600)
    from_root = str(token).lstrip("/")  # relative: from / it names the token file
    env = {**_env(), "FEATURECACHE_AUTH_TOKEN_FILE": from_root}
    r = subprocess.run(_cli(tmp_path, "serve", str(two_entry_store), "--port", str(free_port()), "--workers", "1"),
                       capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    _refused(r, f"FEATURECACHE_AUTH_TOKEN_FILE={from_root}")


def test_a_relative_dask_temporary_directory(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    scratch = tmp_path / "dtrel"
    env = {**_env(), "DASK_TEMPORARY_DIRECTORY": str(scratch).lstrip("/")}
    r = subprocess.run(_cli(tmp_path, "build", "--pdb-dir", str(pdb), "--out", str(tmp_path / "s"), "--workers", "1",
                            "--no-progress"), capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    _refused(r, f"DASK_TEMPORARY_DIRECTORY={str(scratch).lstrip('/')}")
    assert not scratch.exists() and not (tmp_path / "s").exists()


_TEMP = ("TMPDIR", "TEMP", "TMP")
#: the environment variables holding a path that each command reads (``cli.PATH_VARIABLES``, written
#: out here: a variable missing from that table is what this test is to find)
PATH_VARIABLES = {
    "build": ("DASK_TEMPORARY_DIRECTORY", "DASK_CONFIG", "DASK_ROOT_CONFIG", *_TEMP),
    "serve": ("FEATURECACHE_AUTH_TOKEN_FILE", "PROMETHEUS_MULTIPROC_DIR", *_TEMP),
    "train": ("FEATURECACHE_AUTH_TOKEN_FILE", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", *_TEMP),
    "report": ("MPLCONFIGDIR", *_TEMP),
}


@pytest.mark.parametrize("command", sorted(PATH_VARIABLES))
def test_each_path_variable_of_a_command_is_named(tmp_path: Path, command: str) -> None:
    """Every variable of the command's list set to a relative path at once: the one line names each
    (with its value), and the command does nothing."""
    t = str(tmp_path)
    args = {
        "build": ["--pdb-dir", t, "--out", f"{t}/s", "--workers", "1", "--no-progress"],
        "serve": [t, "--port", str(free_port())],
        "train": ["--store", t, "--log", f"{t}/log.json"],
        "report": [t, "--out", f"{t}/r"],
    }[command]
    relative = {name: f"rel/{name.lower()}" for name in PATH_VARIABLES[command]}
    r = subprocess.run(_cli(tmp_path, command, *args), capture_output=True, text=True,
                       env={**_env(), **relative}, timeout=300)  # fmt: skip
    assert r.returncode == 3, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: the current directory no longer exists"), lines
    named = lines[0].split(", and ", 1)[1].split(" are relative to it: ", 1)[0].split(", ")
    assert sorted(named) == sorted(f"{name}={value}" for name, value in relative.items()), lines
    assert not (tmp_path / "s").exists() and not (tmp_path / "r").exists()
