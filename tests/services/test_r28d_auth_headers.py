"""A request carrying more than one ``Authorization`` header is refused (401 naming why), whichever
of them holds the token (review R28d s46 #4: the last one decided here, where Starlette and most
proxies read the first)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings

TOKEN = "r28d-token"


@pytest.fixture(scope="module")
def protected(sample_store: Path) -> Iterator[str]:
    with ThreadedServer(Settings(store_path=sample_store, auth_token=SecretStr(TOKEN))) as url:
        yield url


@pytest.mark.parametrize("order", [("wrong", TOKEN), (TOKEN, "wrong"), (TOKEN, TOKEN)])
def test_two_authorization_headers_answer_401(protected: str, order: tuple[str, str]) -> None:
    headers = [("Authorization", f"Bearer {value}") for value in order]
    r = httpx.get(f"{protected}/v1/info", headers=headers)
    assert r.status_code == 401, (order, r.status_code)
    assert r.json()["detail"] == "2 Authorization headers: send exactly one"
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert TOKEN not in r.text


def test_one_authorization_header_still_admits(protected: str) -> None:
    assert httpx.get(f"{protected}/v1/info", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
