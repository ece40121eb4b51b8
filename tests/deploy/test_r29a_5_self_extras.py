"""An extra that names others of featurecache's (``client = ["featurecache[http]", ...]``, ``train =
["featurecache[client,model]"]``) stands for their requirements in what the deploy scripts list and
pin (review R29a s46 #5). ``deploy/pyproject_requirements.py`` and ``deploy/lock_requirements.py``
dropped such a requirement: an image of the ``client`` extra would lack httpx, one of ``train``
httpx, scipy, torch and triton. The images' own extras (serve, build) name none, so their lists and
locks stay as they were.

The scripts run as the Dockerfiles and the lock's docstring run them: in a process of their own,
over the repo's pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PYPROJECT = REPO / "pyproject.toml"


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=120,
                          check=False, cwd=REPO)  # fmt: skip


def _listed(*extras: str) -> list[str]:
    run = _run(DEPLOY / "pyproject_requirements.py", PYPROJECT, *extras)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


def _project() -> dict[str, list[str]]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def test_an_extra_naming_featurecaches_own_extras_lists_theirs() -> None:
    deps = _project()
    assert "featurecache[http]" in deps["client"] and deps["train"] == ["featurecache[client,model]"]
    client = _listed("client")
    assert client == deps[""] + deps["http"] + ["scipy>=1.11", "torch==2.13.0"]
    # client's then model's, each requirement once (torch is in both)
    assert _listed("train") == [*client, "triton==3.7.1"]
    assert not [r for r in _listed("train", "client") if r.startswith("featurecache")]


@pytest.mark.parametrize("extra", ["serve", "build"])
def test_the_images_extras_list_as_before(extra: str) -> None:
    """The Dockerfiles' extras name none of featurecache's own: their requirements are pyproject's."""
    deps = _project()
    assert _listed(extra) == list(dict.fromkeys(deps[""] + deps[extra]))


def test_an_unknown_extra_is_refused() -> None:
    run = _run(DEPLOY / "pyproject_requirements.py", PYPROJECT, "nosuch")
    assert run.returncode != 0 and "unknown extra 'nosuch'" in run.stderr


@pytest.mark.parametrize(("extra", "pinned"), [("client", ("httpx", "httpcore", "h11", "scipy", "torch")),
                                               ("train", ("httpx", "torch", "triton"))])  # fmt: skip
def test_the_lock_of_an_extra_naming_featurecaches_own_pins_theirs(
    extra: str, pinned: tuple[str, ...]
) -> None:
    run = _run(DEPLOY / "lock_requirements.py", extra)
    assert run.returncode == 0, run.stderr
    names = {line.split("==")[0] for line in run.stdout.splitlines() if "==" in line}
    assert set(pinned) <= names, sorted(set(pinned) - names)
    assert "featurecache" not in names
