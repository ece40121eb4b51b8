"""A service without a token answers its data routes only for a ``Host`` a DNS-rebinding page cannot
send: no Host, an address, a name without a dot, serve's ``--host``, the names of
``FEATURECACHE_ALLOWED_HOSTS``; any other is a 400 naming that setting (review R28d s46 #5: any Host
was answered, so a page on ``attacker.example`` rebound to 127.0.0.1 read the whole store).
Liveness, readiness and the docs answer whatever the Host; with a token there is no check."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from featurecache.client.http import LookupClient
from featurecache.store.reader import LocalStore
from services.lookup.server import ThreadedServer, background_server
from services.lookup.settings import Settings

REBINDING = "attacker.example:8000"
ANSWERED = ["127.0.0.1:8000", "localhost:8000", "LOCALHOST.", "[::1]:8000", "10.1.2.3:8000", "lookup:8000"]


@pytest.fixture(scope="module")
def serve(sample_store: Path) -> Iterator[str]:
    """``featurecache serve`` (2 workers, 127.0.0.1), without a token."""
    with background_server(sample_store, workers=2, env={"FEATURECACHE_AUTH_TOKEN": ""}) as url:
        yield url


def _data_routes(reference: LocalStore) -> list[tuple[str, str, dict[str, object] | None]]:
    key, entry = str(reference.msas.column("key")[0].as_py()), reference.ids[0]
    return [
        ("GET", "/v1/info", None), ("GET", "/v1/tables/entries", None), ("GET", f"/v1/entries/{entry}", None),
        ("HEAD", f"/v1/entries/{entry}", None), ("POST", "/v1/entries:batch", {"ids": [entry]}),
        ("POST", f"/v1/msas/{key}:slice", {"rows": [0]}), ("GET", f"/v1/msas/{key}", None),
    ]  # fmt: skip


def _status(url: str, method: str, path: str, host: str, body: dict[str, object] | None = None,
            token: str | None = None) -> httpx.Response:  # fmt: skip
    headers = {"host": host} | ({"authorization": f"Bearer {token}"} if token else {})
    return httpx.request(method, url + path, headers=headers, json=body, timeout=30)


def test_a_rebinding_host_is_refused_on_every_data_route(serve: str, reference: LocalStore) -> None:
    for method, path, body in _data_routes(reference):
        r = _status(serve, method, path, REBINDING, body)
        assert r.status_code == 400, (method, path, r.status_code)
        if method != "HEAD":
            assert (
                "FEATURECACHE_ALLOWED_HOSTS" in r.json()["detail"]
                and "attacker.example" in r.json()["detail"]
            )
        for host in ANSWERED:
            assert _status(serve, method, path, host, body).status_code == 200, (method, path, host)


def test_probes_and_docs_answer_whatever_the_host(serve: str) -> None:
    for path in ("/v1/health", "/v1/ready", "/openapi.json", "/docs"):
        assert _status(serve, "GET", path, REBINDING).status_code == 200, path


def test_the_client_is_answered(serve: str, reference: LocalStore) -> None:
    client = LookupClient(serve)
    try:
        assert client.entry(reference.ids[0]).id == reference.ids[0]
    finally:
        client.close()
    with httpx.Client(base_url=serve.replace("127.0.0.1", "localhost")) as http:
        assert http.get("/v1/info").status_code == 200


@pytest.mark.parametrize(
    ("allowed", "answered", "refused"),
    [
        ("lookup.cluster.local, *.example.org", ["lookup.cluster.local:80", "a.b.example.org", "Lookup.Cluster.Local."],
         ["example.org", "cluster.local", REBINDING]),
        ("*", [REBINDING, "example.org"], []),
    ],
)  # fmt: skip
def test_allowed_hosts_setting(
    sample_store: Path, allowed: str, answered: list[str], refused: list[str]
) -> None:
    with ThreadedServer(Settings(store_path=sample_store, auth_token=None, allowed_hosts=allowed)) as url:
        for host in answered:
            assert _status(url, "GET", "/v1/info", host).status_code == 200, host
        for host in refused:
            assert _status(url, "GET", "/v1/info", host).status_code == 400, host


def test_the_host_serve_listens_on_is_answered(sample_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from services.lookup.hosts import SERVE_HOST_ENV

    monkeypatch.setenv(SERVE_HOST_ENV, "myhost.lan")
    with ThreadedServer(Settings(store_path=sample_store, auth_token=None)) as url:
        assert _status(url, "GET", "/v1/info", "myhost.lan:8000").status_code == 200
        assert _status(url, "GET", "/v1/info", "otherhost.lan:8000").status_code == 400


def test_no_check_with_a_token(sample_store: Path) -> None:
    with ThreadedServer(Settings(store_path=sample_store, auth_token=SecretStr("tok"))) as url:
        assert _status(url, "GET", "/v1/info", REBINDING, token="tok").status_code == 200
        assert _status(url, "GET", "/v1/info", REBINDING).status_code == 401


def test_host_names() -> None:
    from services.lookup.hosts import HostCheck, host_name

    assert host_name("Example.ORG.:8000") == "example.org"
    assert host_name("[::1]:8000") == "::1" and host_name("[fe80::1]") == "fe80::1"
    check = HostCheck.of("", None)
    assert check is not None
    assert check.refusal(None) is None and check.refusal("x") is None and check.refusal("[::1]") is None
    assert check.refusal("evil.example.") is not None and check.refusal("127.0.0.1.nip.io") is not None
