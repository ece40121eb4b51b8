"""``redact_url`` (review R42c s52 #9): what messages, logs, reprs and a training run's records show
of a lookup-service URL holds neither the ``user:password@`` of its authority nor the values of its
query (a proxy in front of the service may take a token there: ``?access_token=``) or its fragment;
the client itself still sends the URL as given."""

from __future__ import annotations

import pytest

from featurecache.auth import redact_url
from featurecache.client.http import LookupClient
from featurecache.client.job import ServiceSpec

SECRET = "QS3cr3t77"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"http://h:9/?token={SECRET}", "http://h:9/?token=***"),
        (f"https://u:pw@h:9/api?access_token={SECRET}&x=1", "https://h:9/api?access_token=***&x=***"),
        (f"http://h:9/v1?{SECRET}", "http://h:9/v1?***"),  # a bare word: perhaps the secret itself
        (f"http://h:9/v1?a=&token={SECRET}", "http://h:9/v1?a=&token=***"),  # an empty value stays empty
        (f"http://h:9/v1#access_token={SECRET}", "http://h:9/v1#***"),
        (f"http://u:{SECRET}@h:9/v1", "http://h:9/v1"),
        (f"http://u:{SECRET}@[::1]:8000", "http://[::1]:8000"),
        (f"HTTPS://u:{SECRET}@h:9", "https://h:9"),
        (f"u:{SECRET}@h:9/x?t={SECRET}", "h:9/x?t=***"),  # as typed without a scheme
        ("http://h:9/v1", "http://h:9/v1"),  # nothing to hide: unchanged
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
    ],
)
def test_redact_url_hides_userinfo_query_values_and_fragment(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact_url(shown) == shown  # redacting twice changes nothing


def test_a_url_urlsplit_refuses_is_still_redacted() -> None:
    """``http://u:pw@[::1`` (no closing bracket) is a ValueError to urlsplit: no traceback, no secret."""
    shown = redact_url(f"http://u:{SECRET}@[::1:8000/x?t={SECRET}")
    assert SECRET not in shown and "[::1:8000" in shown, shown


def test_the_client_sends_the_url_as_given_and_shows_it_redacted() -> None:
    url = f"http://u:{SECRET}@127.0.0.1:9/svc?token={SECRET}"
    client = LookupClient(url, retry_budget_s=0.5, backoff=0.05)
    try:
        assert client.url == url  # what it connects to: unchanged
        assert SECRET not in client.shown_url and SECRET not in repr(client), repr(client)
        assert client.shown_url == "http://127.0.0.1:9/svc?token=***"
    finally:
        client.close()
    spec = ServiceSpec(LookupClient, {"url": url})
    assert SECRET not in repr(spec) and SECRET not in str(spec)
