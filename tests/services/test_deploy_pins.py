"""The lookup image is reproducible (review R2 s24 #7): its base image is one Python release on one
Debian suite (not a moving tag such as ``python:3.11-slim``), and its Python dependencies are
installed under a constraints file that pins every distribution the image gets, at versions that
satisfy pyproject.toml. (Here rather than in tests/deploy: the files the session's brief gave.)"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
LOCK = DEPLOY / "requirements-serve.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)$")
# image → (its Dockerfile, the pyproject extra it installs, its lock). The worker image got its lock
# in session 42: before, two builds of it a month apart could run different RDKit or numpy versions
# on the workers, and a store's arrays depend on them.
IMAGES = {
    "lookup": ("Dockerfile", "serve", DEPLOY / "requirements-serve.lock"),
    "worker": ("Dockerfile.worker", "build", DEPLOY / "requirements-build.lock"),
}


def _lock(lock: Path = LOCK) -> dict[str, str]:
    pins: dict[str, str] = {}
    for n, line in enumerate(lock.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = PIN.match(line)
        assert m, f"{lock.name}:{n}: not 'name==version': {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"{lock.name}:{n}: {name} pinned twice"
        pins[name] = m.group(2)
    return pins


def _base_image_default(dockerfile: Path) -> str:
    m = re.search(r"^ARG BASE_IMAGE=(\S+)$", dockerfile.read_text(), re.M)
    assert m, dockerfile
    return m.group(1)


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.worker"])
def test_the_base_image_is_a_pinned_release(name: str) -> None:
    image = _base_image_default(DEPLOY / name)
    # python:<major.minor.patch>-<variant>-<debian suite>[@sha256:...]: before, python:3.11-slim
    m = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?", image)
    assert m, f"{name}: BASE_IMAGE={image} is a moving tag (want python:X.Y.Z-slim-<suite>)"
    assert image == _base_image_default(DEPLOY / "Dockerfile"), "both images on the same base"
    # the suite the podman base image (the one the container test builds on) uses too
    env_sh = (DEPLOY / "podman" / "env.sh").read_text()
    assert f'FC_DEBIAN_SUITE="${{FC_DEBIAN_SUITE:-{m.group(4)}}}"' in env_sh
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    from packaging.specifiers import SpecifierSet

    assert SpecifierSet(requires).contains(".".join(m.group(1, 2, 3))), (image, requires)


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_the_lock_pins_every_requirement_of_the_image_within_pyproject(image: str) -> None:
    _, extra, lock = IMAGES[image]
    pins = _lock(lock)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"][extra]]
    assert len(wanted) >= 10  # the base dependencies and the image's extra, read from pyproject
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} (pyproject) is not pinned in {lock.name}"
        assert req.specifier.contains(Version(pins[name]), prereleases=True), (str(req), pins[name])
    if image == "lookup":
        # uvicorn[standard]: its extra's distributions, which carry the fast HTTP parser and loop
        for name in ("httptools", "uvloop", "websockets", "watchfiles", "python-dotenv", "pyyaml"):
            assert name in pins, f"uvicorn[standard] needs {name}; not pinned"
        # what FastAPI and pydantic stand on (the stack of the served bytes)
        for name in ("starlette", "pydantic", "pydantic-core", "anyio", "numcodecs"):
            assert name in pins, name
    else:
        # dask[distributed]'s extra, and what the features' bytes depend on
        for name in ("distributed", "tornado", "msgpack", "numpy", "rdkit", "gemmi", "scipy", "zarr"):
            assert name in pins, name


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_the_lock_is_what_its_script_writes_from_the_tested_venv(image: str) -> None:
    """The lock is generated, never hand-edited: run here, the script writes it byte for byte. Only
    where this venv holds the lock's versions (a venv upgraded since, e.g. CI's fresh install of the
    newest releases, has other versions: then the lock is left for a person to regenerate)."""
    _, extra, lock = IMAGES[image]
    pins = _lock(lock)
    differ = {}
    for name, version in pins.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            differ[name] = (version, installed)
    if differ:
        pytest.skip(f"this venv is not the one the lock was written from: {sorted(differ.items())[:5]}")
    run = subprocess.run(
        [sys.executable, str(DEPLOY / "lock_requirements.py"), extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout == lock.read_text()


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_the_image_installs_under_the_lock(image: str) -> None:
    dockerfile, extra, lock = IMAGES[image]
    text = (DEPLOY / dockerfile).read_text()
    deps_stage = text.split("\nFROM ")[1]
    assert f"COPY pyproject.toml deploy/pyproject_requirements.py deploy/{lock.name} ./" in deps_stage
    run = next(line for line in deps_stage.split("RUN ") if "pip install --requirement" in line)
    # the instruction: its lines up to the first one not continued by a backslash
    lines = run.splitlines()
    end = next(i for i, line in enumerate(lines) if not line.rstrip().endswith("\\"))
    install = " ".join(line.rstrip(" \\") for line in lines[: end + 1]).split("pip install ", 1)[1]
    assert f"pyproject_requirements.py pyproject.toml {extra} >" in run, run
    words = install.split()
    assert words[:4] == ["--requirement", "requirements.txt", "--constraint", lock.name], install
    # nothing installed beside the requirements escapes the lock (setuptools is pinned in it)
    beside = [Requirement(w.strip("\"'")).name for w in words[4:]]
    assert all(canonicalize_name(e) in _lock(lock) for e in beside), beside
    ignore = (DEPLOY / f"{dockerfile}.dockerignore").read_text().splitlines()
    assert f"!deploy/{lock.name}" in ignore  # in the build context


def _compose_default(value: str) -> str:
    """``${VAR:-default}`` (what Compose substitutes when VAR is unset) → default."""
    m = re.fullmatch(r"\$\{(\w+):-([^}]*)\}", value)
    assert m, f"not ${{VAR:-default}}: {value!r}"
    return m.group(2)


def test_compose_builds_the_pinned_base_and_runs_an_init() -> None:
    """Review RF1 s24 #4: compose.yaml passed BASE_IMAGE=python:3.11-slim as a build arg, which
    overrides the Dockerfiles' pinned default, so `docker compose build` used the moving tag. And
    RF1 #1: every service runs under an init (reaps zombies, hands docker stop's SIGTERM on)."""
    import yaml

    checked = 0
    for compose in sorted(DEPLOY.glob("compose*.y*ml")):
        services = (yaml.safe_load(compose.read_text()) or {}).get("services") or {}
        for name, service in services.items():
            build = service.get("build")
            if build is None:
                continue
            dockerfile = REPO / build["dockerfile"]
            pinned = _base_image_default(dockerfile)
            given = (build.get("args") or {}).get("BASE_IMAGE")
            if given is not None:  # an arg overrides the Dockerfile's default: the same pin when unset
                assert _compose_default(given) == pinned, (
                    f"{compose.name} {name}: BASE_IMAGE={given}, {pinned}"
                )
            assert service.get("init") is True, f"{compose.name} {name}: no init: true"
            checked += 1
    assert checked >= 4, checked  # scheduler, worker, build (worker image) and lookup


def _seconds(duration: str) -> float:
    """A Compose duration (``20s``, ``2m``, ``1m30s``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"([0-9.]+)(ms|us|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def test_compose_lets_the_lookup_server_finish_its_requests_on_stop() -> None:
    """Review R12 s39 L1: serve lets requests in flight finish for ``GRACEFUL_SHUTDOWN_S`` after
    SIGTERM, and Docker kills a container 10 s after ``docker stop`` unless ``stop_grace_period``
    says otherwise (Compose file reference): the lookup server was killed as its own grace ended.
    The build stops by finishing its part and rebuilding the index: it gets longer still."""
    import yaml

    from services.lookup.server import GRACEFUL_SHUTDOWN_S

    docker_default = 10.0
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    lookup = _seconds(services["lookup"].get("stop_grace_period", f"{docker_default:g}s"))
    assert lookup > GRACEFUL_SHUTDOWN_S, (lookup, GRACEFUL_SHUTDOWN_S)
    build = _seconds(services["build"].get("stop_grace_period", f"{docker_default:g}s"))
    assert build > docker_default, build
