"""``LookupClient``: the local reader's interface over the lookup service (``featurecache serve``).

Same methods and return types as :class:`featurecache.store.reader.LocalStore` (the conformance
suite in tests/conformance runs both); arrays arrive as Arrow IPC and are numpy views into the
response body (read-only: copy before writing into one). Connections are pooled (one
``httpx.Client``, thread-safe); connection errors and 502/503/504 answers (the service restarting,
or its store being rebuilt under it) are retried for up to ``retry_budget_s`` seconds (30 by
default: ``featurecache serve --workers 2`` takes ~7 s to listen again after a restart) with capped
exponential backoff and jitter; 4xx and 500 answers raise at once with the server's explanation
(the lookup service answers 500 for data that cannot be read from an unchanged store: asking again
cannot help):

* 404 → :class:`~featurecache.errors.NotFound` (a ``KeyError``)
* 401/403 → :class:`~featurecache.errors.AuthenticationError`
* 400/413/422 → :class:`~featurecache.errors.InvalidRequest` (a ``ValueError``); ``.limit`` names
  the exceeded limit on 413, ``.maximum`` its value and ``.got`` the request's
* 500 → :class:`~featurecache.errors.ServiceError` (a ``ConnectionError``): this request failed,
  or the service's store is of a format it does not read (the service must be upgraded)
* retries exhausted → :class:`ServiceUnavailable` when the service could not be reached, did not
  answer within ``timeout`` or answered 502/503/504 (the service as a whole is down or hung)

The first contact is short: until a lookup service has answered the client once, a call retries
for :data:`DEFAULT_FIRST_CONTACT_S` seconds (``first_contact_s``), not the whole budget, and a
connection may take that long to open: a wrong host or port, or no ``featurecache serve`` running,
fails in ~2 s with :class:`ServiceUnavailable` naming the URL, the reason (connection refused, host
name that does not resolve, no connection within the time, another server answering there) and what
to check. An answer that does not look like the lookup service's (no index header, not Arrow or
JSON, or a 4xx) is checked against ``GET /v1/health`` once: another server there (a file server, a
proxy's error page, a redirect) raises ServiceUnavailable saying so; so does the service's own 404 to
a first call when ``GET /v1/health`` below the URL is a 404 too (a URL with a path the service has no
routes under, ``http://host:8000/notthere``), naming what ``/v1/health`` answers at the server's
root. A client that has been answered passes that on to its copies (:meth:`LookupClient.settings`,
e.g. a loader worker's client), whose first calls then have the whole budget: the service is
restarting, not absent. A server that accepts the connection but does not answer gets one
``timeout`` on first contact, without a retry.

A service that accepts connections but never answers (hung, stopped) is detected by the read
timeout: a timed-out call is retried only :data:`TIMEOUT_RETRIES` times. No retry starts after
``retry_budget_s``, so a call gives up within ``retry_budget_s`` plus one attempt (with the defaults
about 30 + 20 s), before the training client's 60 s per-sample deadline
(``FeatureDataset(deadline_s=...)`` warns about a client whose budget does not fit it).

Snapshots: the client fetches an index table once and keeps it (``ids``, ``entries``, ``msas``,
...), as :func:`featurecache.open_store` reads the index once: entries an extension adds appear in
``ids`` after :meth:`LookupClient.refresh`. Two misses refresh on their own, once: ``row_of`` of an
id the snapshot lacks, and an MSA the service has with another shape than the snapshot says (a
store rebuilt, e.g. with another ``--msa-depth`` or other MSA files): the selection is then resolved
again against the new shape. ``LookupClient.generation`` counts the refreshes, so that what callers
derived from the old tables (the training client's MSA row plans) is derived again.

The service also names the index that answered each request (header ``x-featurecache-index``,
:data:`INDEX_HEADER`): the client remembers the id its tables are of, and an answer from a newer
index refreshes it, once per new id, whatever the request (a rebuild that changes no MSA shape the
client asks for, e.g. MSAs added where every chain had depth 1, is seen too). An answer from an
older index (a worker of ``--workers N`` that has not looked at the store again yet) never
refreshes back to it, and its table is not kept: it is fetched again. Only when the service has
answered from older indexes alone for :data:`OLDER_INDEX_S` seconds (the store replaced by an older
copy or an earlier build) does the client take that index; :meth:`LookupClient.refresh`, called by
the user, takes whatever index answers next at once. A service that sends no such header (older than this
client) is followed as before, by the two misses above.

The token defaults to ``FEATURECACHE_AUTH_TOKEN``, else the file ``FEATURECACHE_AUTH_TOKEN_FILE``
names (as ``featurecache serve`` reads them: surrounding whitespace dropped, whitespace or control
characters inside refused; :mod:`featurecache.auth`). A client given to the training client travels
to loader worker processes as its :meth:`LookupClient.settings` (token, timeouts, retries), so each
worker's client is the same client with its own connections.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import os
import random
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import numpy as np
import pyarrow as pa

try:
    import httpx
except ModuleNotFoundError as exc:  # the bare error named no extra (review R28a s46 #3)
    raise ModuleNotFoundError(
        f"featurecache.client.http needs httpx (module {exc.name} is not installed): "
        "pip install 'featurecache[http]'",
        name=exc.name,
    ) from exc

from featurecache.auth import TOKEN_ENV as TOKEN_ENV  # re-exported: tests and callers import it here
from featurecache.auth import clean_token, redact_url, token_from_environment
from featurecache.errors import (
    AuthenticationError,
    InvalidRequest,
    NotFound,
    ServiceError,
    ServiceUnavailable,
)
from featurecache.store import arrow_io
from featurecache.store.base import ENTRY_META_SKIP, FeatureReader
from featurecache.store.layout import ENTRY_GROUPS, GROUP_OFFSETS
from featurecache.store.msa import _selection as _local_selection  # one rule for both readers
from featurecache.store.reader import merge_ranges, parse_array_selection
from featurecache.store.versions import VERSIONS_KEY, FeaturizerChanged, version_set, versions_of
from featurecache.types import Entry, MSABlock

log = logging.getLogger(__name__)
#: the retry backoff's jitter: a generator of the client's own, so that retries draw nothing from the
#: trainer's seeded ``random`` stream (review R31c s47 #1); reseeded in a forked child, as ``random``'s
#: own is, so DataLoader workers retrying together do not jitter alike
_JITTER = random.Random()
os.register_at_fork(after_in_child=_JITTER.seed)


class _CutShort(Exception):
    """An answer whose status the service sent and whose body it cut short (``retry_cut=False``)."""


#: times a table fetched while :meth:`LookupClient.refresh` ran is fetched again before it is
#: returned uncached (a refresh in a loop must not hold a fetch up forever)
_TABLE_REFETCHES = 3
DEFAULT_BATCH_ENTRIES = 256
#: an MSA selection longer than this goes in a ``:slice`` POST body instead of a GET query: httpx
#: checks and encodes a query one character at a time in Python (~0.4 ms for a 1.7k-character row
#: spec, the median of a sample's random rows) where the JSON body costs ~0.05 ms, and the service
#: spends the same CPU on either (review R27d s45 #3); a short one stays a GET, as cheap both ways
#: and readable in access logs
_MAX_QUERY_CHARS = 256
#: answers that say the service as a whole cannot serve now (retried; vs a 500 on one request)
_UNAVAILABLE_STATUS = frozenset({502, 503, 504})
_NO_LIMIT = 2**62  # a limit the service does not advertise
#: retries after a timeout: a service that let one call time out is hung or overloaded, and each
#: retry waits a full ``timeout`` again
TIMEOUT_RETRIES = 1
#: seconds after a ``row_of`` refresh that did not find its id before a miss refreshes again
MIN_REFRESH_S = 1.0
#: the service's header naming the index that answered (``services.lookup.state.INDEX_HEADER``)
INDEX_HEADER = "x-featurecache-index"
#: seconds of answers from indexes older than the client's alone (none from its own) after which the
#: client takes the service's index as it is (the store replaced by an older copy or an earlier
#: build, not a swap). In a swap some worker answers from the client's own index, which restarts the
#: count, so this can be short; until it passes, tables are fetched again (within ``retry_budget_s``)
OLDER_INDEX_S = 3.0
#: seconds a call keeps retrying a service that refuses connections or answers 502/503/504: longer
#: than ``featurecache serve`` takes to restart (measured 3.7 s with 1 worker, 7.2 s with 2), and,
#: with one more attempt of ``timeout`` (20 s), shorter than FeatureDataset's 60 s sample deadline
DEFAULT_RETRY_BUDGET_S = 30.0
#: seconds a call retries a service that has never answered the client (a wrong URL, no service
#: running: waiting the restart budget for it only delays the error), and the longest a first
#: connection may take to open
DEFAULT_FIRST_CONTACT_S = 2.0
#: the lookup service's liveness route: asked once when a first answer does not look like the service's
_HEALTH_PATH = "/v1/health"
#: the service's light route: its version, auth, limits and tables (never ``/v1/info``, which also
#: carries the store's sizes), and with :data:`_SERVICE_QUERY` the featurizer versions of its index
SERVICE_PATH = "/v1/service"
#: what the client asks ``/v1/service`` for; a service older than this client ignores the query and
#: answers without the versions (then unknown)
_SERVICE_QUERY = {VERSIONS_KEY: "true"}
#: the columns of an index table that the client's own lookups read (``row_of``, ``ids``,
#: ``row_count``, ``stored_fields``; an MSA's shape, :meth:`LookupClient.msa_shapes`, and its sources,
#: ``client.assemble._pairing_only_sources``): all a training
#: client's loader worker reads of the index, asked for alone (``?columns=``) unless the client holds
#: the whole table. At 200k entries the ``entries`` table is ~75 MB, these columns of it ~11 MB
LOOKUP_COLUMNS: dict[str, tuple[str, ...]] = {
    "entries": ("id", "part", *(count for _, count in GROUP_OFFSETS.values())),
    "msas": ("key", "depth", "length", "sources"),  # sources: client.assemble's pairing-only rows
}
#: entries whose index row and chains rows (the attrs of an answer about the entry) a client that
#: does not hold the whole ``entries`` / ``chains`` tables keeps, for :meth:`LookupClient.entry_meta`
#: and :meth:`LookupClient.entry_chains` (the crop-first path asks both after its read of the entry)
_ATTRS_KEPT = 64
#: what ``/v1/service``'s ``capabilities`` holds when the service answers ``POST /v1/entries/{id}:rows``
#: (``services.lookup.payloads.ENTRY_ROWS``); a service older than that route does not list it
ROWS_CAPABILITY = "entry_rows"


class LookupClient(FeatureReader):
    """Random access to a store served by ``featurecache serve``.

    ``url``: the service root (``http://host:8000``); ``token``: bearer token (default
    ``$FEATURECACHE_AUTH_TOKEN``, else the contents of the file ``$FEATURECACHE_AUTH_TOKEN_FILE``;
    surrounding whitespace dropped; FeatureCacheError naming the source for a token with whitespace
    or a control character inside, or a file that cannot be read or is empty); ``timeout``: seconds the service may take to start answering
    (and between bytes of the answer); ``connect_timeout``: seconds to open a connection;
    ``retry_budget_s``: seconds after a call's first attempt during which a connection error or a
    502/503/504 answer is retried (no retry starts later; 0: none); ``retries``: at most this many
    extra attempts within the budget (None: as many as fit; after a timeout at most
    :data:`TIMEOUT_RETRIES`), sleeping ``backoff * 2**attempt`` (capped at ``max_backoff``, then
    ±50 % jitter; at least a 503's ``retry-after`` up to ``max_backoff``) in between;
    ``max_connections``: size of the connection pool (match the number of threads using it);
    ``first_contact_s``: until the service has answered this client once, calls retry for this long
    instead of ``retry_budget_s`` (if shorter) and a connection may take at most this long to open
    (raise it to wait for a service that is starting at the same time); ``answered``: the service
    has answered this client (or the client it is a copy of) before: a worker's client is a copy
    (:meth:`settings`), and its first calls have the whole ``retry_budget_s``. ``snapshot``: (index
    id, :data:`LOOKUP_COLUMNS` tables of that index) that the client this one is a copy of holds
    (:meth:`lookup_snapshot`): the copy starts on them instead of fetching them (a newer index in
    an answer refreshes it, as any client).

    Credentials: a URL's ``user:password@`` (a proxy's HTTP Basic auth; percent-decoded, as a URL's
    userinfo is) is sent as ``Authorization: Basic``, never in a request URL (httpx logs those at
    INFO). A token or URL credentials sent over ``http://`` to a host other than this machine
    (``localhost``, 127.0.0.0/8, ``::1``) travel in clear text: the client logs one WARNING saying
    so, once per process and server (``cleartext_warned``: said already, by the client this one is
    a copy of: a loader worker's client does not say it again).

    Featurizer versions: the client learns those of the store it first reads (``/v1/service``'s
    ``featurizer_versions``, once per index, in the same call that brings the limits; never
    ``/v1/info``; a service that does not tell them: unknown, not compared, said at DEBUG;
    ``expect_featurizer`` / ``expect_index``: already learned, by the client this one is a copy
    of). When the service moves to an index whose versions differ (its
    store rebuilt or extended by another featurecache), the client logs one WARNING naming the URL
    and both versions; ``on_featurizer_change="raise"`` (``featurecache train``) then raises
    :class:`~featurecache.store.versions.FeaturizerChanged` from that call and every later one.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 20.0,
        connect_timeout: float = 5.0,
        retries: int | None = None,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
        backoff: float = 0.2,
        max_backoff: float = 2.0,
        max_connections: int = 32,
        first_contact_s: float = DEFAULT_FIRST_CONTACT_S,
        answered: bool = False,
        on_featurizer_change: str = "warn",
        expect_featurizer: Sequence[str] | None = None,
        expect_index: str | None = None,
        snapshot: tuple[str, Mapping[str, pa.Table]] | None = None,
        cleartext_warned: bool = False,
    ) -> None:
        if on_featurizer_change not in ("warn", "raise"):
            raise InvalidRequest(
                f"LookupClient: on_featurizer_change must be 'warn' or 'raise', got {on_featurizer_change!r}"
            )
        if retries is not None and retries < 0:
            raise InvalidRequest(f"LookupClient: retries must be >= 0 or None, got {retries}")
        if not retry_budget_s >= 0:
            raise InvalidRequest(f"LookupClient: retry_budget_s must be >= 0, got {retry_budget_s}")
        if not first_contact_s > 0:
            raise InvalidRequest(f"LookupClient: first_contact_s must be > 0, got {first_contact_s}")
        self.url = url.rstrip("/")
        self.shown_url = redact_url(self.url)  # for messages, logs and repr: no credentials
        self.token = (
            (clean_token(token, "LookupClient token") or None)
            if token is not None
            else token_from_environment()
        )
        if self.token is not None and "@" in urlsplit(self.url).netloc:
            # httpx sends a URL's user:password as HTTP Basic auth, in place of the bearer token: the
            # service answered "invalid bearer token" for a token that was never sent (review R17 s40 #1)
            raise InvalidRequest(
                f"LookupClient {self.shown_url}: the URL holds a user name and password, which are sent as "
                "HTTP Basic auth in place of the bearer token: give the token or the URL's credentials, not both"
            )
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.retry_budget_s = retry_budget_s
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_connections = max_connections
        self.first_contact_s = first_contact_s
        self._answered = bool(answered)  # the lookup service has answered: restarts get the whole budget
        self._lock = threading.Lock()
        self._tables: dict[str, pa.Table] = {}
        self._generation = 0  # bumped by refresh(): a table fetched across it is not kept
        self._row: tuple[pa.Table, dict[str, int]] | None = None  # the entries table it indexes
        self._service: dict[str, Any] | None = None
        self._msa_shape: dict[str, tuple[int, int]] | None = None
        self._component_table: Any = None
        self._part_fields: dict[str, dict[str, tuple[str, ...]]] = {}  # part → group → fields it stores
        self._rows_gone = False  # POST …:rows answered 404/405 from a service without it (this snapshot)
        self._missed_at = -math.inf  # when row_of last refreshed and still missed its id
        self._index: str | None = None  # the service's id of the index the tables are of (INDEX_HEADER)
        self._left: set[str] = set()  # ids of the indexes the client refreshed away from
        self._older_since: float | None = None  # first answer from an older index since one from its own
        self.on_featurizer_change = on_featurizer_change
        #: the featurizer versions of the data the client started on, and the index they were learned at
        self.expect_featurizer = tuple(expect_featurizer) if expect_featurizer is not None else None
        self.expect_index = expect_index
        self._versions_doc: dict[str, Any] | None = None  # store_versions of the index the client holds
        self._versions_asked = False  # the service was asked them for that index (None: it told none)
        self._unchecked: str | None = None  # an index whose featurizer versions are still to be checked
        self._checking = False
        self._featurizer_changed: str | None = None  # the message, once the versions changed ("raise")
        #: entry id → its index row and chains rows, of the snapshot the client holds (:meth:`_entry_attrs`)
        self._attrs: OrderedDict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = OrderedDict()
        if snapshot is not None:  # the client this one is a copy of held these (lookup_snapshot())
            index, tables = snapshot
            self._index = index
            self._tables = {_lookup_key(name): t for name, t in tables.items()}
            if index != expect_index:
                self._unchecked = index  # its featurizer versions: checked with the first answer
        self.cleartext_warned = bool(cleartext_warned)
        self._warn_cleartext()
        self._http = self._new_http()
        self._pid = os.getpid()

    # ------------------------------------------------------------------ transport
    def _warn_cleartext(self) -> None:
        """One WARNING (per process and server; none in a copy of a client that gave it) when the
        token or the URL's credentials go over plain ``http://`` to a host that is not this machine:
        anyone on the network path can read them (review R42c s52 #6). Said before any connection."""
        url = httpx.URL(self.url)
        basic = bool(url.username or url.password)
        if url.scheme != "http" or not (self.token or basic) or _is_loopback(url.host):
            return
        origin = _origin(_without_userinfo(self.url)).lower()
        if self.cleartext_warned or origin in _cleartext_warned:
            self.cleartext_warned = True
            return
        _cleartext_warned.add(origin)
        self.cleartext_warned = True
        what = ("the URL's user name and password (HTTP Basic auth) are" if basic
                else "the bearer token is")  # fmt: skip
        log.warning("LookupClient %s: %s sent over plain http:// to %s, a host other than this machine, "
                    "in clear text: anyone on the network path can read %s (and the data). Use an "
                    "https:// URL: put a reverse proxy with TLS in front of `featurecache serve` "
                    "(deploy/README.md), or reach it through an SSH tunnel to a 127.0.0.1 port",
                    self.shown_url, what, url.host, "them" if basic else "it")  # fmt: skip

    def _new_http(self) -> httpx.Client:
        headers = {"accept": f"{arrow_io.MEDIA_TYPE}, application/json"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        url = httpx.URL(self.url)
        # a URL's user:password, sent as httpx would send it from the URL (percent-decoded, Basic),
        # kept out of the base URL: httpx logs every request's URL at INFO (review R42c s52 #2)
        auth = httpx.BasicAuth(url.username, url.password) if url.username or url.password else None
        return httpx.Client(
            base_url=_without_userinfo(self.url),
            auth=auth,
            headers=headers,
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            limits=httpx.Limits(
                max_connections=self.max_connections, max_keepalive_connections=self.max_connections
            ),
        )

    def _client(self) -> httpx.Client:
        if self._pid != os.getpid():  # forked: never share the parent's sockets
            with self._lock:
                if self._pid != os.getpid():
                    self._http = self._new_http()
                    self._pid = os.getpid()
        return self._http

    def request(self, method: str, path: str, *, retry_cut: bool = True, **kwargs: Any) -> httpx.Response:
        """One call with retries; returns a 2xx response (body read) or raises (see module doc).
        An answer from an index newer than the client's refreshes the client (:meth:`_follow_index`).
        ``retry_cut=False``: an answer the service began and then cut short (its status sent, its
        body incomplete) raises :class:`_CutShort` at once instead of being retried."""
        if self._featurizer_changed is not None:
            raise FeaturizerChanged(self._featurizer_changed)
        what = f"{method} {self.shown_url}{path}"
        started = time.monotonic()
        timeouts = 0
        attempt = 0
        while True:
            attempt += 1
            last = self.retries is not None and attempt > self.retries
            first = not self._answered
            timeout = self._first_timeout() if first else httpx.USE_CLIENT_DEFAULT
            try:
                response = self._send(method, path, timeout, retry_cut, **kwargs)
            except httpx.TransportError as exc:  # connect/read/write errors, timeouts, protocol errors
                if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
                    timeouts += 1
                    last = last or timeouts > TIMEOUT_RETRIES
                if last or not self._sleep(attempt - 1, None, self._give_up_at(started)):
                    spent = self._spent(attempt, started)
                    if not self._answered:
                        raise ServiceUnavailable(self._unreachable(method, path, exc, spent)) from exc
                    raise ServiceUnavailable(
                        f"{what}: {type(exc).__name__}: {exc or 'no answer'} ({spent})"
                    ) from exc
                log.debug("%s: %s; retrying", what, exc)
                continue
            if first:
                self._check_first_answer(method, path, response)
            self._follow_index(response)
            if self._unchecked is not None:  # /v1/service's own answer brings the versions: no 2nd call
                own = path == SERVICE_PATH and kwargs.get("params") == _SERVICE_QUERY
                self._check_featurizer(response if own else None)
            status = response.status_code
            if status < 400:
                return response
            detail = _detail(response)
            if status >= 500 and status not in _UNAVAILABLE_STATUS:  # this request failed on the server
                raise ServiceError(f"{what} → {status}: {detail} (after {attempt} attempts)", status=status)
            if status in _UNAVAILABLE_STATUS:
                retry_after = response.headers.get("retry-after")
                if last or not self._sleep(attempt - 1, retry_after, self._give_up_at(started)):
                    message = f"{what} → {status}: {detail} ({self._spent(attempt, started)})"
                    if not self._answered:
                        message += (f"; no lookup service has answered this client at {self.shown_url} yet: is "
                                    "`featurecache serve` running there (behind this proxy)?")  # fmt: skip
                    raise ServiceUnavailable(message, status=status)
                log.debug("%s → %d: %s; retrying", what, status, detail)
                continue
            raise _client_error(what, status, detail, response)

    def _send(self, method: str, path: str, timeout: Any, retry_cut: bool, **kwargs: Any) -> httpx.Response:
        """One attempt, body read. ``retry_cut=False``: the status and headers are received first, so
        that a body cut short after them (:class:`_CutShort`) is told from a connection lost before
        any answer (a restart, a keep-alive connection the server closed: retried as usual)."""
        client = self._client()
        if retry_cut:
            return client.request(method, path, timeout=timeout, **kwargs)
        response = client.send(client.build_request(method, path, timeout=timeout, **kwargs), stream=True)
        try:
            response.read()
        except httpx.RemoteProtocolError as exc:
            raise _CutShort(f"{method} {self.shown_url}{path} → {response.status_code}, then: {exc}") from exc
        finally:
            response.close()
        return response

    def _first_timeout(self) -> httpx.Timeout:
        """Timeouts of a call to a service that has never answered: a first connection that takes
        longer than ``first_contact_s`` to open is a wrong host or a firewall, not a busy service."""
        return httpx.Timeout(self.timeout, connect=min(self.connect_timeout, self.first_contact_s))

    def _give_up_at(self, started: float) -> float:
        """When a call begun at ``started`` starts no more retries: ``retry_budget_s`` after it, or
        ``first_contact_s`` (if shorter) while the service has never answered the client."""
        budget = self.retry_budget_s if self._answered else min(self.retry_budget_s, self.first_contact_s)
        return started + budget

    def _check_first_answer(self, method: str, path: str, response: httpx.Response) -> None:
        """The first answers the client gets, until one is the lookup service's (then the client is
        :attr:`answered`): one with the service's index header, a 2xx in Arrow or JSON, or a JSON
        503 with ``retry-after`` (the service's answer while its store is not open) is; a 401/403 or
        another 502/503/504 is handled as any (the latter retried within ``first_contact_s``); any
        other is checked against ``GET /v1/health``, and raises ServiceUnavailable when that is not
        the service's either (another server answers at the URL). The service's own 404 is checked
        for a URL with extra path (:meth:`_check_base_path`)."""
        status = response.status_code
        if status == 404 and response.headers.get(INDEX_HEADER):
            self._check_base_path(method, path, response)
        if response.headers.get(INDEX_HEADER) or (
            200 <= status < 300 and _media_type(response) in _OWN_MEDIA
        ):
            self._answered = True
            return
        if status in _UNAVAILABLE_STATUS:
            if response.headers.get("retry-after") and _media_type(response) == "application/json":
                self._answered = True  # the service's own 503: its store is not open (being built)
            return  # else a proxy's, or a server starting: retried within first_contact_s
        if status in (401, 403):
            return
        health = self._health()
        if health is None:
            self._answered = True
            return
        if 400 <= status < 500:
            answer = f"{status}: {_detail(response)}"
        else:  # a redirect, a page, a 500: what it was is enough
            answer = (
                f"{status} {response.reason_phrase} ({_media_type(response) or 'no content type'} answer)"
            )
        location = response.headers.get("location")
        if location:
            answer += f" to {redact_url(location)}"
        raise ServiceUnavailable(
            f"{self.shown_url} does not answer as a featurecache lookup service: {method} {path} → {answer}; "
            f"GET {_HEALTH_PATH} → {health}. Another server answers at this URL: check its host and port "
            f"against those `featurecache serve` listens on"
        )

    def _check_base_path(self, method: str, path: str, response: httpx.Response) -> None:
        """A first answer that is the lookup service's 404 (it sends :data:`INDEX_HEADER`): when
        ``GET /v1/health`` below the client's URL is a 404 too, the URL holds a path the service has
        no routes under (``http://host:8000/notthere``, ``…/v1``): raise ServiceUnavailable naming
        the URL and what to check, with what ``GET /v1/health`` answers at the server's root. Any
        other health answer leaves the 404 the service's own (no such entry): NotFound, as before."""
        try:
            health = self._client().get(_HEALTH_PATH, timeout=self._first_timeout())
        except httpx.TransportError:
            return  # the call's own answer stands
        if health.status_code != 404:
            return
        root = _origin(self.shown_url)
        try:
            at = _origin(_without_userinfo(self.url)) + _HEALTH_PATH  # credentials: the client's auth
            answer = self._client().get(at, timeout=self._first_timeout())
            at_root = "ok" if _is_health_ok(answer) else str(answer.status_code)
        except httpx.TransportError as exc:
            at_root = type(exc).__name__
        hint = f"; GET {root}{_HEALTH_PATH} answers {at_root}"
        if at_root == "ok":
            hint += f": give {root}"
        raise ServiceUnavailable(
            f"{self.shown_url}: no featurecache lookup service at this path ({method} {path} → 404: "
            f"{_detail(response)}; GET {_HEALTH_PATH} → 404, from a featurecache service on this server). "
            f"Check the URL's path: give the base URL `featurecache serve` answers at, without extra path, "
            f"where GET {_HEALTH_PATH} answers ok{hint}"
        )

    def _health(self) -> str | None:
        """None when ``GET /v1/health`` answers as the lookup service's does, else what it answered."""
        try:
            response = self._client().get(_HEALTH_PATH, timeout=self._first_timeout())
        except httpx.TransportError as exc:
            return f"{type(exc).__name__}: {exc or 'no answer'}"
        if response.headers.get(INDEX_HEADER) or _is_health_ok(response):
            return None
        return str(response.status_code)

    def _unreachable(self, method: str, path: str, exc: httpx.TransportError, spent: str) -> str:
        """The first contact failed: the URL, the reason, what to check; then the call and the error."""
        return (
            f"cannot reach the lookup service at {self.shown_url}: {self._transport_reason(exc)}. Is "
            f"`featurecache serve` running there, and is the URL right? ({method} {path}: "
            f"{type(exc).__name__}: {exc or 'no answer'}; {spent}; it has never answered this client)"
        )

    def _transport_reason(self, exc: httpx.TransportError) -> str:
        url = httpx.URL(self.url)
        if isinstance(exc, httpx.ConnectTimeout):
            return (f"no connection to {url.host} within {self._first_timeout().connect:g} s (a host that is "
                    "down, or a firewall that drops the connection)")  # fmt: skip
        if isinstance(exc, httpx.TimeoutException):
            return f"it accepted the connection but sent no answer within {self.timeout:g} s"
        if isinstance(exc, httpx.ConnectError):
            cause = _root_cause(exc)
            if isinstance(cause, socket.gaierror):
                return f"the host name {url.host!r} does not resolve"
            if isinstance(cause, ConnectionRefusedError):
                return f"connection refused (nothing listens on {url.host} port {url.port or _default_port(url)})"
            return f"cannot connect ({cause})"
        if isinstance(exc, httpx.RemoteProtocolError | httpx.LocalProtocolError):
            return "what answers there does not speak HTTP as the lookup service does"
        return f"{type(exc).__name__}"

    def _follow_index(self, response: httpx.Response) -> bool:
        """Compare the answer's index (:data:`INDEX_HEADER`) with the client's: a newer one refreshes
        the client (once per id; never back to an id it left). True when the answer came from an
        older index than the client's (:meth:`_older_answer` says so afterwards too)."""
        seen = response.headers.get(INDEX_HEADER)
        if not seen:
            return False  # a service older than this client: the misses refresh, as before
        with self._lock:
            current = self._index
            if current is None or seen == current:
                self._index = seen
                self._older_since = None
                if current is None and seen != self.expect_index:  # a first answer (or after refresh())
                    self._unchecked = seen  # checked by request(), once the lock is released
                return False
            age, current_age = _index_order(seen), _index_order(current)
            if seen in self._left or (age is not None and current_age is not None and age < current_age):
                now = time.monotonic()
                if self._older_since is None:
                    self._older_since = now
                if now - self._older_since < OLDER_INDEX_S:
                    return True
            self._left.add(current)
            self._index = seen
            self._older_since = None
            self._versions_doc = None
            self._versions_asked = False
            self._unchecked = seen
        log.info("%s: the service answers from another index now (%s, was %s: the store was rebuilt or "
                 "extended); refreshing the index tables", self.shown_url, seen, current)  # fmt: skip
        self._refresh_tables()
        return False

    def _check_featurizer(self, answer: httpx.Response | None = None) -> None:
        """Compare the featurizer versions of the index :meth:`_follow_index` took (``_unchecked``)
        with those the client's data were of (``expect_featurizer``; the first ones seen become
        it): one WARNING when they differ, and with ``on_featurizer_change="raise"``
        :class:`FeaturizerChanged` from now on. The versions come from ``GET /v1/service`` (``answer``:
        that call's own answer, else one such call without retries, outside the call being
        answered); never from ``/v1/info``, which sums the store's sizes. When it fails (or answers
        from yet another index) the next answer tries again; a service that tells none (older than
        this client): the versions are unknown and not compared."""
        with self._lock:
            index = self._unchecked
            if index is None or self._checking:
                return
            self._checking = True
        try:
            response = (
                answer if answer is not None else self._client().get(SERVICE_PATH, params=_SERVICE_QUERY)
            )
            status, at = response.status_code, response.headers.get(INDEX_HEADER)
            body = response.json() if status == 200 else None
        except (httpx.HTTPError, ValueError):
            status, body, at = 0, None, None
        finally:
            with self._lock:
                self._checking = False
        if answer is None and at is not None and at != index:
            # Its own call, answered from another index (another worker of the service): followed as
            # every answer is, so a newer index seen here is taken now, not after more answers of the
            # older one (a request of its own would otherwise leave the client's index behind).
            self._follow_index(response)
        if at != index or status not in (200, 404):  # no answer, or one of another index: the next one
            return
        doc = self._take_service(body, at)  # 404: a service without /v1/service: no versions either
        with self._lock:
            self._unchecked = None
            if doc is None:  # the service tells no versions: nothing to compare
                return
            now = version_set(doc)
            before, self.expect_featurizer, self.expect_index = self.expect_featurizer, now, index
        if before is None or before == now:
            return
        message = (
            f"{self.shown_url}: the service now answers from a store of featurizer {', '.join(now)} (index "
            f"{index}); this client's data so far were of featurizer {', '.join(before)}: the store was rebuilt "
            "or extended by another featurecache, and its features differ from those before"
        )
        log.warning("%s", message)
        if self.on_featurizer_change == "raise":
            self._featurizer_changed = message
            raise FeaturizerChanged(message)

    def _take_service(self, body: Any, at: str | None) -> dict[str, Any] | None:
        """Keep ``GET /v1/service``'s answer ``body`` (from index ``at``; None: not a 200): its service
        part as :attr:`service_info` (when not known yet), its ``featurizer_versions`` as those of
        the index the client holds (when ``at`` is that index). Returns the versions; None when the
        answer tells none (a service older than this client; said at DEBUG)."""
        service = dict(body) if isinstance(body, dict) else None
        doc = versions_of({VERSIONS_KEY: service.pop(VERSIONS_KEY, None)}) if service is not None else None
        with self._lock:
            if service is not None and self._service is None:
                self._service = service
            if at is None or at == self._index:
                self._versions_doc = doc
                self._versions_asked = True
        if doc is None:
            log.debug("%s: the service tells no featurizer versions of its store on %s (older than this client): "
                      "they are unknown, and a change of them cannot be noticed", self.shown_url, SERVICE_PATH)  # fmt: skip
        return doc

    def featurizer_versions(self) -> dict[str, Any] | None:
        """The featurizer versions of the entries and MSAs of the store the service serves
        (:func:`featurecache.store.versions.store_versions`, from ``GET /v1/service``, asked once
        per index, in the call that also brings :attr:`service_info`); None when the service tells
        none (older than this client: unknown; ``/v1/info`` is not asked)."""
        if not self._versions_asked:
            try:
                response = self.request("GET", SERVICE_PATH, params=_SERVICE_QUERY)
            except NotFound:  # a service without /v1/service
                self._take_service(None, None)
            else:
                self._take_service(response.json(), response.headers.get(INDEX_HEADER))
        with self._lock:
            doc = self._versions_doc
            if self._unchecked is None and self.expect_featurizer is None and doc is not None:
                self.expect_featurizer, self.expect_index = version_set(doc), self._index
        return doc

    def _older_answer(self, response: httpx.Response) -> bool:
        """Whether ``response`` (already seen by :meth:`_follow_index`) came from another index than
        the one the client holds now: an older one (a newer one would have been taken)."""
        seen = response.headers.get(INDEX_HEADER)
        return bool(seen) and self._index is not None and seen != self._index

    @property
    def answered(self) -> bool:
        """Whether the lookup service has answered this client (or the client it is a copy of)."""
        return self._answered

    def _spent(self, attempts: int, started: float) -> str:
        return f"after {attempts} attempts in {time.monotonic() - started:.1f} s"

    def _sleep(self, attempt: int, retry_after: str | None, give_up_at: float) -> bool:
        """Wait before retry ``attempt + 1``: False (no wait) when the retry budget is spent, else
        the backoff, cut short to end at the budget's end (the last retry starts then)."""
        left = give_up_at - time.monotonic()
        if left <= 0:
            return False
        delay = min(self.max_backoff, self.backoff * 2 ** min(attempt, 32)) * _JITTER.uniform(0.5, 1.5)
        if retry_after is not None:
            with contextlib.suppress(ValueError):
                delay = max(delay, min(float(retry_after), self.max_backoff))
        time.sleep(min(delay, left))
        return True

    def _arrow(self, method: str, path: str, **kwargs: Any) -> list[arrow_io.Record]:
        return self._decoded(self.request(method, path, **kwargs), method, path)

    def _decoded(self, response: httpx.Response, method: str, path: str) -> list[arrow_io.Record]:
        try:
            return arrow_io.decode(response.content)
        except (pa.ArrowException, ValueError, KeyError) as exc:
            raise ServiceError(
                f"{method} {self.shown_url}{path}: the answer is not a valid Arrow stream ({exc})"
            ) from exc

    # ------------------------------------------------------------------ tables
    def table(self, name: str) -> pa.Table:
        """One index table (fetched once, then cached: the service's index does not change).

        The standard tables (``featurecache.store.layout.TABLES``) and any other the store holds
        (e.g. ``plan``); an unknown name raises NotFound. A fetch that :meth:`refresh` overtook
        (its answer may predate the refresh) is not kept: it is fetched again; so is one answered
        from an index older than the client's (a worker still on the index before a rebuild), after
        a backoff, within ``retry_budget_s``."""
        return self._cached_table(name, name, None)

    def lookup_columns(self, name: str) -> pa.Table:
        """What the client's own lookups read of index table ``name``: the whole table when the
        client holds it, else only its :data:`LOOKUP_COLUMNS` (fetched once per snapshot, as
        :meth:`table`; a table without them, e.g. an empty ``msas`` of no columns: the whole one)."""
        with self._lock:
            whole = self._tables.get(name)
        if whole is not None:
            return whole
        try:
            return self._cached_table(_lookup_key(name), name, LOOKUP_COLUMNS[name])
        except InvalidRequest:
            return self.table(name)

    def lookup_snapshot(self, fetch: bool = True) -> tuple[str, dict[str, pa.Table]] | None:
        """(index id, table name → its :data:`LOOKUP_COLUMNS` columns) of the snapshot the client
        holds, for a copy of the client to start on (``LookupClient(..., snapshot=...)``: a training
        client's loader worker processes), so that each copy does not fetch them again. ``fetch``:
        fetch those not held yet (else leave them out). None when the service names no index (older
        than this client), the client has not read the index yet (nothing is fetched then) or it
        refreshed meanwhile: the copy then fetches its own. A fetch that fails leaves its table out
        (the copy meets the error itself, where it would have before)."""
        with self._lock:
            generation = self._generation
            if self._index is None:
                return None
        held: dict[str, pa.Table] = {}
        for name in LOOKUP_COLUMNS:
            with self._lock:
                t = self._tables.get(name, self._tables.get(_lookup_key(name)))
            if t is None and fetch:
                with contextlib.suppress(NotFound, InvalidRequest, ServiceError, ServiceUnavailable):
                    t = self.lookup_columns(name)
            if t is not None:
                held[name] = t
        with self._lock:
            kept = set(map(id, self._tables.values()))
            if (
                self._index is None
                or self._generation != generation
                or not all(id(t) in kept for t in held.values())
            ):
                return None
            index = self._index
        columns = {n: [c for c in LOOKUP_COLUMNS[n] if c in t.column_names] for n, t in held.items()}
        return index, {n: t.select(columns[n]) for n, t in held.items()}

    def _cached_table(self, key: str, name: str, columns: Sequence[str] | None) -> pa.Table:
        """Index table ``name`` (``columns`` of it; None: all), kept under ``key`` (:meth:`table`)."""
        params = {"columns": ",".join(columns)} if columns is not None else None
        give_up_at = time.monotonic() + self.retry_budget_s
        refetches = older_answers = 0
        while True:
            with self._lock:
                t = self._tables.get(key)
                generation = self._generation
            if t is not None:
                return t
            response = self.request("GET", f"/v1/tables/{_segment(name)}", params=params)
            t = arrow_io.read_table(response.content)
            if self._older_answer(response):
                older_answers += 1
                if not self._sleep(older_answers - 1, None, give_up_at):
                    return t  # not kept: the next use asks again
                log.debug("%s: table %r came from an older index than the client's; fetching it again",
                          self.shown_url, name)  # fmt: skip
                continue
            with self._lock:
                if self._generation == generation:
                    return self._tables.setdefault(key, t)  # another thread's fetch, if it came first
            refetches += 1
            if refetches > _TABLE_REFETCHES:
                return t
            log.debug(
                "%s: table %r was fetched while the client refreshed; fetching it again", self.shown_url, name
            )

    @property
    def entries(self) -> pa.Table:
        return self.table("entries")

    @property
    def chains(self) -> pa.Table:
        return self.table("chains")

    @property
    def interfaces(self) -> pa.Table:
        return self.table("interfaces")

    @property
    def failures(self) -> pa.Table:
        return self.table("failures")

    @property
    def warnings(self) -> pa.Table:
        return self.table("warnings")

    @property
    def msas(self) -> pa.Table:
        return self.table("msas")

    @property
    def components(self) -> pa.Table:
        return self.table("components")

    def _rows(self) -> dict[str, int]:
        return self._rows_of(self.lookup_columns("entries"))

    def _rows_of(self, entries: pa.Table) -> dict[str, int]:
        """id -> row in ``entries`` (or its lookup columns; built once per table object, so never
        of another snapshot)."""
        cached = self._row
        if cached is not None and cached[0] is entries:
            return cached[1]
        ids = entries.column("id").to_pylist() if entries.num_rows else []
        rows = {eid: i for i, eid in enumerate(ids)}
        with self._lock:
            self._row = (entries, rows)
        return rows

    def _index_row(self, entry_id: str) -> tuple[pa.Table, int]:
        """The entries table (or its :data:`LOOKUP_COLUMNS`) and the entry's row in it, of one
        snapshot (NotFound as :meth:`row_of`)."""
        self.row_of(entry_id)  # NotFound, or a refresh when the snapshot lacks the id
        entries = self.lookup_columns("entries")
        row = self._rows_of(entries).get(entry_id)
        if row is None:  # refreshed in between by another thread, to an index without it
            raise NotFound(f"no entry {entry_id!r} at {self.shown_url}")
        return entries, row

    def entry_meta(self, entry_id: str) -> dict[str, Any]:
        """The entry's index row, without the storage columns (row and row's table from one snapshot).
        A client that does not hold the whole ``entries`` table (a loader worker's) takes it from
        the service's answer about the entry (:meth:`_entry_attrs`), as :meth:`entry` gives it."""
        with self._lock:
            whole = self._tables.get("entries")
        if whole is None:
            return dict(self._entry_attrs(entry_id)[0])
        entries, row = self._index_row(entry_id)
        return {k: v for k, v in entries.slice(row, 1).to_pylist()[0].items() if k not in ENTRY_META_SKIP}

    def entry_chains(self, entry_id: str) -> list[dict[str, Any]]:
        """The entry's chains rows (``[]`` for an id the index lacks), from the ``chains`` table when
        the client holds it, else from the service's answer about the entry (:meth:`_entry_attrs`)."""
        with self._lock:
            whole = self._tables.get("chains")
        if whole is not None:
            return super().entry_chains(entry_id)
        try:
            return [dict(c) for c in self._entry_attrs(entry_id)[1]]
        except NotFound:
            return []

    def _entry_attrs(self, entry_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(index row, chains rows) of one entry, as the service's entry answers carry them (its
        reader's ``entry_meta`` and ``entry_chains``), of the client's snapshot: kept from the
        last :meth:`read_groups` of it, else one ``GET /v1/entries/{id}?arrays=`` (no arrays), from
        the client's index (:meth:`_arrow_of_snapshot`). At most :data:`_ATTRS_KEPT` are kept."""
        generation = self._generation
        self.row_of(entry_id)  # NotFound, or a refresh when the snapshot lacks the id
        with self._lock:
            got = self._attrs.get(entry_id)
            if got is not None:
                self._attrs.move_to_end(entry_id)
                return got
        path = f"/v1/entries/{_segment(entry_id)}"
        records = self._arrow_of_snapshot("GET", path, params=_arrays_params([]))
        if len(records) != 1:
            raise ServiceError(f"GET {path}: expected 1 entry, got {len(records)}")
        attrs = records[0].attrs
        got = (attrs["meta"], attrs["chains"])
        self._keep_attrs(generation, entry_id, got)
        return got

    def _keep_attrs(
        self, generation: int, entry_id: str, attrs: tuple[dict[str, Any], list[dict[str, Any]]]
    ) -> None:
        """Keep an entry's (meta, chains) asked for in ``generation`` (not across a refresh)."""
        with self._lock:
            if self._generation != generation:
                return
            self._attrs[entry_id] = attrs
            self._attrs.move_to_end(entry_id)
            while len(self._attrs) > _ATTRS_KEPT:
                self._attrs.popitem(last=False)

    @property
    def ids(self) -> list[str]:
        return list(self._rows())

    def __len__(self) -> int:
        return len(self._rows())

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._rows()

    def row_of(self, entry_id: str) -> int:
        """Row of ``entry_id`` in ``entries``; an id the snapshot lacks refreshes it (:meth:`refresh`:
        an extension may have added the entry) and looks again; NotFound if the service's index
        lacks it too. After such a refresh that did not find its id, misses within
        :data:`MIN_REFRESH_S` do not refresh (a loop over absent ids fetches the index once a second)."""
        try:
            return self._rows()[entry_id]
        except (KeyError, TypeError):
            pass
        if isinstance(entry_id, str) and time.monotonic() - self._missed_at >= MIN_REFRESH_S:
            log.debug(
                "%s: %r is not in the index fetched before; fetching it again", self.shown_url, entry_id
            )
            self._refresh_tables()
            with contextlib.suppress(KeyError):
                return self._rows()[entry_id]
            self._missed_at = time.monotonic()
        raise NotFound(f"no entry {entry_id!r} at {self.shown_url}")

    @property
    def generation(self) -> int:
        """Which snapshot the client holds: 0 at first, bumped by every :meth:`refresh` (including
        those a miss or an MSA of a new shape starts). What a caller derives from the client's tables
        (e.g. a sample's MSA shapes, :class:`featurecache.client.job.SourceRef`) is stale once this
        changes."""
        return self._generation

    def refresh(self) -> None:
        """Forget the fetched index tables (``ids``, ``entries``, ``chains``, ``msas``, ...), the
        service info and the reference conformers: the next use fetches them again, so entries an
        extension added since appear. A client's tables are a snapshot until then, as a local
        store's are until it is opened again. Bumps :attr:`generation`.

        Called by the user, it also forgets which indexes the client has seen: the next answer's
        index is taken, whatever it is, e.g. the store put back to an earlier copy (which the
        client would otherwise take only after :data:`OLDER_INDEX_S` of such answers)."""
        with self._lock:
            self._index = None
            self._left.clear()
            self._older_since = None
        self._refresh_tables()

    def _refresh_tables(self) -> None:
        """:meth:`refresh` as the client does it itself (an answer from a newer index, a miss, an MSA
        of a new shape): it keeps what it knows of the service's indexes."""
        with self._lock:
            self._generation += 1
            self._tables = {}
            self._attrs = OrderedDict()
            self._row = None
            self._service = None
            self._msa_shape = None
            self._component_table = None
            self._part_fields = {}
            self._rows_gone = False

    # ------------------------------------------------------------------ info
    def info(self) -> dict[str, Any]:
        """The store's info (as ``LocalStore.info()``); the service's own part is ``service_info``.

        In a server process's first seconds on a large store the sizes may not be counted yet:
        ``parts`` and ``bytes`` are then None and ``sizes_pending`` is True (ask again later)."""
        doc = dict(self.request("GET", "/v1/info").json())
        self._service = doc.pop("service", {})
        return doc

    @property
    def service_info(self) -> dict[str, Any]:
        """Version, limits, auth and tables of the service (``GET /v1/service``, fetched once; the
        same call brings the featurizer versions, :meth:`featurizer_versions`).

        Not ``GET /v1/info``: that one also carries the store's sizes (counted in the background
        when the server opens the store), which the limits do not need. A service without ``/v1/service`` (older
        than this client) is asked ``/v1/info``."""
        if self._service is None:
            try:
                response = self.request("GET", SERVICE_PATH, params=_SERVICE_QUERY)
            except NotFound:
                self.info()
            else:
                self._take_service(response.json(), response.headers.get(INDEX_HEADER))
        return self._service or {}

    def _limit(self, name: str, default: int) -> int:
        try:
            return int(self.service_info.get("limits", {}).get(name, default))
        except ServiceUnavailable:
            raise  # the request it is for would fail the same way, after as many retries
        except (ServiceError, InvalidRequest, NotFound):
            return default

    # ------------------------------------------------------------------ entries
    def read_group(self, entry_id: str, group: str) -> np.ndarray:
        """One entry's rows of ``group`` as a structured array (dtype from types.py), as locally."""
        dtype = ENTRY_GROUPS.get(group)
        if dtype is None:
            raise NotFound(f"unknown group {group!r}; groups are {sorted(ENTRY_GROUPS)}")
        fields = getattr(self.entry(entry_id, [group]), group)
        n = len(next(iter(fields.values()))) if fields else 0
        out = np.zeros(n, dtype=dtype)
        for name, column in fields.items():
            out[name] = column
        return out

    # ------------------------------------------------------------------ rows of an entry (crop first)
    def row_reads(self) -> bool:
        """Whether the service reads some rows of an entry's group (``POST /v1/entries/{id}:rows``;
        its ``/v1/service`` lists :data:`ROWS_CAPABILITY` in ``capabilities``): :meth:`stored_fields`,
        :meth:`read_groups` and :meth:`read_rows` need it. The training client's crop-first path
        (``client.job.SampleJob._crop_first``) reads the whole entry from a service older than the
        route. From :attr:`service_info`, asked once per snapshot (not per sample); False too once
        the service has answered ``POST …:rows`` with 404 or 405 and no longer lists the capability
        (rolled back to an older version on the same store: :meth:`_rows_route_gone`)."""
        if self._rows_gone:
            return False
        try:
            capabilities = self.service_info.get("capabilities") or ()
        except ServiceUnavailable:
            raise  # the read it is asked for would fail the same way
        except (ServiceError, InvalidRequest, NotFound):
            return False
        return ROWS_CAPABILITY in capabilities

    def row_count(self, entry_id: str, group: str) -> int:
        """How many rows of ``group`` the entry has, from the entries table the client holds (no request)."""
        if group not in GROUP_OFFSETS:
            raise NotFound(f"unknown group {group!r}; groups are {sorted(ENTRY_GROUPS)}")
        entries, row = self._index_row(entry_id)
        return int(entries.column(GROUP_OFFSETS[group][1])[row].as_py())

    def stored_fields(self, entry_id: str, group: str) -> tuple[str, ...]:
        """The fields of ``group`` that the part holding ``entry_id`` stores, as
        ``LocalStore.stored_fields`` (a part written before a field was added lacks it:
        ``tokens/centre_coords`` before featurizer 0.7.0). Learned per part from the service's rows
        answers (one request for rows of none the first time a part is asked), kept until
        :meth:`refresh`. ServiceError from a service older than row reads (:meth:`row_reads`).

        An answer from a newer index (the store rebuilt or extended: the request refreshed the
        client) is used for this call but not kept (its part may be another's in the index the
        client held), and the :attr:`generation` it bumped has the training client draw the sample
        again."""
        if group not in ENTRY_GROUPS:
            raise NotFound(f"unknown group {group!r}; groups are {sorted(ENTRY_GROUPS)}")
        entries, row = self._index_row(entry_id)
        part = str(entries.column("part")[row].as_py())
        known = self._part_fields.get(part)
        if known is None:
            known = self._rows_answer(entry_id, group, np.zeros((0, 2), dtype=np.int64), None)[2]
        fields = None if known is None else known.get(group)
        if fields is None:  # an answer that does not say
            raise ServiceError(f"{self.shown_url}: the rows answer for entry {entry_id} did not say which fields "
                               f"of {group} its part {part} stores")  # fmt: skip
        return fields

    def read_groups(self, entry_id: str, groups: Sequence[str]) -> dict[str, np.ndarray]:
        """Several groups of one entry in one request, each a structured array of the fields its
        part stores, as ``LocalStore.read_groups``: a field the part lacks is not derived (the
        service would read the entry's atoms to derive ``tokens/centre_coords``), and
        :meth:`entry` gives it derived. Needs :meth:`row_reads` (:meth:`stored_fields`)."""
        stored = {g: self.stored_fields(entry_id, g) for g in dict.fromkeys(groups)}
        arrays: list[str] = []
        for g, fields in stored.items():
            arrays += [g] if fields == ENTRY_GROUPS[g].names else [f"{g}/{f}" for f in fields]
        path = f"/v1/entries/{_segment(entry_id)}"
        generation = self._generation
        records = self._arrow_of_snapshot("GET", path, params=_arrays_params(arrays))
        if len(records) != 1:
            raise ServiceError(f"GET {path}: expected 1 entry, got {len(records)}")
        got = arrow_io.record_entry(records[0])
        self._keep_attrs(generation, entry_id, (got.meta, got.chains))  # for entry_meta / entry_chains
        return {g: _structured(g, fields, getattr(got, g)) for g, fields in stored.items()}

    def read_rows(
        self,
        entry_id: str,
        group: str,
        ranges: Sequence[tuple[int, int]] | np.ndarray,
        fields: Sequence[str] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Some rows of one entry's ``group`` (``POST /v1/entries/{id}:rows``), as
        ``LocalStore.read_rows``: ``(rows, records)``, the entry-local row numbers (int64, ascending,
        distinct: exactly the rows of the ``[start, stop)`` ``ranges``) and their records (the
        fields the part stores, or ``fields`` of them). Ranges may overlap and come in any order;
        they are merged before they are sent. InvalidRequest for a range past the group's rows.
        Needs :meth:`row_reads`."""
        if group not in GROUP_OFFSETS:
            raise NotFound(f"unknown group {group!r}; groups are {sorted(ENTRY_GROUPS)}")
        spans = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        spans = spans[spans[:, 1] > spans[:, 0]]  # as locally: an empty or reversed range reads nothing
        count = self.row_count(entry_id, group)
        if spans.size and (spans.min() < 0 or spans.max() > count):
            raise InvalidRequest(f"entry {entry_id}: rows {spans.min()}..{spans.max()} of {group} asked for; "
                                 f"it has {count}")  # fmt: skip
        # the crop's ranges (one a kept token or residue, a row either side) overlap: fewer, shorter requests
        rows, records, _ = self._rows_answer(entry_id, group, merge_ranges(spans), fields)
        return rows, records

    def _rows_answer(
        self, entry_id: str, group: str, spans: np.ndarray, fields: Sequence[str] | None
    ) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[str, ...]] | None]:
        """One ``POST /v1/entries/{id}:rows`` of merged ``spans``: the rows, their records, and what
        the answer says the entry's part stores (group → fields; None when it does not say), which
        is kept for :meth:`stored_fields` unless the request crossed a refresh. A 404 or 405 from a
        service that no longer has the route raises ServiceError saying so (:meth:`_rows_route_gone`)."""
        if not self.row_reads():
            raise ServiceError(f"{self.shown_url}: the lookup service there is older than row reads (its /v1/service "
                               f"lists no {ROWS_CAPABILITY!r} capability): read the whole entry, entry()")  # fmt: skip
        path = f"/v1/entries/{_segment(entry_id)}:rows"
        body: dict[str, Any] = {"group": group, "ranges": spans.tolist()}
        if fields is not None:
            body["fields"] = list(fields)
        generation = self._generation
        try:
            records = self._arrow_of_snapshot("POST", path, json=body)
        except (NotFound, ServiceError) as exc:
            status = exc.status
            if status not in (404, 405) or not self._rows_route_gone(status):
                raise
            raise ServiceError(f"POST {self.shown_url}{path} → {status}: the lookup service there no longer "
                               "answers row reads (an older version?): read the whole entry, entry()") from exc  # fmt: skip
        if len(records) != 1:
            raise ServiceError(f"POST {path}: expected 1 record, got {len(records)}")
        rec = records[0]
        stored = rec.attrs.get("stored_fields")
        part = rec.attrs.get("part")
        known = None
        if isinstance(stored, dict) and isinstance(part, str):
            known = {g: tuple(f) for g, f in stored.items() if g in ENTRY_GROUPS}
            with self._lock:
                if self._generation == generation:  # not across a refresh: the part may be another's now
                    self._part_fields[part] = known
        prefix = f"{group}/"
        columns = {name[len(prefix) :]: a for name, a in rec.arrays.items() if name.startswith(prefix)}
        names = [f for f in ENTRY_GROUPS[group].names or () if f in columns]
        return rec.arrays["rows"], _structured(group, names, columns), known

    def _rows_route_gone(self, status: int) -> bool:
        """After a 404 or 405 from ``POST …:rows``: whether the service no longer has the route
        (rolled back to a version older than it, on the same store: its index, hence the client's
        snapshot and :attr:`service_info`, did not change). ``/v1/service`` is asked again: when it
        no longer lists :data:`ROWS_CAPABILITY`, or the answer was a 405 (the route itself
        refused), :meth:`row_reads` is False for the rest of the snapshot and one WARNING says so,
        naming the service and what the training client does instead. A 404 from a service that
        still lists the route is an entry it does not know (False: the caller raises it)."""
        with self._lock:
            self._service = None
        try:
            listed = ROWS_CAPABILITY in (self.service_info.get("capabilities") or ())
        except ServiceError:  # no answer: the 405 alone says the route is gone; a 404 is raised as it is
            listed = True
        if listed and status != 405:
            return False
        with self._lock:
            told, self._rows_gone = self._rows_gone, True
        if not told:
            log.warning("%s: the lookup service no longer answers POST /v1/entries/{id}:rows (%d; its /v1/service "
                        "%s: an older version of the service?); large entries are read whole from now on, one "
                        "GET of every atom a sample, as before the route", self.shown_url, status,
                        "still lists entry_rows" if listed else "lists no entry_rows now")  # fmt: skip
        return True

    def _arrow_of_snapshot(self, method: str, path: str, **kwargs: Any) -> list[arrow_io.Record]:
        """:meth:`_arrow`, from the index the client's tables are of: an answer from an older one (a
        worker of ``--workers N`` still on the index before a rebuild) is asked again after a
        backoff, within ``retry_budget_s``, as :meth:`table` does, so that what one sample reads in
        several requests (its tokens, then its atom rows) is of one index; an answer from a newer
        one refreshes the client (its :attr:`generation` changes: the sample is drawn again)."""
        give_up_at = time.monotonic() + self.retry_budget_s
        older = 0
        while True:
            response = self.request(method, path, **kwargs)
            if not self._older_answer(response):
                break
            older += 1
            if not self._sleep(older - 1, None, give_up_at):
                raise ServiceUnavailable(f"{method} {self.shown_url}{path}: answered from an index older than "
                                         f"the client's for {self.retry_budget_s:g} s")  # fmt: skip
            log.debug("%s: %s %s came from an older index than the client's; asking again",
                      self.shown_url, method, path)  # fmt: skip
        return self._decoded(response, method, path)

    def entry(self, entry_id: str, arrays: Sequence[str] | None = None) -> Entry:
        params = _arrays_params(arrays)
        records = self._arrow("GET", f"/v1/entries/{_segment(entry_id)}", params=params)
        if len(records) != 1:
            raise ServiceError(f"GET /v1/entries/{entry_id}: expected 1 entry, got {len(records)}")
        return arrow_io.record_entry(records[0])

    def entries_batch(self, entry_ids: Sequence[str], arrays: Sequence[str] | None = None) -> list[Entry]:
        """Entries in request order, in as few requests as the service's limits allow. A batch
        the service cuts short after its status (it could not read an entry past the first, or it
        went away) is read again one entry at a time: a damaged entry raises ServiceError naming it."""
        ids = list(entry_ids)
        if not ids:
            return []
        _arrays_params(arrays)  # same checks (and errors) as the local reader
        step = self._limit("max_batch_entries", DEFAULT_BATCH_ENTRIES)
        out: list[Entry] = []
        for i in range(0, len(ids), step):
            out += self._batch(ids[i : i + step], arrays)
        return out

    def _batch(self, ids: list[str], arrays: Sequence[str] | None) -> list[Entry]:
        body: dict[str, Any] = {"ids": ids, "arrays": list(arrays) if arrays is not None else None}
        try:
            records = self._arrow("POST", "/v1/entries:batch", json=body, retry_cut=False)
        except _CutShort as exc:
            # The service streams a batch: it reads the first entry before its status goes out (one
            # it cannot read is a 500 naming it), the others as it sends them, and cuts the answer
            # short when one of those fails: a damaged entry, or the service going away. One GET per
            # entry tells which: each reads its entry before answering, so a damaged one raises
            # ServiceError naming it (not 30 s of retries of the whole batch, then "unavailable"),
            # and a service that went away is retried as any call is.
            log.warning("%s; reading its %d entries one by one", exc, len(ids))
            return [self.entry(i, arrays) for i in ids]
        except InvalidRequest as exc:
            if exc.limit == "max_response_bytes" and len(ids) > 1:
                half = len(ids) // 2  # too many bytes at once: halve until each part fits
                return self._batch(ids[:half], arrays) + self._batch(ids[half:], arrays)
            raise
        if len(records) != len(ids):
            raise ServiceError(f"POST /v1/entries:batch: asked for {len(ids)} entries, got {len(records)}")
        return [arrow_io.record_entry(r) for r in records]

    # ------------------------------------------------------------------ MSAs
    def msa(
        self,
        key: str,
        rows: Sequence[int] | slice | np.ndarray | None = None,
        cols: Sequence[int] | slice | np.ndarray | None = None,
    ) -> MSABlock:
        """Rows × columns of one stored MSA, selected as the local reader selects them.

        ``rows``/``cols``: None (all), a slice (numpy's rules: clamped to the axis, negative bounds
        from the end, any step, reversed) or indices (negative from the end, any order, repeats);
        an index outside the axis raises InvalidRequest, as locally. The selection is resolved here
        against the MSA's (depth, length) and only those cells cross the network, in as many
        requests as the service's ``max_msa_rows`` / ``max_msa_cols`` / ``max_msa_cells`` and
        ``max_response_bytes`` need.

        The MSA's shape comes from the ``msas`` table fetched before; when the service's MSA has
        another shape now (the store rebuilt, e.g. with another ``--msa-depth``: the service refuses
        the selection with 422, or answers a different depth or length), the index the client holds
        is from an older build: the client is refreshed (:meth:`refresh`, so callers that planned
        against the old shapes see :attr:`generation` change) and the selection resolved against
        the new shape, once (an index past the new depth then raises InvalidRequest, as locally).
        """
        generation = self._generation
        shape = self._msa_shape_of(key)
        try:
            block = self._msa_select(key, rows, cols, shape)
        except InvalidRequest as exc:
            if exc.status != 422:
                raise
            new = self._msa_probe(key)  # NotFound when the service has no such MSA any more
            if new == shape:
                raise
        else:
            new = (int(block.depth), int(block.length))
            if new == shape:
                return block
        log.info("%s: MSA %s is %d x %d now, not %d x %d (the store was rebuilt); refreshing the index, "
                 "selecting again", self.shown_url, key, *new, *shape)  # fmt: skip
        if self._generation == generation:  # unless the answer's index header refreshed it already
            self._refresh_tables()  # every table fetched before is of the old build, not only this shape
        self._msa_shapes()[key] = new
        return self._msa_select(key, rows, cols, new)

    def _msa_select(
        self,
        key: str,
        rows: Sequence[int] | slice | np.ndarray | None,
        cols: Sequence[int] | slice | np.ndarray | None,
        shape: tuple[int, int],
    ) -> MSABlock:
        """:meth:`msa` against the MSA's (depth, length) ``shape``."""
        depth, length = shape
        r = _local_selection(rows, depth, "rows", key)  # int64 [n_rows], each in 0..depth-1
        c = _local_selection(cols, length, "columns", key)  # int64 [n_cols], each in 0..length-1
        max_rows, max_cols, max_cells, max_bytes = (
            self._limit(n, _NO_LIMIT) for n in ("max_msa_rows", "max_msa_cols", "max_msa_cells", "max_response_bytes")
        )  # fmt: skip
        within = r.size <= max_rows and c.size <= max_cols and r.size * c.size <= max_cells
        if within and arrow_io.msa_answer_bytes(key, r.size, c.size) <= max_bytes:
            return self._msa_fitting(key, r, c)
        # the fewest requests the limits allow, known before any is sent (review R29a s46 #4: halving
        # rows on each 413 took 21,379 requests for an MSA whose single row was over the limit)
        height, width = _msa_tile(key, r.size, c.size, max_rows, max_cols, max_cells, max_bytes)
        return self._msa_grid(key, r, c, height, width)

    def _msa_grid(self, key: str, rows: np.ndarray, cols: np.ndarray, height: int, width: int) -> MSABlock:
        """``rows`` × ``cols`` in tiles of ``height`` × ``width`` (:meth:`_msa_fitting` each), joined."""
        return _join_msa_blocks([
            [self._msa_fitting(key, rows[i : i + height], cols[j : j + width])
             for j in range(0, max(cols.size, 1), width)]
            for i in range(0, max(rows.size, 1), height)
        ])  # fmt: skip

    def _msa_fitting(self, key: str, rows: np.ndarray, cols: np.ndarray) -> MSABlock:
        """:meth:`_msa_slice` of the indices ``rows`` × ``cols``; when the service refuses it with a
        413 naming ``max_response_bytes`` (a service that does not advertise the limit, or one that
        counts an answer's bytes otherwise than :func:`arrow_io.msa_answer_bytes`: review R28d s46 #2), in
        the fewest tiles that fit that limit, scaled by how the 413's ``got`` compares with this
        client's count; a tile refused again is tiled again. A single cell refused raises the 413."""
        try:
            return self._msa_slice(key, rows, cols)
        except InvalidRequest as exc:
            if exc.limit != "max_response_bytes" or (rows.size <= 1 and cols.size <= 1):
                raise
            got, most = exc.got, exc.maximum
            ours = arrow_io.msa_answer_bytes(key, rows.size, cols.size)
            if got is not None and most is not None and got > most > 0:
                budget = most * ours // got  # the service's limit in this client's bytes
            else:  # a 413 that does not say by how much
                budget = ours // 2
            height, width = _msa_tile(key, rows.size, cols.size, _NO_LIMIT, _NO_LIMIT, _NO_LIMIT, budget)
            if height >= rows.size and width >= cols.size:  # no smaller tiles by the numbers: halve one axis
                half_rows = arrow_io.msa_answer_bytes(key, math.ceil(rows.size / 2), cols.size)
                half_cols = arrow_io.msa_answer_bytes(key, rows.size, math.ceil(cols.size / 2))
                if rows.size > 1 and (cols.size <= 1 or half_rows <= half_cols):
                    height = math.ceil(rows.size / 2)
                else:
                    width = math.ceil(cols.size / 2)
            return self._msa_grid(key, rows, cols, max(height, 1), max(width, 1))

    def _msa_probe(self, key: str) -> tuple[int, int]:
        """(depth, length) of the service's MSA ``key`` now, from an empty slice of it."""
        empty = np.zeros(0, dtype=np.int64)
        probe = self._msa_slice(key, empty, empty)
        return int(probe.depth), int(probe.length)

    def _msa_shape_of(self, key: str) -> tuple[int, int]:
        """(depth, length) of the MSA ``key``: from the ``msas`` index, else (a key the cached index
        does not name) from an empty slice of it; NotFound when the service has no such MSA."""
        shape = self._msa_shapes().get(key)
        if shape is None:
            shape = self._msa_probe(key)
            self._msa_shapes()[key] = shape
        return shape

    def _msa_slice(
        self,
        key: str,
        rows: Sequence[int] | slice | np.ndarray | None,
        cols: Sequence[int] | slice | np.ndarray | None,
    ) -> MSABlock:
        """One request: ``GET /v1/msas/{key}``, or ``POST …:slice`` when the selection is longer
        than :data:`_MAX_QUERY_CHARS` (a sample's random rows always are)."""
        path = f"/v1/msas/{_segment(key)}"
        r_spec, c_spec = _index_spec(rows), _index_spec(cols)
        params = {k: v for k, v in (("rows", r_spec), ("cols", c_spec)) if v is not None}
        if sum(len(v) for v in params.values()) <= _MAX_QUERY_CHARS:
            records = self._arrow("GET", path, params=params)
        else:
            records = self._arrow("POST", path + ":slice", json=params)
        return arrow_io.record_msa(records[0])

    def msa_shapes(self) -> dict[str, tuple[int, int]]:
        """MSA key → (depth, length) of every MSA of the client's snapshot (the ``msas`` index's
        key, depth and length columns, :data:`LOOKUP_COLUMNS`: not the whole table)."""
        return dict(self._msa_shapes())

    def _msa_shapes(self) -> dict[str, tuple[int, int]]:
        """MSA key → (depth, length), from the ``msas`` table's lookup columns (fetched once)."""
        if self._msa_shape is None:
            try:
                t = self.lookup_columns("msas")
            except NotFound:  # a service without an MSA index: no shapes, requests go as given
                t = pa.table({})
            shapes: dict[str, tuple[int, int]] = {}
            if t.num_rows and {"key", "depth", "length"} <= set(t.column_names):
                keys, depth, length = (t.column(n).to_pylist() for n in ("key", "depth", "length"))
                shapes = {str(k): (int(d), int(n)) for k, d, n in zip(keys, depth, length, strict=True)}
            self._msa_shape = shapes
        return self._msa_shape

    # ------------------------------------------------------------------ reference conformers
    def component_table(self) -> Any:
        """Every stored reference conformer (a chem.reference.ComponentTable), fetched once."""
        if self._component_table is None:
            from featurecache.chem.reference import ComponentTable

            table = arrow_io.read_table(self.request("GET", "/v1/components").content)
            self._component_table = ComponentTable.from_arrow(table)
        return self._component_table

    def reference_features(self, entry: Entry) -> dict[str, np.ndarray]:
        from featurecache.chem.reference import reference_features

        return reference_features(entry.atoms, entry.tokens, self.component_table())

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._http.close()

    def settings(self) -> dict[str, Any]:
        """The constructor's arguments: ``LookupClient(**c.settings())`` is the same client with its
        own connections (what a loader worker process builds). Holds the token: never log it."""
        keep = ("url", "token", "timeout", "connect_timeout", "retries", "retry_budget_s", "backoff",
                "max_backoff", "max_connections", "first_contact_s", "answered", "on_featurizer_change",
                "expect_featurizer", "expect_index", "cleartext_warned")  # fmt: skip
        return {k: getattr(self, k) for k in keep}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.settings(), "snapshot": self.lookup_snapshot(fetch=False)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"LookupClient({self.shown_url!r}{', token=…' if self.token else ''})"


# ------------------------------------------------------------------------------------ helpers
def _lookup_key(name: str) -> str:
    """Where a client keeps the :data:`LOOKUP_COLUMNS` of table ``name`` (beside the whole tables)."""
    return f"{name}?columns"


def _index_order(index_id: str) -> int | None:
    """The age of an index id (``services.lookup.state.index_id``: its newest table's ``mtime_ns``,
    hex, before the ``-``); None for an id of another form (then only the ids left tell old from new)."""
    head, dash, _ = index_id.partition("-")
    try:
        return int(head, 16) if dash else None
    except ValueError:
        return None


#: the media types the lookup service answers in
_OWN_MEDIA = frozenset({arrow_io.MEDIA_TYPE, "application/json"})


#: the servers (``scheme://host:port``, lower case) this process has warned about sending credentials
#: to in clear text (:meth:`LookupClient._warn_cleartext`)
_cleartext_warned: set[str] = set()


def _is_loopback(host: str) -> bool:
    """``host`` (as :class:`httpx.URL` gives it: lower case, no brackets) is this machine's loopback:
    ``localhost`` (or a name under it, RFC 6761), 127.0.0.0/8 or ``::1`` (an IPv4-mapped one too)."""
    name = host.rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.partition("%")[0])  # an IPv6 zone id is not the address
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _without_userinfo(url: str) -> str:
    """``url`` less the ``user:password@`` of its authority, all else as given: what the client
    gives httpx (which logs request URLs at INFO); the credentials go as the client's Basic auth.
    Not :func:`~featurecache.auth.redact_url`, which masks more for display (the query)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: the server's root, without the URL's path."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _is_health_ok(response: httpx.Response) -> bool:
    """``GET /v1/health`` answered as the lookup service's does: 200, ``{"status": "ok"}``."""
    if response.status_code != 200:
        return False
    try:
        doc = response.json()
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("status") == "ok"


def _media_type(response: httpx.Response) -> str:
    return response.headers.get("content-type", "").split(";")[0].strip().lower()


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception ``exc`` was raised from (httpx → httpcore → the socket's OSError)."""
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or exc.__context__
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


def _segment(value: str) -> str:
    """One path segment, dots escaped too (a client would otherwise resolve ``..`` before sending)."""
    return quote(str(value), safe="").replace(".", "%2E")


def _detail(response: httpx.Response) -> str:
    try:
        doc = response.json()
    except ValueError:
        kind = response.headers.get("content-type", "").split(";")[0] or "no content type"
        # featurecache answers JSON: anything else is another server (or a proxy) at that URL
        return (f"{response.reason_phrase} ({kind} answer, not the lookup service's JSON: is this URL a "
                f"featurecache serve?)")  # fmt: skip
    detail = doc.get("detail", doc) if isinstance(doc, dict) else doc
    if isinstance(detail, list):  # FastAPI validation errors
        return "; ".join(f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail)
    return str(detail)


def _client_error(what: str, status: int, detail: str, response: httpx.Response) -> Exception:
    message = f"{what} → {status}: {detail}"
    if status == 404:
        return NotFound(f"{detail} ({what})", status=status)
    if status in (401, 403):
        return AuthenticationError(message, status=status)
    if status in (400, 413, 422):
        try:
            doc = response.json()
        except ValueError:
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        # a 413's limit and the request's size by it: how many parts a split needs
        limit, most, got = doc.get("limit"), doc.get("max"), doc.get("got")
        return InvalidRequest(message, status=status, limit=limit if isinstance(limit, str) else None,
                              maximum=_int_or_none(most), got=_int_or_none(got))  # fmt: skip
    return ServiceError(message, status=status)


def _int_or_none(value: Any) -> int | None:
    """``value`` when a JSON answer's field is an integer, else None (the field is not said)."""
    return value if isinstance(value, int) else None


def _msa_tile(
    key: str, n_rows: int, n_cols: int, max_rows: int, max_cols: int, max_cells: int, max_bytes: int
) -> tuple[int, int]:
    """(height, width) of the tiles of an ``n_rows`` × ``n_cols`` selection of the MSA ``key`` that
    each fit the limits and are the fewest: for each width (a whole share of the columns), the most
    rows that fit it. A column costs ~44x a row in every tile (its profile), so when one full row is
    over ``max_bytes`` the columns are split first. (1, 1) when not even one cell fits: that request
    gets the service's 413."""
    fixed = arrow_io.MSA_ANSWER_FIXED_BYTES + 6 * len(key)
    best: tuple[int, int, int] | None = None  # (tiles, height, width)
    widths = sorted({-(-n_cols // k) for k in range(1, n_cols + 1)}, reverse=True) if n_cols else [0]
    for width in widths:
        if width > max_cols:
            continue
        room = max_bytes - fixed - width * arrow_io.MSA_COLUMN_BYTES
        if room < 0:
            continue
        height = min(n_rows, max_rows, max_cells // width if width else n_rows,
                     room // (width * arrow_io.MSA_CELL_BYTES + arrow_io.MSA_ROW_BYTES))  # fmt: skip
        if height < 1 and n_rows:
            continue
        tiles = (-(-n_cols // width) if width else 1) * (-(-n_rows // height) if height else 1)
        if best is None or tiles < best[0]:
            best = (tiles, height, width)
    if best is None:
        return 1, 1
    return max(best[1], 1), max(best[2], 1)


def _join_msa_blocks(grid: list[list[MSABlock]]) -> MSABlock:
    """One block of the blocks of ``grid`` (a list of rows of blocks: each row the same rows of
    the MSA, each column of blocks the same columns), as one request would have answered it."""
    first = grid[0]
    return MSABlock(
        key=first[0].key,
        residues=np.concatenate([np.concatenate([b.residues for b in row], axis=1) for row in grid]),
        deletions=np.concatenate([np.concatenate([b.deletions for b in row], axis=1) for row in grid]),
        species=np.concatenate([row[0].species for row in grid]),
        source=np.concatenate([row[0].source for row in grid]),
        profile=np.concatenate([b.profile for b in first]),
        deletion_mean=np.concatenate([b.deletion_mean for b in first]),
        depth=first[0].depth,
        length=first[0].length,
    )


def _structured(group: str, fields: Sequence[str], columns: Any) -> np.ndarray:
    """Columns of ``group`` (``fields`` of them, in the group's order) as one structured array of
    those fields (types.py's dtypes, packed: a part's records without the fields it lacks)."""
    full = ENTRY_GROUPS[group]
    dtype = np.dtype([(f, full.fields[f][0]) for f in fields])  # type: ignore[index]
    n = len(columns[fields[0]]) if fields else 0
    out = np.empty(n, dtype=dtype)
    for f in fields:
        out[f] = columns[f]
    return out


def _arrays_params(arrays: Sequence[str] | None) -> dict[str, Any] | None:
    if arrays is None:
        return None
    if isinstance(arrays, str):
        arrays = [arrays]
    parse_array_selection(arrays)  # unknown names raise NotFound, as in the local reader
    return {"arrays": ",".join(arrays)}  # "" = no arrays, as ``entry(id, [])`` locally


def _index_spec(sel: Sequence[int] | slice | np.ndarray | None) -> str | None:
    """A selection as the service's spec: ``None`` → all, slices as ``a:b``, index lists with
    consecutive runs folded into closed ranges (``0,5:9,12``). The service takes no steps and no
    negative numbers: :meth:`LookupClient.msa` resolves every selection to indices first."""
    if sel is None:
        return None
    if isinstance(sel, slice):
        if sel.step not in (None, 1):
            raise InvalidRequest(f"slice step {sel.step} is not supported; pass the indices")
        if (sel.start or 0) < 0 or (sel.stop is not None and sel.stop < 0):
            raise InvalidRequest("negative slice bounds are not supported")
        return f"{'' if sel.start is None else int(sel.start)}:{'' if sel.stop is None else int(sel.stop)}"
    idx = np.asarray(sel, dtype=np.int64).reshape(-1)
    if idx.size == 0:
        return ""
    if idx.min() < 0:
        raise InvalidRequest("negative indices are not supported")
    ends = np.flatnonzero(np.diff(idx) != 1)  # the last index of each run but the last
    firsts = idx[np.r_[0, ends + 1]].tolist()
    lasts = idx[np.r_[ends, idx.size - 1]].tolist()
    # one run "a:b" alone reads as a slice: the same indices
    return ",".join(str(a) if a == b else f"{a}:{b + 1}" for a, b in zip(firsts, lasts, strict=True))
