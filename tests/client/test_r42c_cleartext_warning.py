"""Review R42c s52 #6: a token or URL credentials sent over plain ``http://`` to a host other than
this machine get one WARNING.

The bearer token went in clear text to any ``http://`` host without a word. The client now says so
once per process and server (a copy of a client that said it, as a loader worker's client is, does
not say it again), at construction, before any connection; nothing for ``https://`` or this
machine's loopback (``localhost``, 127.0.0.0/8, ``::1``). A real ``featurecache serve`` on a
non-loopback address of this machine (where it has one), no mocks."""

from __future__ import annotations

import itertools
import logging
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from featurecache.auth import TOKEN_FILE_ENV
from featurecache.client.http import TOKEN_ENV, LookupClient
from tests.client.test_r42c_url_credentials_not_logged import _serve, _stop

WARN_LOGGER = "featurecache.client.http"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == WARN_LOGGER and r.levelno == logging.WARNING]


_PORTS = itertools.count(47311)


def _unique_port() -> int:
    """A port number no other test of this process used for a 192.0.2.1 URL (the warning is once per
    process and server): no connection is made to it."""
    return next(_PORTS)


def _assert_cleartext_warning(message: str, shown: str, host: str, secrets: tuple[str, ...]) -> None:
    assert message.startswith(f"LookupClient {shown}:"), message
    assert f"plain http:// to {host}" in message and "clear text" in message, message
    assert "https://" in message and "TLS" in message and "deploy/README.md" in message, message
    assert not any(s in message for s in secrets), message


def test_a_token_over_http_to_another_host_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://192.0.2.1:{_unique_port()}"  # TEST-NET-1: never contacted (said at construction)
    with caplog.at_level(logging.WARNING, logger=WARN_LOGGER):
        client = LookupClient(url, token="PLAINTOKEN77")
        said = _warnings(caplog)
        assert len(said) == 1, said
        _assert_cleartext_warning(said[0], url, "192.0.2.1", ("PLAINTOKEN77",))
        assert "bearer token" in said[0]
        # the same server again, a loader worker's copy, a pickled copy: not again
        again = LookupClient(url, token="PLAINTOKEN77")
        copy = LookupClient(**client.settings())
        pickled = pickle.loads(pickle.dumps(client))
        assert _warnings(caplog) == said
    for c in (client, again, copy, pickled):
        c.close()


def test_url_credentials_over_http_to_another_host_warn_without_showing_them(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    port = _unique_port()
    with caplog.at_level(logging.WARNING, logger=WARN_LOGGER):
        client = LookupClient(f"http://alice:CLEARPW99@192.0.2.1:{port}/")
    client.close()
    said = _warnings(caplog)
    assert len(said) == 1, said
    _assert_cleartext_warning(said[0], f"http://192.0.2.1:{port}", "192.0.2.1", ("CLEARPW99", "alice"))
    assert "user name and password" in said[0]


#: a spawned process: a fresh client warns; a copy (pickled, as a spawned loader worker gets it) does not
_CHILD = """
import logging, pickle, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(levelname)s %(message)s")
from featurecache.client.http import LookupClient
if sys.argv[1] == "fresh":
    LookupClient(sys.argv[2], token="PLAINTOKEN77").close()
else:
    with open(sys.argv[2], "rb") as f:
        pickle.load(f).close()
print("done")
"""


def test_a_copy_in_a_spawned_process_does_not_warn_again(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    url = f"http://192.0.2.1:{_unique_port()}"
    with caplog.at_level(logging.WARNING, logger=WARN_LOGGER):
        client = LookupClient(url, token="PLAINTOKEN77")
    assert len(_warnings(caplog)) == 1
    state = tmp_path / "client.pickle"
    state.write_bytes(pickle.dumps(client))
    client.close()

    def child(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0 and "done" in done.stdout, done.stderr
        return done.stdout

    fresh = child("fresh", url)  # another process, another client: says it (once)
    assert fresh.count("clear text") == 1 and fresh.startswith("WARNING LookupClient"), fresh
    assert "clear text" not in child("copy", str(state)), "a copy of a client that warned warned again"


@pytest.mark.parametrize(
    "url",
    [
        "https://192.0.2.1:8443",
        "HTTPS://192.0.2.1:8443",
        "http://127.0.0.1:8000",
        "http://127.4.5.6:8000",
        "http://localhost:8000",
        "http://LocalHost:8000/",
        "http://[::1]:8000",
        "http://[::ffff:127.0.0.1]:8000",
    ],
)
def test_no_warning_for_https_or_this_machines_loopback(url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=WARN_LOGGER):
        LookupClient(url, token="PLAINTOKEN77").close()
        LookupClient(url.replace("://", "://alice:pw@"), token="").close()
    assert _warnings(caplog) == []


def test_no_warning_without_credentials(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    with caplog.at_level(logging.DEBUG, logger=WARN_LOGGER):
        LookupClient(f"http://192.0.2.1:{_unique_port()}").close()
    assert _warnings(caplog) == []


def _local_non_loopback_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (the one it would route TEST-NET by;
    a UDP "connect" sends nothing), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            address = str(s.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_a_real_service_on_a_non_loopback_address_warns_once_over_many_requests(
    sample_store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    address = _local_non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to serve on")
    token = "REALTOKEN-r42c-6"
    proc, url = _serve(sample_store, host=address, token=token)
    try:
        with caplog.at_level(logging.WARNING, logger=WARN_LOGGER):
            client = LookupClient(url, token=token)
            ids = client.ids
            for entry_id in ids[:3]:
                client.entry(entry_id, arrays=["bonds"])
            copy = LookupClient(**client.settings())  # a worker's client: its own connections
            assert copy.ids == ids
            client.close()
            copy.close()
    finally:
        _stop(proc)
    said = _warnings(caplog)
    assert len(said) == 1, said
    _assert_cleartext_warning(said[0], url, address, (token,))
