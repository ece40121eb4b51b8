"""A bearer token with whitespace around it (a token file ending in a blank line or a space, a
variable set with a trailing space) must still protect *and admit*: HTTP strips surrounding
whitespace from header values (RFC 7230 §3.2.4), so the server drops it from its token too (RF3 1).
A token with whitespace or a control character inside can never arrive in a header: ``featurecache
serve`` refuses it at startup (one line naming the file, the variable or the option, not the token;
exit 3 for the file and the variable, 2 for ``--token``: an invalid option value is a usage error).
Real ``featurecache serve`` processes (uvicorn on 127.0.0.1) and real files."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from services.lookup.server import free_port, wait_ready
from tests.services.test_token_file import TOKEN_ENV, TOKEN_FILE_ENV, _outputs, _serve

TOKEN = "abc123"


def _status(url: str, token: str | None) -> int:
    """Status of ``GET /v1/ready`` with ``token`` (a 503 while the store opens is asked again)."""
    headers = {"authorization": f"Bearer {token}"} if token is not None else {}
    for _ in range(300):
        status = httpx.get(f"{url}/v1/ready", headers=headers, timeout=10).status_code
        if status != 503:
            return status
        time.sleep(0.1)
    return status


def test_a_token_with_surrounding_whitespace_admits_its_bearer(sample_store: Path, tmp_path: Path) -> None:
    # what `printf 'abc123\n\n'` / `printf 'abc123 \n'` write: the reviewer's two files, and the variable
    (tmp_path / "blank_line").write_bytes(f"{TOKEN}\n\n".encode())
    (tmp_path / "space").write_bytes(f" {TOKEN} \r\n".encode())
    cases = {
        "blank line": ({TOKEN_FILE_ENV: str(tmp_path / "blank_line")}, ()),
        "spaces": ({TOKEN_FILE_ENV: str(tmp_path / "space")}, ()),
        "variable": ({TOKEN_ENV: f"{TOKEN} "}, ()),
        "--token": ({}, ("--token", f"\t{TOKEN}\n")),
    }
    for name, (env, args) in cases.items():
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = _serve(sample_store, port, env, *args, workers=1)
        try:
            wait_ready(url, timeout=60, path="/v1/health")  # public
            assert _status(url, TOKEN) == 200, name  # before: 401, the token could never match
            assert _status(url, None) == 401, name
            assert _status(url, TOKEN + "x") == 401, name
        finally:
            proc.terminate()
            proc.communicate(timeout=30)


def test_a_token_with_inner_whitespace_or_control_characters_stops_serve(
    sample_store: Path, tmp_path: Path
) -> None:
    (tmp_path / "inner").write_bytes(b"abc 123\n")
    (tmp_path / "ctrl").write_bytes(b"abc\x00123")
    (tmp_path / "lines").write_bytes(b"abc\n123\n")
    cases = {
        "inner": ({TOKEN_FILE_ENV: str(tmp_path / "inner")}, (), f"{TOKEN_FILE_ENV}={tmp_path / 'inner'}"),
        "ctrl": ({TOKEN_FILE_ENV: str(tmp_path / "ctrl")}, (), f"{TOKEN_FILE_ENV}={tmp_path / 'ctrl'}"),
        "lines": ({TOKEN_FILE_ENV: str(tmp_path / "lines")}, (), f"{TOKEN_FILE_ENV}={tmp_path / 'lines'}"),
        "variable": ({TOKEN_ENV: "abc\t123"}, (), TOKEN_ENV),
        "--token": ({}, ("--token", "abc 123"), "--token"),
    }
    procs = {
        name: _serve(sample_store, free_port(), env, *args, workers=1)
        for name, (env, args, _) in cases.items()
    }
    outs = _outputs(procs)  # before: they served (401 to every request)
    for name, proc in procs.items():
        out, named = outs[name], cases[name][2]
        assert proc.returncode == (2 if name == "--token" else 3), (name, proc.returncode, out)
        assert "Traceback" not in out and named in out and "whitespace or a control character" in out, (
            name,
            out,
        )
        assert "123" not in out.replace(str(tmp_path), ""), (name, out)  # the token is not shown
