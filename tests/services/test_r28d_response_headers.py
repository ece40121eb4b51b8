"""Answers carry ``cache-control: no-store`` (a store is rebuilt in place under the same URLs: no
cache may answer from an earlier build) and no ``server`` banner (review R28d s46 #9). Through
``featurecache serve`` (the session's 2-worker server), whose uvicorn options are the ones shipped."""

from __future__ import annotations

import httpx

from featurecache.store.reader import LocalStore


def test_answers_are_not_stored_and_carry_no_server_banner(lookup_url: str, reference: LocalStore) -> None:
    key = str(reference.msas.column("key")[0].as_py())
    entry = reference.ids[0]
    with httpx.Client(base_url=lookup_url, timeout=30) as http:
        answers = {
            "info": http.get("/v1/info"),
            "table": http.get("/v1/tables/entries"),
            "listing": http.get("/v1/entries", params={"limit": 2}),
            "entry": http.get(f"/v1/entries/{entry}"),
            "entry HEAD": http.head(f"/v1/entries/{entry}"),
            "batch": http.post("/v1/entries:batch", json={"ids": [entry, entry]}),
            "rows": http.post(f"/v1/entries/{entry}:rows", json={"group": "atoms", "ranges": [[0, 2]]}),
            "msa": http.get(f"/v1/msas/{key}", params={"rows": "0:2"}),
            "msa slice": http.post(f"/v1/msas/{key}:slice", json={"rows": [0], "cols": [0, 1]}),
            "404": http.get("/v1/entries/no-such-entry"),
            "422": http.post(f"/v1/msas/{key}:slice", json={"rows": [-1]}),
            "health": http.get("/v1/health"),
        }
    for name, r in answers.items():
        assert r.status_code < 500, (name, r.status_code)
        assert r.headers.get("cache-control") == "no-store", (name, dict(r.headers))
        assert "server" not in r.headers, (name, r.headers["server"])
