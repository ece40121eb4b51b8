"""``featurecache --version`` names the code as well as the version (review R28a s46 #5): two
installs of one version with other code printed the same line; the source digest (what the build
compares between its driver and its workers) tells them apart. The version is written once, in
``featurecache.__version__``, which pyproject.toml reads: it was written there too, and nothing kept
the two equal."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import featurecache
from featurecache.const import FEATURIZER_VERSION, SCHEMA_VERSION, STORE_FORMAT_VERSION

REPO = Path(__file__).resolve().parents[1]


def test_version_prints_the_source_digest() -> None:
    run = subprocess.run([sys.executable, "-m", "featurecache.cli", "--version"], capture_output=True, text=True,
                         timeout=120, cwd=REPO)  # fmt: skip
    assert (run.returncode, run.stderr) == (0, ""), run.stderr[-2000:]
    assert run.stdout == (
        f"featurecache {featurecache.__version__} (featurizer {FEATURIZER_VERSION}, store format "
        f"{STORE_FORMAT_VERSION}, schema {SCHEMA_VERSION}; source {featurecache.source_digest()})\n"
    )


def test_the_package_metadatas_version_is_featurecache_dunder_version() -> None:
    from setuptools.config.pyprojecttoml import read_configuration

    pyproject = REPO / "pyproject.toml"
    assert "version" not in tomllib.loads(pyproject.read_text())["project"]  # not written twice
    assert read_configuration(pyproject)["project"]["version"] == featurecache.__version__
