"""The lookup image, for real: built with podman (runc, ulimits from deploy/podman/containers.conf,
on the debootstrap base image), run against the sample store mounted read-only, asked for
/v1/health and real lookups. Skipped only when podman itself cannot run here (the reason is printed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from featurecache.store.reader import LocalStore
from services.lookup.server import free_port, wait_ready

pytestmark = pytest.mark.container

REPO = Path(__file__).resolve().parents[2]
PODMAN_DIR = REPO / "deploy" / "podman"
TAG = "localhost/featurecache-lookup:test"
ENV = {**os.environ, "CONTAINERS_CONF": str(PODMAN_DIR / "containers.conf")}


def _run(cmd: list[str], timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def _why_podman_cannot_run() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (deploy/podman/setup.sh installs podman, buildah, runc, debootstrap)"
    info = _run(["podman", "info", "--format", "json"], timeout=60)
    if info.returncode != 0:
        return f"podman is installed but cannot run here: {info.stderr.strip()[-500:]}"
    return None


def _base_image() -> str:
    out = _run(["bash", "-c", f"source {PODMAN_DIR / 'env.sh'} && echo $FC_BASE_IMAGE"], check=True)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def image() -> str:
    reason = _why_podman_cannot_run()
    if reason is not None:
        pytest.skip(f"container test skipped: {reason}")
    if _run(["podman", "image", "exists", _base_image()]).returncode != 0:
        # a fresh machine: install config + build the debootstrap base (about a minute)
        _run([str(PODMAN_DIR / "setup.sh")], timeout=1200, check=True)
    _run([str(PODMAN_DIR / "build_image.sh"), TAG], timeout=1500, check=True)
    return TAG


@pytest.fixture()
def container(image: str, sample_store: Path) -> Iterator[tuple[str, str]]:
    name = f"fc-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    cmd = [
        "podman", "run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:8000",
        "--volume", f"{sample_store}:/store:ro", "--read-only", "--health-interval=disable", image,
    ]  # fmt: skip
    _run(cmd, check=True)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_ready(url, timeout=90)
        except TimeoutError as exc:
            logs = _run(["podman", "logs", name]).stdout
            raise AssertionError(f"{exc}\ncontainer logs:\n{logs[-3000:]}") from None
        yield name, url
    finally:
        _run(["podman", "rm", "--force", name], timeout=60)


def test_image_serves_the_store(container: tuple[str, str], reference: LocalStore) -> None:
    import httpx

    from featurecache.client.http import LookupClient

    name, url = container
    assert httpx.get(f"{url}/v1/health").json() == {"status": "ok"}
    assert _run(["podman", "healthcheck", "run", name]).returncode == 0  # the image's HEALTHCHECK
    client = LookupClient(url, retries=2)
    assert client.info()["counts"]["entries"] == len(reference.ids)
    entry_id = max(reference.ids, key=lambda i: reference.entry_meta(i)["atom_count"])
    got, want = client.entry(entry_id), reference.entry(entry_id)
    for g in ("atoms", "tokens", "bonds", "interfaces"):
        for f, a in getattr(want, g).items():
            np.testing.assert_array_equal(getattr(got, g)[f], a, err_msg=f"{g}/{f}")
    if reference.msas.num_rows:
        key = reference.msas.column("key")[0].as_py()
        np.testing.assert_array_equal(
            client.msa(key, [0], None).residues, reference.msa(key, [0], None).residues
        )
    assert client.component_table().to_arrow().num_rows == reference.component_table().to_arrow().num_rows
    client.close()


def test_runs_as_non_root_on_a_read_only_store(container: tuple[str, str]) -> None:
    name, _ = container
    assert _run(["podman", "exec", name, "id", "-u"], check=True).stdout.strip() == "10001"
    touch = _run(["podman", "exec", name, "touch", "/store/probe"])
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr
    assert _run(["podman", "exec", name, "sh", "-c", "ulimit -n"], check=True).stdout.strip() == "20000"


def test_healthcheck_follows_the_port_on_a_read_only_root_with_workers(
    image: str, sample_store: Path
) -> None:
    """deploy/README.md's advice, for real: another --port, --workers 2, a read-only root with only
    /tmp writable (podman's automatic tmpfs mounts off, as under docker --read-only)."""
    name = f"fc-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    cmd = [
        "podman", "run", "--detach", "--name", name, "--publish", f"127.0.0.1:{port}:9000",
        "--volume", f"{sample_store}:/store:ro", "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp",
        "--health-interval=disable", image, "/store", "--host", "0.0.0.0", "--port", "9000", "--workers", "2",
    ]  # fmt: skip
    _run(cmd, check=True)
    try:
        try:
            wait_ready(f"http://127.0.0.1:{port}", timeout=90)
        except TimeoutError as exc:
            logs = _run(["podman", "logs", name]).stdout
            raise AssertionError(f"{exc}\ncontainer logs:\n{logs[-3000:]}") from None
        check = _run(["podman", "healthcheck", "run", name])
        assert check.returncode == 0, check.stdout + check.stderr
        touch = _run(["podman", "exec", name, "touch", "/opt/probe"])
        assert touch.returncode != 0 and "Read-only file system" in touch.stderr
    finally:
        _run(["podman", "rm", "--force", name], timeout=60)


def test_image_metadata_and_no_build_tools(image: str) -> None:
    (meta,) = json.loads(_run(["podman", "image", "inspect", image], check=True).stdout)
    config = meta["Config"]
    assert config["User"] == "10001:10001"
    assert "8000/tcp" in config["ExposedPorts"]
    assert "/store" in config["Volumes"]
    assert "services.lookup.healthcheck" in " ".join(
        meta.get("Healthcheck", config.get("Healthcheck", {})).get("Test", [])
    )
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "featurecache", "serve"]  # tini as PID 1
    probe = "for t in gcc cc c++ g++ make ld pip pip3; do command -v $t && exit 1; done; python3 -m pip --version && exit 1; exit 0"
    out = _run(["podman", "run", "--rm", "--entrypoint", "sh", image, "-c", probe], timeout=60)
    assert out.returncode == 0, f"build tools in the final image: {out.stdout}"
