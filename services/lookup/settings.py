"""Service settings from the environment (prefix ``FEATURECACHE_``), e.g. ``FEATURECACHE_AUTH_TOKEN``.

The token may instead come from a file (``FEATURECACHE_AUTH_TOKEN_FILE``, e.g. a Compose secret
mounted at ``/run/secrets/...``), so that it shows neither in ``ps`` nor in ``docker inspect``.

A ``FEATURECACHE_AUTH_TOKEN`` (or ``FEATURECACHE_AUTH_TOKEN_FILE``) that is set to whitespace only
is refused (serve exits 3), as ``--token ' '`` is (exit 2): a template whose secret did not
substitute served without auth (review R42c s52 #8). Set to the empty string, either means unset
(Compose's ``FEATURECACHE_AUTH_TOKEN: ""`` in deploy/compose.token.yaml). A token shorter than
:data:`SHORT_TOKEN_CHARS` characters is served with a WARNING, not refused.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from featurecache.auth import TOKEN_ENV, TOKEN_FILE_ENV, clean_token
from featurecache.auth import read_token_file as read_token_file  # re-exported
from featurecache.const import DEFAULT_MSA_DEPTH_CAP
from featurecache.errors import FeatureCacheError

log = logging.getLogger(__name__)

#: tokens shorter than this many characters are served with a WARNING (not refused: short example
#: tokens are in the docs and in users' scripts; ``openssl rand -hex 32`` gives 64)
SHORT_TOKEN_CHARS = 16


def _blank_but_set(value: str, name: str) -> None:
    """FeatureCacheError when ``value`` (the variable ``name``) is set to whitespace only: a template
    whose secret did not substitute; the empty string means unset (review R42c s52 #8)."""
    if value and not value.strip():
        raise FeatureCacheError(
            f"{name} is set but blank ({value!r}): give a token, or leave {name} unset (or empty) "
            "to serve without one"
        )


def warn_if_short(token: str, source: str) -> None:
    """A WARNING naming ``source`` (never the token) when ``token`` has fewer than
    :data:`SHORT_TOKEN_CHARS` characters."""
    if token and len(token) < SHORT_TOKEN_CHARS:
        log.warning("%s: the token is %d characters long: a short token can be guessed; use a long random "
                    "one (at least %d characters, e.g. `openssl rand -hex 32`)",
                    source, len(token), SHORT_TOKEN_CHARS)  # fmt: skip


def check_token_source(environ: Mapping[str, str] | None = None) -> None:
    """What ``featurecache serve`` checks before it listens: at most one of ``FEATURECACHE_AUTH_TOKEN``
    (or ``--token``) and ``FEATURECACHE_AUTH_TOKEN_FILE`` is set (non-empty), and the file, when
    given, holds a token; neither token has whitespace, a control character or a non-ASCII character
    inside (surrounding whitespace is dropped: ``featurecache.auth.clean_token``). Raises FeatureCacheError (the CLI
    exits 3: the environment) naming the variable, the file or both; ``featurecache serve`` refuses a
    bad ``--token`` value itself before this, as a usage error (exit 2). A variable set to
    whitespace only is refused too (empty: unset). A token shorter than :data:`SHORT_TOKEN_CHARS`
    characters is served, with a WARNING."""
    env = os.environ if environ is None else environ
    _blank_but_set(env.get(TOKEN_ENV, ""), TOKEN_ENV)
    _blank_but_set(env.get(TOKEN_FILE_ENV, ""), TOKEN_FILE_ENV)
    token = clean_token(env.get(TOKEN_ENV, ""), f"--token/{TOKEN_ENV}")
    path = env.get(TOKEN_FILE_ENV, "").strip()
    if not path:
        warn_if_short(token, f"--token/{TOKEN_ENV}")
        return
    if token:
        raise FeatureCacheError(
            f"both --token/{TOKEN_ENV} and {TOKEN_FILE_ENV}={path} are set: give the token one way"
        )
    warn_if_short(read_token_file(path), f"{TOKEN_FILE_ENV}={path}")


def check_settings(store_path: Path) -> Settings:
    """What ``featurecache serve`` checks before it starts its workers: every ``FEATURECACHE_*``
    setting is valid (a worker that cannot make its Settings never serves: one worker stopped with a
    pydantic traceback, several were restarted by uvicorn again and again). Raises FeatureCacheError
    (the CLI exits 3: the environment) naming each invalid variable, its value (never a token's;
    as repr when it holds a newline or another unprintable character) and the rule, on one line.
    Returns the settings (serve reads the connection limits from them)."""
    try:
        return Settings(store_path=store_path)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"])
            if not field:  # a rule over several settings: its message names them
                problems.append(error["msg"])
                continue
            shown = "" if "token" in field or "input" not in error else f"={_one_line(error['input'])}"
            problems.append(f"FEATURECACHE_{field.upper()}{shown}: {error['msg']}")
        raise FeatureCacheError(f"invalid setting: {'; '.join(problems)}") from None


def _one_line(value: object) -> str:
    """``value`` as typed when every character of it prints, else its repr (review RF1 s24 #5: a
    newline in a value split the one line of the invalid-setting error)."""
    text = str(value)
    return text if text.isprintable() else repr(text)


class Settings(BaseSettings):
    """Every knob of the lookup service. Limits answer 413/422 naming the limit when exceeded."""

    model_config = SettingsConfigDict(env_prefix="FEATURECACHE_", extra="ignore")

    store_path: Path = Field(
        default=Path("/store"), description="Store directory, opened read-only; reopened when it changes."
    )
    auth_token: SecretStr | None = Field(
        default=None,
        description="Bearer token required on every route but /v1/health and the API docs (/docs, "
        "/redoc, /openapi.json); /metrics needs it too. Empty or unset: no auth (unless auth_token_file); "
        "whitespace only: refused.",
    )
    auth_token_file: Path | None = Field(
        default=None,
        description="File holding the bearer token (e.g. a Compose secret, /run/secrets/<name>), read "
        "at startup; surrounding whitespace is dropped. Not together with auth_token (refused).",
    )
    allowed_hosts: str = Field(
        default="",
        description="Without a token: the Host names (comma-separated; '*.domain' for its subdomains; '*' "
        "for any) the data routes answer besides addresses, names without a dot and serve's --host; any "
        "other answers 400 (DNS rebinding: services.lookup.hosts). Not looked at with a token.",
    )
    max_batch_entries: int = Field(default=256, ge=1, description="Entries per POST /v1/entries:batch.")
    max_response_bytes: int = Field(
        default=256 * 2**20,
        ge=1,
        description="Bytes one data answer may carry, estimated before anything is read: an entry, a "
        "batch of entries or an entry's rows (their arrays, from the index), an MSA slice (its Arrow "
        "answer, from the rows and columns asked for). Over it: 413 naming it.",
    )
    max_page_size: int = Field(default=1000, ge=1, description="Rows per page of GET /v1/entries.")
    max_msa_rows: int = Field(default=DEFAULT_MSA_DEPTH_CAP, ge=1, description="Rows per MSA slice.")
    max_msa_cols: int = Field(default=10_000, ge=1, description="Columns per MSA slice.")
    max_msa_cells: int = Field(default=2**25, ge=1, description="rows × cols per MSA slice.")
    max_body_bytes: int = Field(
        default=2**20, ge=1, description="Request body size (JSON of a batch or an MSA slice)."
    )
    max_url_bytes: int = Field(
        default=64 * 2**10,
        ge=1,
        description="Bytes of a request's target (path and query): more answer 414 and close the connection, "
        "before the token is checked.",
    )
    max_header_bytes: int = Field(
        default=64 * 2**10,
        ge=1,
        description="Bytes of a request's header lines: more answer 431 and close the connection, before the "
        "token is checked.",
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        description="Connections (and requests in flight) one server process takes on; a request beyond "
        "answers 503 (uvicorn's limit_concurrency).",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a client has to send a request's head (from connecting, or from the first "
        "byte of a request on a kept-alive connection); a connection still without one is closed.",
    )
    store_retry_seconds: float = Field(
        default=5.0, ge=0, description="Wait between attempts to open a store that failed to open."
    )
    store_check_seconds: float = Field(
        default=1.0,
        ge=0,
        description="Longest wait before a rebuilt index is noticed and served (0: on every request). "
        "The store's root zarr.json is checked on every request whatever this is.",
    )

    @field_validator("auth_token", mode="before")
    @classmethod
    def _empty_token_is_none(cls, value: object) -> object:
        """Surrounding whitespace dropped (HTTP drops it from the header too); empty: None;
        whitespace only: refused (R42c s52 #8)."""
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, str):
            _blank_but_set(value, TOKEN_ENV)
            return clean_token(value, TOKEN_ENV) or None
        return value

    @field_validator("auth_token_file", mode="before")
    @classmethod
    def _empty_path_is_none(cls, value: object) -> object:
        if isinstance(value, str):
            _blank_but_set(value, TOKEN_FILE_ENV)
            if not value:
                return None
        return value

    @model_validator(mode="after")
    def _token_from_file(self) -> Settings:
        if self.auth_token_file is not None:
            if self.auth_token is not None:
                raise ValueError(
                    f"both {TOKEN_ENV} and {TOKEN_FILE_ENV}={self.auth_token_file} are set: give the token one way"
                )
            # its mode is looked at by serve (check_token_source), once, before any worker starts
            self.auth_token = SecretStr(read_token_file(self.auth_token_file, check_mode=False))
        return self

    def limits(self) -> dict[str, int]:
        """The limits a client may want to know (GET /v1/info, ``service.limits``)."""
        return {
            name: getattr(self, name)
            for name in (
                "max_batch_entries", "max_response_bytes", "max_page_size", "max_msa_rows",
                "max_msa_cols", "max_msa_cells", "max_body_bytes",
            )
        }  # fmt: skip
