"""Review R42c s52 #8: a ``FEATURECACHE_AUTH_TOKEN`` set to whitespace only (a template whose secret
did not substitute) served the store without auth, a WARNING at most, while ``--token ' '`` is
refused (exit 2). Now such a variable (and a ``FEATURECACHE_AUTH_TOKEN_FILE`` set to whitespace only)
stops serve with exit 3 naming it; the empty string still means unset (deploy/compose.token.yaml
blanks the variable so). A short token is served with a WARNING (not refused: short example tokens
are in the docs and in scripts). Real ``featurecache serve`` processes on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from featurecache.errors import FeatureCacheError
from services.lookup.server import free_port, wait_ready

TOKEN_ENV, TOKEN_FILE_ENV = "FEATURECACHE_AUTH_TOKEN", "FEATURECACHE_AUTH_TOKEN_FILE"


def _serve(store: Path, port: int, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_AUTH_TOKEN")}
    cmd = [sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port), *args]
    return subprocess.Popen(
        cmd, env={**base, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_a_variable_set_to_whitespace_only_stops_serve_with_exit_3(sample_store: Path) -> None:
    cases = {
        "space": {TOKEN_ENV: " "},
        "newline": {TOKEN_ENV: "\n"},
        "tabs": {TOKEN_ENV: "\t \n"},
        "file space": {TOKEN_FILE_ENV: " "},
    }
    procs = {name: _serve(sample_store, free_port(), env) for name, env in cases.items()}  # at once
    outs = {}
    try:
        for name, proc in procs.items():
            try:
                outs[name] = proc.communicate(timeout=60)[0]
            except subprocess.TimeoutExpired:  # before: it served, without auth
                proc.kill()
                outs[name] = proc.communicate(timeout=30)[0]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for name, proc in procs.items():
        out = outs[name]
        variable = next(iter(cases[name]))
        assert proc.returncode == 3, (name, proc.returncode, out[-3000:])
        last = out.strip().splitlines()[-1]
        assert last.startswith("error: ") and f"{variable} is set but blank" in last, (name, out[-3000:])
        assert "Traceback" not in out and "Uvicorn running" not in out, (name, out[-3000:])


def test_an_empty_variable_still_means_no_token(sample_store: Path) -> None:
    """Compose's ``FEATURECACHE_AUTH_TOKEN: ""`` (deploy/compose.token.yaml): unset, as before."""
    port = free_port()
    proc = _serve(sample_store, port, {TOKEN_ENV: "", TOKEN_FILE_ENV: ""})
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=60)
        assert httpx.get(f"http://127.0.0.1:{port}/v1/info", timeout=10).status_code == 200
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_settings_refuse_a_variable_set_to_whitespace_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The app run by uvicorn directly (``services.lookup.main:create_app``) refuses it too."""
    from services.lookup.settings import Settings

    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    monkeypatch.setenv(TOKEN_ENV, "  ")
    with pytest.raises(FeatureCacheError, match=f"{TOKEN_ENV} is set but blank"):
        Settings(store_path=tmp_path)
    monkeypatch.setenv(TOKEN_ENV, "")
    assert Settings(store_path=tmp_path).auth_token is None
    monkeypatch.delenv(TOKEN_ENV)
    monkeypatch.setenv(TOKEN_FILE_ENV, " \n")
    with pytest.raises(FeatureCacheError, match=f"{TOKEN_FILE_ENV} is set but blank"):
        Settings(store_path=tmp_path)


@pytest.mark.parametrize("how", ["--token", "variable", "file"])
def test_a_short_token_is_served_with_a_warning(sample_store: Path, tmp_path: Path, how: str) -> None:
    short, long = "short-tok", "0123456789abcdef"  # 9 characters; 16 (no warning)
    outs = {}
    for token in (short, long):
        port = free_port()
        if how == "--token":
            proc = _serve(sample_store, port, {}, "--token", token)
        elif how == "variable":
            proc = _serve(sample_store, port, {TOKEN_ENV: token})
        else:
            path = tmp_path / f"token-{len(token)}"
            path.write_text(token + "\n")
            path.chmod(0o600)
            proc = _serve(sample_store, port, {TOKEN_FILE_ENV: str(path)})
        try:
            wait_ready(f"http://127.0.0.1:{port}", timeout=60, token=token)
        finally:
            proc.terminate()
            outs[token] = proc.communicate(timeout=30)[0]
        assert token not in outs[token]
    warned = "the token is 9 characters long: a short token can be guessed"
    assert outs[short].count(warned) == 1, outs[short][-3000:]  # before: no warning
    assert "characters long" not in outs[long], outs[long][-3000:]
