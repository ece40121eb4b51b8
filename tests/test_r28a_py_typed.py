"""A user's type checker reads featurecache's annotations from an installed wheel (review R28a s46
#7): without the PEP 561 marker ``py.typed`` mypy skipped the package ("module is installed, but
missing library stubs or py.typed marker") and a wrong argument went unseen."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

USER_CODE = """\
from featurecache.client import FeatureDataset

FeatureDataset("store/", crop_size="oops")
"""


def test_mypy_checks_a_users_call_against_the_installed_wheel(tmp_path: Path) -> None:
    source = tmp_path / "checkout"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, source / name)
    for name in ("featurecache", "services"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    build = "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"
    run = subprocess.run([sys.executable, "-c", build, str(tmp_path / "dist")], cwd=source, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    wheel = tmp_path / "dist" / run.stdout.strip().splitlines()[-1]

    # an environment holding the wheel's files in its site-packages (its dependencies left out:
    # mypy then takes torch and the rest as Any, and still checks featurecache's own signatures)
    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    site = next(env.glob("lib/python3*/site-packages"))
    with zipfile.ZipFile(wheel) as whl:
        assert "featurecache/py.typed" in whl.namelist()
        whl.extractall(site)
    (tmp_path / "user.py").write_text(USER_CODE)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", str(env / "bin" / "python"), "--no-incremental",
         "--cache-dir", str(tmp_path / "cache"), "--config-file", "/dev/null", "user.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    errors = [line for line in run.stdout.splitlines() if ": error:" in line or ": note:" in line]
    assert len(errors) == 1 and errors[0].startswith("user.py:3: error:"), run.stdout
    assert '"crop_size"' in errors[0] and "[arg-type]" in errors[0], run.stdout
