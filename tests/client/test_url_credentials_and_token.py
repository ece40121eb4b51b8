"""A lookup URL with ``user:password@`` and a bearer token: refused, naming why (review R17 s40 #1).

httpx sends a URL's credentials as HTTP Basic auth, which replaces the ``Authorization: Bearer``
header the client sets: the service answered "invalid bearer token" for a token that was never
sent, and ``featurecache train`` told the user their token was not the service's, while the
message (credentials redacted) gave no hint of the URL's part in it."""

from __future__ import annotations

import pytest

from featurecache.client.http import LookupClient
from featurecache.errors import InvalidRequest


def test_credentials_in_the_url_and_a_token_are_refused() -> None:
    with pytest.raises(InvalidRequest, match=r"user name and password.*in place of the bearer token") as err:
        LookupClient("http://user:secret@127.0.0.1:9", token="T")
    assert "secret" not in str(err.value)  # the message redacts the URL's credentials


def test_credentials_alone_are_kept_for_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEATURECACHE_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("FEATURECACHE_AUTH_TOKEN_FILE", raising=False)
    client = LookupClient("http://user:secret@127.0.0.1:9")
    assert client.token is None and "secret" not in client.shown_url
