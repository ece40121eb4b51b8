"""The sdist and the wheel carry the Apache-2.0 licence the metadata declares, and the sdist carries
no part of the test suite (review R28a s46 #6): it had no LICENSE, and 8 of the test files
(setuptools' default takes ``tests/test*.py``) without conftest.py or samples/, which failed there.

The distributions are built by setuptools' build backend (the one pyproject names), in a process
of its own, from a copy of the files a checkout gives it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_BUILD = """
import sys
from setuptools import build_meta

print(getattr(build_meta, sys.argv[1])(sys.argv[2]))
"""


def _build(kind: str, source: Path, out: Path) -> Path:
    run = subprocess.run([sys.executable, "-c", _BUILD, f"build_{kind}", str(out)], cwd=source,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "did not match any files" not in run.stderr, run.stderr[-3000:]  # license-files
    return out / run.stdout.strip().splitlines()[-1]


def test_the_sdist_carries_the_licence_and_no_tests_and_builds_a_wheel_that_does(tmp_path: Path) -> None:
    source = tmp_path / "checkout"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        if (REPO / name).exists():  # (the code before had no LICENSE or MANIFEST.in)
            shutil.copy2(REPO / name, source / name)
    for name in ("featurecache", "services", "tests"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))

    sdist = _build("sdist", source, tmp_path / "dist")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert "LICENSE" in names
    assert [n for n in names if n.startswith("tests/")] == []
    top = next((tmp_path / "unpacked").iterdir())
    assert (top / "LICENSE").read_bytes() == (REPO / "LICENSE").read_bytes()
    assert "License-File: LICENSE" in (top / "PKG-INFO").read_text().splitlines()

    wheel = _build("wheel", top, tmp_path / "wheel")  # as `python -m build`: the wheel from the sdist
    with zipfile.ZipFile(wheel) as whl:
        licences = [n for n in whl.namelist() if ".dist-info/licenses/" in n]
        assert [n.split("/", 1)[1] for n in licences] == ["licenses/LICENSE"], licences
        assert whl.read(licences[0]) == (REPO / "LICENSE").read_bytes()
    assert b"Apache License" in (REPO / "LICENSE").read_bytes()[:200]
