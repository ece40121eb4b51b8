"""A command whose extra is not installed stops with exit 3 and one line naming the command, the
missing module and the ``pip install`` that brings it (review R28a s46 #1): it was a
ModuleNotFoundError traceback and exit 1, which for ``build`` means "some inputs failed".

The real command line runs in a process of its own in which one module of the extra cannot be
imported (``sys.modules[name] = None``: ``import name`` raises ImportError, as in an install without
the extra)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from featurecache.cli import EXTRA_MODULES

REPO = Path(__file__).resolve().parents[1]

_WITHOUT = """
import runpy, sys
sys.modules[sys.argv[1]] = None  # this module is not installed
sys.argv = ["featurecache", *sys.argv[2:]]
runpy.run_module("featurecache.cli", run_name="__main__")
"""


def _args(command: str, tmp_path: Path) -> list[str]:
    """Arguments the command accepts up to the point where it imports its extra."""
    if command == "build":
        return ["build", "--pdb-dir", str(REPO / "samples" / "structures"), "--out", str(tmp_path / "out")]
    if command == "train":
        return ["train", "--store", str(tmp_path), "--steps", "1", "--device", "cpu", "--crop", "32"]
    if command == "report":
        return ["report", str(tmp_path), "--out", str(tmp_path / "report")]
    return [command, str(tmp_path)]


@pytest.mark.parametrize(
    ("command", "module"),
    [("build", "gemmi"), ("build", "distributed"), ("serve", "uvicorn"), ("train", "torch"),
     ("train", "triton"), ("report", "matplotlib")],
)  # fmt: skip
def test_a_command_without_its_extra_exits_3_naming_it(command: str, module: str, tmp_path: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    run = subprocess.run([sys.executable, "-c", _WITHOUT, module, *_args(command, tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert (run.returncode, run.stdout) == (3, ""), (run.returncode, run.stderr[-3000:])
    assert run.stderr.splitlines() == [
        f"error: featurecache {command} needs the [{command}] extra (module {module} is not installed): "
        f"pip install 'featurecache[{command}]'"
    ], run.stderr[-3000:]
    assert not (tmp_path / "out").exists()  # build: nothing written


def _extra_distributions(optional: dict[str, list[str]], extra: str) -> set[str]:
    """The distributions an extra names, through its ``featurecache[...]`` references."""
    out: set[str] = set()
    for text in optional[extra]:
        req = Requirement(text)
        if canonicalize_name(req.name) == "featurecache":
            for inner in req.extras:
                out |= _extra_distributions(optional, inner)
        else:
            out.add(canonicalize_name(req.name))
    return out


@pytest.mark.parametrize("command", sorted(EXTRA_MODULES))
def test_each_module_checked_comes_from_the_commands_extra(command: str) -> None:
    """The extra the line names brings every module the command checks (``Bio``: biopython;
    ``distributed``: dask[distributed]), so the ``pip install`` it prints is the fix."""
    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = _extra_distributions(optional, command)
    if "dask" in wanted:
        wanted.add("distributed")  # dask[distributed]
    for module in EXTRA_MODULES[command]:
        dists = {canonicalize_name(d) for d in packages_distributions().get(module, [module])}
        assert dists & wanted, (command, module, dists, sorted(wanted))
