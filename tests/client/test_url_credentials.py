"""A lookup-service URL may carry ``user:password@`` (httpx sends it as basic auth); no repr, log
line or error message of the client shows it (the token never showed; the URL's own secret did)."""

from __future__ import annotations

import logging
import socket

import pytest

from featurecache.auth import redact_url
from featurecache.client.http import LookupClient
from featurecache.client.job import ServiceSpec
from featurecache.errors import FeatureCacheError

SECRET = "s3cr3t-pw"


def _refused_url() -> str:
    """A URL with credentials to a 127.0.0.1 port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://reader:{SECRET}@127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:pw@h:9/api?x=1", "https://h:9/api?x=***"),  # query values too (review R42c s52 #9)
        ("http://u@h:9", "http://h:9"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("http://u:pw@[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_redact_url_drops_the_userinfo_and_query_values(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_reprs_and_errors_do_not_show_the_urls_password(caplog: pytest.LogCaptureFixture) -> None:
    url = _refused_url()
    client = LookupClient(url, retry_budget_s=0.5, backoff=0.05)
    spec = ServiceSpec(LookupClient, {"url": url})
    assert SECRET not in repr(client) and "127.0.0.1" in repr(client)
    assert SECRET not in repr(spec) and SECRET not in str(spec)
    with caplog.at_level(logging.DEBUG), pytest.raises(FeatureCacheError) as err:
        client.table("entries")
    assert "127.0.0.1" in str(err.value)  # the message still names where it tried
    assert SECRET not in str(err.value)
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    assert client.url == url.rstrip("/")  # the connection itself keeps the credentials
