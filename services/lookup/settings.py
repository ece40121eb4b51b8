"""Service settings from the environment (prefix ``FEATURECACHE_``), e.g. ``FEATURECACHE_AUTH_TOKEN``.

The token may instead come from a file (``FEATURECACHE_AUTH_TOKEN_FILE``, e.g. a Compose secret
mounted at ``/run/secrets/...``), so that it shows neither in ``ps`` nor in ``docker inspect``.

Rotating the token file needs no restart: every server process (each worker of ``serve --workers
N`` alike) looks at the file on every request that needs the token (one ``os.stat``) and reads it
again when it changed (:class:`TokenFile`), so all of them take the new token and refuse the old
one within a request of the change. A file that holds no token for a moment (``echo new > file``
empties it first; ``rm`` then a new file) or holds an invalid one keeps the token it held before in
service, with a WARNING once per change; the service never serves without the token because of it.
A worker that starts (or is restarted) while the file holds no token waits for one
(:data:`TOKEN_FILE_WAIT_SECONDS`) before it fails to start. Before this, each worker read the
file once when it started (review R42c s52 #5): after a rotation, a worker restarted by uvicorn
took the new token while the others kept the old, revoked one, and clients got 200s and 401s in turn.

A ``FEATURECACHE_AUTH_TOKEN`` (or ``FEATURECACHE_AUTH_TOKEN_FILE``) that is set to whitespace only
is refused (serve exits 3), as ``--token ' '`` is (exit 2): a template whose secret did not
substitute served without auth (review R42c s52 #8). Set to the empty string, either means unset
(Compose's ``FEATURECACHE_AUTH_TOKEN: ""`` in deploy/compose.token.yaml). A token shorter than
:data:`SHORT_TOKEN_CHARS` characters is served with a WARNING, not refused.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from featurecache.auth import TOKEN_ENV, TOKEN_FILE_ENV, clean_token, warn_if_readable_by_others
from featurecache.auth import read_token_file as read_token_file  # re-exported
from featurecache.const import DEFAULT_MSA_DEPTH_CAP
from featurecache.errors import FeatureCacheError

log = logging.getLogger(__name__)

#: tokens shorter than this many characters are served with a WARNING (not refused: short example
#: tokens are in the docs and in users' scripts; ``openssl rand -hex 32`` gives 64)
SHORT_TOKEN_CHARS = 16

#: seconds a server process that starts while its token file holds no token (being rewritten)
#: waits for one before it fails to start
TOKEN_FILE_WAIT_SECONDS = 5.0

#: a token file changed less than this long before it was read is read again on the next request
#: even when its (inode, mtime, size) look the same: two writes within one tick of the
#: filesystem's clock leave the same mtime (ns)
_RACY_NS = 2_000_000_000


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


Stamp = tuple[int, int, int, int]


class TokenFile:
    """The bearer token that the file ``path`` (``FEATURECACHE_AUTH_TOKEN_FILE``) holds now, as one
    server process serves it (review R42c s52 #5).

    :meth:`current` looks at the file (``os.stat``: its device, inode, mtime and size) and reads it
    again only when that changed (or was changed less than 2 s before it was last read: the same
    mtime can hide a second write), so a rotated token is taken on the next request, by every
    process alike, without a restart. A file that holds no valid token now (empty, gone, unreadable,
    whitespace inside) leaves the last good token in service: a WARNING naming the file and why, once
    per change of the file, never the token."""

    def __init__(self, path: Path | str, token: str, stamp: Stamp | None, settled: bool) -> None:
        self.path = str(path)
        self.source = f"{TOKEN_FILE_ENV}={path}"
        self._token = token.encode()
        self._stamp = stamp  # of the file as last read (or found unreadable)
        self._settled = settled  # False: read it again even when its stamp is the same
        self._warned: object = None  # the state of the file last warned about

    @classmethod
    def read(cls, path: Path | str, wait: float = TOKEN_FILE_WAIT_SECONDS) -> TokenFile:
        """The file's token as a process starts: FeatureCacheError naming the file when it holds none
        (:func:`read_token_file`'s) after ``wait`` seconds (a WARNING says it waits; a file being
        rewritten is empty or gone for a moment: the worker that uvicorn restarts then must not fail)."""
        deadline = time.monotonic() + wait
        waiting = False
        while True:
            try:
                stamp, token, settled = _read_stamped(path)
                break
            except FeatureCacheError as exc:
                if time.monotonic() >= deadline:
                    raise
                if not waiting:
                    waiting = True
                    log.warning("%s; waiting up to %g s for the file to hold a token", exc, wait)
                time.sleep(0.05)
        if waiting:
            log.info("%s: the token file holds a token: serving it", f"{TOKEN_FILE_ENV}={path}")
        return cls(path, token, stamp, settled)

    def current(self) -> bytes:
        """The token to require now (ASCII bytes): the file's, else the last good one."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self._stamp = None  # read it when it is back, whatever its stamp (an inode is reused)
            self._bad(
                ("stat", exc.errno), f"{self.source}: cannot read the token file ({exc.strerror or exc})"
            )
            return self._token
        stamp = _stamp(st)
        if stamp == self._stamp and self._settled:
            return self._token
        try:
            stamp, token, self._settled = _read_stamped(self.path)
        except FeatureCacheError as exc:
            # read again when it changes (or while it may change within the same mtime)
            self._stamp, self._settled = stamp, time.time_ns() - stamp[2] > _RACY_NS
            self._bad(stamp, str(exc))
            return self._token
        self._stamp = stamp
        self._warned = None
        if token.encode() != self._token:
            self._token = token.encode()
            log.info("%s: the token file changed: serving the token it holds now (the one before is refused)",
                     self.source)  # fmt: skip
            warn_if_short(token, self.source)
            with contextlib.suppress(OSError):
                warn_if_readable_by_others(self.path)
        return self._token

    def _bad(self, state: object, reason: str) -> None:
        if state != self._warned:
            self._warned = state
            log.warning("%s: still serving the token it held before", reason)


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _read_stamped(path: Path | str) -> tuple[Stamp, str, bool]:
    """(the file's stamp before it was read, its token, whether it was changed long enough before
    to trust the stamp). FeatureCacheError naming the file when it holds no valid token."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise FeatureCacheError(
            f"{TOKEN_FILE_ENV}={path}: cannot read the token file ({exc.strerror or exc})"
        ) from None
    token = read_token_file(path, check_mode=False)  # read after the stat: as new as the stamp, or newer
    return _stamp(st), token, time.time_ns() - st.st_mtime_ns > _RACY_NS


class FileToken(str):
    """A token read from ``FEATURECACHE_AUTH_TOKEN_FILE``: the token (a str, as ``create_app`` hands
    it to the middleware) with its :class:`TokenFile` (``file``), by which the middleware requires
    the token the file holds now."""

    file: TokenFile


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
        "at startup and again whenever it changes (rotating it needs no restart; while it holds no "
        "valid token the one before stays in service); surrounding whitespace is dropped. Not "
        "together with auth_token (refused).",
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
            # its mode is looked at by serve (check_token_source), once, before any worker starts;
            # then by each process when the token changes (TokenFile.current)
            file = TokenFile.read(self.auth_token_file)
            token = FileToken(file.current().decode())
            token.file = file
            self.auth_token = SecretStr(token)
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
