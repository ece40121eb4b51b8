"""A token file its group or others can read is taken with a WARNING naming the file and its mode
(review R28d s46 #8: a 0644 token file was taken silently); not an error (Compose secrets and bind
mounts often come 0444)."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from test_token_file import TOKEN, TOKEN_FILE_ENV, _serve

from featurecache.auth import read_token_file
from services.lookup.server import free_port, wait_ready


@pytest.mark.parametrize(("mode", "who"), [(0o644, "its group and others"), (0o604, "others"),
                                           (0o640, "its group"), (0o444, "its group and others")])  # fmt: skip
def test_a_token_file_others_can_read_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, who: str
) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    token.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="featurecache.auth"):
        assert read_token_file(token) == TOKEN
        assert read_token_file(token) == TOKEN  # once a file and mode
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    message = warning.getMessage()
    assert f"{TOKEN_FILE_ENV}={token}" in message and f"{mode:04o}" in message and who in message
    assert TOKEN not in message


def test_an_owner_only_token_file_is_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    for mode in (0o600, 0o400, 0o620):
        token.chmod(mode)
        with caplog.at_level(logging.WARNING, logger="featurecache.auth"):
            assert read_token_file(token) == TOKEN
    assert not caplog.records


def test_serve_with_two_workers_warns_once_and_serves(sample_store: Path, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o644)
    port = free_port()
    proc = _serve(sample_store, port, {TOKEN_FILE_ENV: str(token)})
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=60, token=TOKEN)
        r = httpx.get(f"http://127.0.0.1:{port}/v1/info", headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert out.count("the token file's mode is 0644") == 1, out
    assert TOKEN not in out
