"""``FEATURECACHE_AUTH_TOKEN_FILE``: ``featurecache serve`` reads its bearer token from a file (a
Compose secret), so the token shows neither in ``ps`` nor in the server's environment. Real
``featurecache serve`` processes (uvicorn on 127.0.0.1), real files, the real deploy files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from featurecache import open_store
from services.lookup.server import free_port, wait_ready

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
TOKEN = "file-s3cret"
TOKEN_ENV, TOKEN_FILE_ENV = "FEATURECACHE_AUTH_TOKEN", "FEATURECACHE_AUTH_TOKEN_FILE"


def _serve(
    store: Path, port: int, env: dict[str, str], *args: str, workers: int = 2
) -> subprocess.Popen[str]:
    """``featurecache serve STORE --workers N`` (2: compose's default) with ``env`` as the only token
    settings (the test environment's own are dropped) and ``args`` after."""
    base = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, TOKEN_FILE_ENV)}
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port),
           "--workers", str(workers), *args]  # fmt: skip
    return subprocess.Popen(
        cmd, env={**base, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _outputs(procs: dict[str, subprocess.Popen[str]]) -> dict[str, str]:
    """Each server's output once it exited (within 60 s; a server still running is killed after)."""
    outs = {}
    try:
        for name, proc in procs.items():
            outs[name] = proc.communicate(timeout=60)[0]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outs


def test_the_token_file_protects_the_service(sample_store: Path, tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")  # as `echo TOKEN > file` writes it: the newline is not the token's
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _serve(sample_store, port, {TOKEN_FILE_ENV: str(secret)})
    try:
        wait_ready(url, timeout=60, token=TOKEN)
        assert httpx.get(f"{url}/v1/info", timeout=10).status_code == 401
        wrong = httpx.get(f"{url}/v1/info", headers={"authorization": "Bearer wrong"}, timeout=10)
        assert wrong.status_code == 401
        ok = httpx.get(f"{url}/v1/info", headers={"authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert ok.status_code == 200, ok.text
        assert ok.json()["counts"]["entries"] == len(open_store(sample_store).ids)
        assert httpx.get(f"{url}/v1/health", timeout=10).status_code == 200  # public, as with --token
        for part in ("cmdline", "environ"):  # what `ps` shows, what the process carries
            assert TOKEN.encode() not in Path(f"/proc/{proc.pid}/{part}").read_bytes(), part
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert TOKEN not in out


def test_a_token_file_that_gives_no_token_stops_serve_with_exit_3(sample_store: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("")
    (tmp_path / "newline").write_text("\n")
    good = tmp_path / "good"
    good.write_text(TOKEN)
    cases = {
        "missing": {TOKEN_FILE_ENV: str(tmp_path / "missing")},
        "empty": {TOKEN_FILE_ENV: str(tmp_path / "empty")},
        "newline": {TOKEN_FILE_ENV: str(tmp_path / "newline")},
        "a directory": {TOKEN_FILE_ENV: str(tmp_path)},
        "both": {TOKEN_FILE_ENV: str(good), TOKEN_ENV: "other"},
    }
    procs = {name: _serve(sample_store, free_port(), env) for name, env in cases.items()}  # at once
    outs = _outputs(procs)  # before: they served, without auth
    for name, proc in procs.items():
        out, path = outs[name], cases[name][TOKEN_FILE_ENV]
        assert proc.returncode == 3, (name, out)
        assert "Traceback" not in out and f"{TOKEN_FILE_ENV}={path}" in out, (name, out)
        assert TOKEN not in out
    assert "cannot read" in outs["missing"] and "No such file" in outs["missing"]
    assert "empty" in outs["empty"] and "empty" in outs["newline"]
    assert "both" in outs["both"]


def test_surrounding_whitespace_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import SecretStr

    from services.lookup.settings import Settings

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    # surrounding whitespace is not the token's (HTTP strips it from the header): RF3 1
    cases = {"tok\n": "tok", "tok\r\n": "tok", "tok": "tok", "tok\n\n": "tok", " tok \n": "tok"}
    for i, (text, token) in enumerate(cases.items()):
        f = tmp_path / f"t{i}"
        f.write_bytes(text.encode())
        settings = Settings(auth_token_file=f)
        assert settings.auth_token is not None and settings.auth_token.get_secret_value() == token, repr(text)
    with pytest.raises(ValueError, match="both"):
        Settings(auth_token=SecretStr("x"), auth_token_file=f)


def test_compose_secret_example_reaches_the_lookup_server() -> None:
    """deploy/compose.token.yaml mounts a Compose secret and points the variable at it."""
    base = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    doc = yaml.safe_load((DEPLOY / "compose.token.yaml").read_text())
    lookup = doc["services"]["lookup"]
    assert set(doc["services"]) <= set(base["services"])  # an override of the stack, not a new service
    (secret,) = lookup["secrets"]
    assert secret in doc["secrets"] and "file" in doc["secrets"][secret]
    assert lookup["environment"][TOKEN_FILE_ENV] == f"/run/secrets/{secret}"  # compose's mount point
    assert lookup["environment"][TOKEN_ENV] == ""  # the host's variable cannot also set one
