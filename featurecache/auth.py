"""The lookup service's bearer token, as the server (``featurecache serve``) and the client
(:class:`~featurecache.client.http.LookupClient`) both read it: from ``FEATURECACHE_AUTH_TOKEN``
(or ``--token``), else from the file ``FEATURECACHE_AUTH_TOKEN_FILE`` names.

One rule for both sides: surrounding whitespace is not the token's (HTTP strips it from a header
value, RFC 7230 §3.2.4, so a token ending in a space or a second newline could never match), and a
token with whitespace or a control character inside is refused (no header can carry it), as is a
token with a non-ASCII character (a header value is bytes: httpx sends str headers as ASCII and
refuses anything else, curl sends the terminal's UTF-8, a server may read latin-1, so one token
would be three different byte strings).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from featurecache.errors import FeatureCacheError

TOKEN_ENV = "FEATURECACHE_AUTH_TOKEN"
TOKEN_FILE_ENV = "FEATURECACHE_AUTH_TOKEN_FILE"

log = logging.getLogger(__name__)

#: (path, mode) of the token files this process has warned about (once each)
_warned_modes: set[tuple[str, int]] = set()


def clean_token(token: str, source: str) -> str:
    """``token`` less surrounding whitespace ("" when nothing else is left). FeatureCacheError naming
    ``source`` (never the token) when whitespace, a control character or a non-ASCII character is
    left inside it."""
    token = token.strip()
    for i, ch in enumerate(token):
        if ch.isspace() or unicodedata.category(ch) == "Cc":
            raise FeatureCacheError(
                f"{source}: the token holds whitespace or a control character ({ch!r} at position {i}), "
                "which no HTTP header can carry: give the token without it"
            )
        if not ch.isascii():  # the character itself is not shown: it is part of a secret
            raise FeatureCacheError(
                f"{source}: the token holds a non-ASCII character (at position {i}), which HTTP clients "
                "cannot send in a header as the same bytes: use a token of ASCII characters only "
                "(e.g. `openssl rand -hex 32`)"
            )
    return token


def read_token_file(path: Path | str, *, check_mode: bool = True) -> str:
    """The bearer token in the file ``path``: its text less surrounding whitespace (the newline
    ``echo`` or an editor leaves, a trailing space, a blank last line). FeatureCacheError naming the file
    when it cannot be read, holds no token (empty, or only whitespace) or holds whitespace or a
    control character inside the token. ``check_mode``: a WARNING (once per file and mode in a
    process) when its group or others may read the token it holds (:func:`warn_if_readable_by_others`)."""
    source = f"{TOKEN_FILE_ENV}={path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise FeatureCacheError(f"{source}: cannot read the token file ({reason})") from None
    token = clean_token(text, source)
    if not token:
        raise FeatureCacheError(f"{source}: the token file is empty")
    if check_mode:  # a token that is taken: a file refused says only why it is refused
        with contextlib.suppress(OSError):
            warn_if_readable_by_others(path)
    return token


def warn_if_readable_by_others(path: Path | str) -> None:
    """A WARNING naming the token file ``path`` and its mode when its group or others may read it
    (review R28d s46 #8: a 0644 token file was taken silently). Not an error: Compose secrets and
    bind mounts often come 0444, where the directory or the container is what keeps others out.
    OSError when the file cannot be looked at."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if not mode & (stat.S_IRGRP | stat.S_IROTH) or (str(path), mode) in _warned_modes:
        return
    _warned_modes.add((str(path), mode))
    log.warning("%s=%s: the token file's mode is %04o: %s can read the token; make it readable by its owner "
                "only (chmod 600 %s)", TOKEN_FILE_ENV, path, mode,
                "its group and others" if mode & stat.S_IROTH and mode & stat.S_IRGRP
                else "others" if mode & stat.S_IROTH else "its group", path)  # fmt: skip


def token_from_environment(environ: Mapping[str, str] | None = None) -> str | None:
    """The client's default token: ``FEATURECACHE_AUTH_TOKEN`` when set (non-blank), else the
    file ``FEATURECACHE_AUTH_TOKEN_FILE`` names (when set), else None. Same rules and errors as
    :func:`clean_token` / :func:`read_token_file`."""
    env = os.environ if environ is None else environ
    token = clean_token(env.get(TOKEN_ENV, ""), TOKEN_ENV)
    if token:
        return token
    path = env.get(TOKEN_FILE_ENV, "").strip()
    return read_token_file(path) if path else None


def redact_url(url: str) -> str:
    """``url`` as messages, logs, reprs and a training run's records show it: without the
    ``user:password@`` of its authority, with each value of its query masked and its fragment
    masked (``https://u:secret@h:9/x?token=abc`` → ``https://h:9/x?token=***``): a proxy in front
    of the service may take a token in the query (``?access_token=``; review R42c s52 #9). A query
    part without ``=`` is masked whole (it may be the secret itself), an empty value stays empty.
    A URL typed without its scheme (``u:pw@h:9``) is redacted alike. Only for display: a client
    sends the URL as given. Redacting a redacted URL changes nothing."""
    bare = "://" not in url and not url.startswith("//")
    try:
        parts = urlsplit(f"//{url}" if bare else url)
    except ValueError:  # e.g. "http://[::1" (an unclosed bracket): cut by hand, not shown as given
        return _redact_by_hand(url)
    query = "&".join(map(_mask_query_part, parts.query.split("&"))) if parts.query else ""
    shown = parts._replace(netloc=parts.netloc.rpartition("@")[2], query=query,
                           fragment="***" if parts.fragment else "")  # fmt: skip
    if shown == parts:
        return url
    text = urlunsplit(shown)
    return text[2:] if bare and text.startswith("//") else text


def _mask_query_part(part: str) -> str:
    """``key=***`` of ``key=value``; ``***`` of a part without ``=``; an empty value or part as it is."""
    key, eq, value = part.partition("=")
    if eq:
        return f"{key}=***" if value else part
    return "***" if part else part


def _redact_by_hand(url: str) -> str:
    """:func:`redact_url` of a URL ``urlsplit`` refuses: the part up to the first ``?`` or ``#``
    (masked whole after it) less what its authority holds up to its last ``@``."""
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=len(url))
    head, tail = url[:cut], url[cut:]
    scheme, sep, rest = head.rpartition("://") if "://" in head else ("", "", head)
    authority, slash, path = rest.partition("/")
    return f"{scheme}{sep}{authority.rpartition('@')[2]}{slash}{path}{tail[:1] + '***' if tail else ''}"
