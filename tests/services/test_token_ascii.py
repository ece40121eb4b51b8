"""A bearer token with a non-ASCII character is refused where it enters (review R2 s24 #3).

A header value is bytes, and the same token becomes different bytes on different clients: httpx
(``LookupClient``) refuses to encode it at all (a bare ``UnicodeEncodeError`` on the first request),
curl sends the terminal's UTF-8, a proxy or server may read latin-1. So ``featurecache serve``
refuses it at startup (``--token``: exit 2, a usage error; the variable and the file: exit 3, as for
a token with whitespace inside), and ``LookupClient`` refuses it when it is made: one line naming
where the token came from, never the token. Real ``featurecache serve`` processes (for the
reviewer's token; the other tokens' refusals, which come before serve starts any work, run the
same command in this process: tests.conftest.cli_in_process), real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from featurecache.auth import clean_token, token_from_environment
from featurecache.client.http import LookupClient
from featurecache.errors import FeatureCacheError
from services.lookup.server import free_port
from tests.conftest import cli_in_process
from tests.services.test_token_file import TOKEN_ENV, TOKEN_FILE_ENV, _outputs, _serve

SECRET = "geheim"  # the ASCII part of every token here: it must never be shown
TOKENS = {
    "latin-1": f"{SECRET}-pässwörd",  # what the reviewer gave (latin-1 would at least fit one byte)
    "beyond latin-1": f"{SECRET}-пароль",
    "emoji": f"{SECRET}🔑",
}
#: the kind whose refusals run in real ``featurecache serve`` processes (the others: in this process)
REAL_PROCESSES = "latin-1"


def _one_error_line(out: str) -> str:
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out[-3000:]
    return lines[0]


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_serve_refuses_a_non_ascii_token_from_each_source(
    sample_store: Path, tmp_path: Path, kind: str
) -> None:
    token = TOKENS[kind]
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n", encoding="utf-8")
    cases = {  # name: (environment, arguments, the source the message names, exit status)
        "--token": ({}, ("--token", token), "--token", 2),
        "variable": ({TOKEN_ENV: token}, (), TOKEN_ENV, 3),
        "file": ({TOKEN_FILE_ENV: str(token_file)}, (), f"{TOKEN_FILE_ENV}={token_file}", 3),
    }
    if kind == REAL_PROCESSES:
        procs = {
            name: _serve(sample_store, free_port(), env, *args, workers=1)
            for name, (env, args, _, _) in cases.items()
        }
        outs = _outputs(procs)  # before: each of them served (and no client could send the token)
        returncodes = {name: proc.returncode for name, proc in procs.items()}
    else:  # the same command line and settings, refused in this process (stdout, then stderr)
        unset: dict[str, str | None] = {TOKEN_ENV: None, TOKEN_FILE_ENV: None}
        serve = ("serve", str(sample_store), "--port", str(free_port()), "--workers", "1")
        runs = {
            name: cli_in_process(*serve, *args, env={**unset, **env})
            for name, (env, args, _, _) in cases.items()
        }
        outs = {name: run.stdout + run.stderr for name, run in runs.items()}
        returncodes = {name: run.returncode for name, run in runs.items()}
    for name in cases:
        _, _, source, status = cases[name]
        out = outs[name]
        assert returncodes[name] == status, (name, returncodes[name], out[-3000:])
        line = _one_error_line(out)
        assert source in line and "non-ASCII" in line, (name, line)
        assert SECRET not in line.replace(str(tmp_path), ""), (name, line)  # the token is not shown
        assert not any(ch in line for ch in token if not ch.isascii()), (name, line)


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_the_client_refuses_a_non_ascii_token_when_it_is_made(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = TOKENS[kind]
    # before: made without complaint; its first request raised a bare UnicodeEncodeError
    with pytest.raises(FeatureCacheError, match=r"^LookupClient token: .*non-ASCII") as given:
        LookupClient("http://127.0.0.1:9", token=token, retries=0)
    assert SECRET not in str(given.value)

    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    monkeypatch.setenv(TOKEN_ENV, token)
    with pytest.raises(FeatureCacheError, match=rf"^{TOKEN_ENV}: .*non-ASCII") as from_env:
        LookupClient("http://127.0.0.1:9", retries=0)
    assert SECRET not in str(from_env.value)

    token_file = tmp_path / "token"
    token_file.write_text(token, encoding="utf-8")
    monkeypatch.delenv(TOKEN_ENV)
    monkeypatch.setenv(TOKEN_FILE_ENV, str(token_file))
    with pytest.raises(FeatureCacheError, match=r"non-ASCII") as from_file:
        LookupClient("http://127.0.0.1:9", retries=0)
    assert str(from_file.value).startswith(f"{TOKEN_FILE_ENV}={token_file}: ")
    assert SECRET not in str(from_file.value).replace(str(tmp_path), "")


def test_ascii_punctuation_stays_a_valid_token() -> None:
    # the rule is about bytes, not about a token alphabet: RFC 6750's token68 and more still pass
    for token in ("abc-._~+/=", "p@ss:w0rd!#$%&*", "x" * 200):
        assert clean_token(f" {token}\n", "--token") == token
    assert token_from_environment({TOKEN_ENV: "  s3cret~\n"}) == "s3cret~"
