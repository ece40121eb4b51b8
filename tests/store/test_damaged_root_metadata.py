"""A store whose root ``zarr.json`` is valid JSON but not a zarr group's metadata (``null``, a list,
an ``attributes`` that is not an object): every command that opens the store says so in one line
naming the file (exit 3), and a build refuses to write into it. Before, the reader's
``json.loads(...).get("attributes")`` raised a bare AttributeError: ``featurecache serve`` printed a
traceback and exited 1."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from featurecache.errors import StoreError
from featurecache.store.reader import open_store
from tests.conftest import REPO, SAMPLES, CliRun, cli_in_process


def _cli(*args: str) -> CliRun:
    """``featurecache ARGS`` (info, show, a build refused before it starts): the real CLI, in this
    process (tests/conftest.py)."""
    return cli_in_process(*args, cwd=REPO)


def _cli_process(*args: str) -> subprocess.CompletedProcess[str]:
    """``featurecache ARGS`` in a process of its own: serve (a server)."""
    return subprocess.run([sys.executable, "-m", "featurecache.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


@pytest.mark.parametrize("damage", ["null", "[1, 2]", '{"zarr_format": 3, "attributes": 3}'])
def test_a_root_metadata_that_is_not_a_group_object_is_named(
    sample_store: Path, tmp_path: Path, damage: str
) -> None:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    meta = store / "zarr.json"
    meta.write_text(damage)

    with pytest.raises(StoreError) as refused:
        open_store(store)
    assert str(meta) in str(refused.value) and "damaged" in str(refused.value)

    for args in (("info", str(store)), ("show", str(store), "102m"), ("serve", str(store), "--port", "1")):
        run = (_cli_process if args[0] == "serve" else _cli)(*args)
        assert run.returncode == 3, (args, run.returncode, run.stderr)
        assert "Traceback" not in run.stderr, run.stderr
        assert f"{meta}: damaged" in run.stderr, run.stderr

    # refused before it starts a cluster: in this process (one it started would be left to the check)
    build = _cli("build", "--pdb-dir", str(SAMPLES / "structures"), "--out", str(store),
                 "--workers", "1", "--no-progress")  # fmt: skip
    assert build.returncode == 3, build.stderr
    assert f"{meta}: damaged" in build.stderr and "Traceback" not in build.stderr, build.stderr
    assert meta.read_text() == damage  # nothing written into it
