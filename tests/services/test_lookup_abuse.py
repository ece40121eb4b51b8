"""Bad requests get 4xx answers that say what was wrong — never a 5xx — and nothing outside the
store is ever opened. The server is a real uvicorn in a thread of this process, so an audit hook
sees every file it opens; requests go over raw sockets so ``..`` reaches the server as sent."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from lookup_helpers import metric_samples, metric_sum, opened_files, raw_request
from pydantic import SecretStr

from featurecache.store.reader import LocalStore
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings

TOKEN = "s3cret-token"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, sample_store: Path) -> Iterator[tuple[str, Path, Path]]:
    """A server over a copy of the sample store, with a canary file beside the store."""
    root = tmp_path_factory.mktemp("guarded")
    store = root / "store"
    shutil.copytree(sample_store, store)
    canary = root / "secret.txt"
    canary.write_text("must never be opened by the server\n")
    with ThreadedServer(Settings(store_path=store, auth_token=None)) as url:
        yield url, store, canary


@pytest.fixture(scope="module")
def limited(sample_store: Path) -> Iterator[str]:
    settings = Settings(
        store_path=sample_store, max_batch_entries=3, max_response_bytes=20_000, max_page_size=2,
        max_msa_rows=4, max_msa_cols=6, max_msa_cells=12, max_body_bytes=2_000,
    )  # fmt: skip
    with ThreadedServer(settings) as url:
        yield url


@pytest.fixture(scope="module")
def protected(sample_store: Path) -> Iterator[str]:
    with ThreadedServer(Settings(store_path=sample_store, auth_token=SecretStr(TOKEN))) as url:
        yield url


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _program_source(path: str) -> bool:
    """The server's own Python source (error handling may read it for tracebacks)."""
    p = Path(path).resolve()
    roots = [REPO / "featurecache", REPO / "services", Path(sys.prefix), Path(sys.base_prefix)]
    return p.suffix in (".py", ".pyc") and any(_inside(p, r.resolve()) for r in roots)


def _json(payload: bytes) -> dict:  # type: ignore[type-arg]
    return json.loads(payload)


def test_traversal_and_malformed_ids(
    guarded: tuple[str, Path, Path], reference: LocalStore, no_shared_clusters: None
) -> None:
    # no_shared_clusters: the shared build clusters' monitors in this process read /proc meanwhile
    url, store, canary = guarded
    entry_id = reference.ids[0]
    key = reference.msas.column("key")[0].as_py() if reference.msas.num_rows else "0" * 20
    rel = "../secret.txt"
    cases = [
        # (target, expected statuses)
        ("/v1/entries/..", {404, 422}),
        ("/v1/entries/%2e%2e", {422}),
        ("/v1/entries/%2E%2E%2Fsecret.txt", {404}),
        (f"/v1/entries/{rel}", {404}),
        ("/v1/entries/..%2F..%2Fsecret.txt", {404}),
        ("/v1/entries/../../../../etc/passwd", {404}),
        ("/v1/entries/%2e%2e%2f%2e%2e%2fetc%2fpasswd", {404}),
        ("/v1/entries//etc/passwd", {404}),
        (f"/v1/entries/{canary}", {404}),
        ("/v1/entries/%2Fetc%2Fpasswd", {404}),
        ("/v1/entries/.hidden", {422}),
        ("/v1/entries/a%00b", {422}),
        ("/v1/entries/..%5C..%5Csecret.txt", {422}),
        ("/v1/entries/" + "x" * 300, {404}),  # a long id is an id (nested inputs: review R12 s39 M2)
        ("/v1/entries/" + "x" * 9000, {422}),
        (f"/v1/entries/{entry_id}?arrays=../../secret.txt", {422}),
        (f"/v1/entries/{entry_id}?arrays=%2Fetc%2Fpasswd", {422}),
        ("/v1/msas/%2e%2e", {422}),
        ("/v1/msas/..%2F..%2Fsecret.txt", {404}),
        (f"/v1/msas/{key}?rows=../secret", {422}),
        (f"/v1/msas/{key}?cols=1:2:3", {422}),
        (f"/v1/msas/{key}?cols=-1", {422}),
        ("/v1/tables/..%2F..%2Fsecret", {404}),
        ("/v1/tables/%2e%2e", {404}),
        ("/v1/tables/entries?columns=../../secret.txt", {422}),
        ("/v1/../secret.txt", {404}),
    ]
    posts = [
        ({"ids": ["../secret.txt"]}, {422}),
        ({"ids": [str(canary)]}, {422}),
        ({"ids": [".."]}, {422}),
        ({"ids": [entry_id], "arrays": ["../../secret.txt"]}, {422}),
    ]
    # The request counters are process-wide (every in-process server of earlier tests adds to
    # them, e.g. the damaged-store tests' 500s): count only this test's own answers.
    before = metric_samples(httpx.get(f"{url}/metrics").text)
    with httpx.Client(base_url=url) as http:  # warm every code path before recording
        assert http.get(f"/v1/entries/{entry_id}").status_code == 200
        assert http.get("/v1/entries/%2e%2e").status_code == 422
        assert http.get(f"/v1/msas/{key}", params={"rows": "0", "cols": "0"}).status_code in (200, 404)
    with opened_files() as opened:
        for target, want in cases:
            status, body = raw_request(url, "GET", target)
            assert status in want, (target, status, body[:300])
            assert "detail" in _json(body), target
        for doc, want in posts:
            status, body = raw_request(url, "POST", "/v1/entries:batch", json.dumps(doc).encode(),
                                       {"Content-Type": "application/json"})  # fmt: skip
            assert status in want, (doc, status, body[:300])
    assert str(canary) not in opened and not any(Path(p).name == canary.name for p in opened)
    outside = [
        p for p in opened if not _inside(Path(p).resolve(), store.resolve()) and not _program_source(p)
    ]
    assert outside == [], f"the server opened files outside the store: {outside[:10]}"
    # and it never answered 5xx to any of it (nor to the warm-up requests)
    after = metric_samples(httpx.get(f"{url}/metrics").text)
    reqs = "featurecache_lookup_requests_total"
    assert metric_sum(after, reqs) - metric_sum(before, reqs) >= len(cases) + len(posts)
    five = {
        lab: v - before.get((n, lab), 0.0) for (n, lab), v in after.items()
        if n == reqs and dict(lab)["status"].startswith("5") and v != before.get((n, lab), 0.0)
    }  # fmt: skip
    assert five == {}, f"5xx answers counted during this test (labels: count): {five}"


def test_unknown_ids_are_404_and_named(guarded: tuple[str, Path, Path], reference: LocalStore) -> None:
    url, store, _ = guarded
    with httpx.Client(base_url=url) as http:
        answers = [
            ("9zzz-not-here", http.get("/v1/entries/9zzz-not-here")),
            (
                "9yyy-missing",
                http.post("/v1/entries:batch", json={"ids": [reference.ids[0], "9yyy-missing"]}),
            ),
            ("feedfacefeedfaceface", http.get("/v1/msas/feedfacefeedfaceface")),
            ("no_such_table", http.get("/v1/tables/no_such_table")),
        ]
        for name, r in answers:
            assert r.status_code == 404 and name in r.json()["detail"], (name, r.text)
            # the server's filesystem is not the client's business
            assert str(store) not in r.text and str(store.parent) not in r.text, r.text
        assert http.get("/v1/nothing-here").status_code == 404
        info = http.get("/v1/info")
        assert info.status_code == 200 and "path" not in info.json()
        assert str(store.parent) not in info.text


def test_malformed_requests_are_422(guarded: tuple[str, Path, Path], reference: LocalStore) -> None:
    url = guarded[0]
    entry_id = reference.ids[0]
    with httpx.Client(base_url=url, headers={"content-type": "application/json"}) as http:
        for body in (b"{not json", b"", b"[1, 2", b'{"ids": "102m"}', b'{"ids": [1, 2]}', b'{"ids": ["a"], "extra": 1}',
                     b'{"ids": null}', b"null", b'"ids"'):  # fmt: skip
            r = http.post("/v1/entries:batch", content=body)
            assert r.status_code == 422, (body, r.status_code, r.text[:200])
        for params in ({"arrays": "atoms/velocity"}, {"arrays": "nonsense"}, {"arrays": ","}):
            r = http.get(f"/v1/entries/{entry_id}", params=params)
            assert r.status_code == 422 and "detail" in r.json(), params
        listing_params: list[dict[str, Any]] = [
            {"released_after": "yesterday"},
            {"released_before": "2020-13-01"},
            {"mol_type": "plasma"},
            {"limit": 0},
            {"offset": -1},
            {"max_resolution": "high"},
            {"min_tokens": -5},
            {"max_resolution": "nan"},
        ]  # fmt: skip (nan: 200 with no entries before)
        for params in listing_params:
            r = http.get("/v1/entries", params=params)
            assert r.status_code == 422, (params, r.status_code, r.text[:200])
        # a column asked for twice is sent once (it came twice, two fields of one name)
        r = http.get("/v1/tables/entries", params=[("columns", "id"), ("columns", "id,id")])
        assert r.status_code == 200 and pa.ipc.open_stream(r.content).read_all().column_names == ["id"]
        if reference.msas.num_rows:
            key = reference.msas.column("key")[0].as_py()
            depth = reference.msas.column("depth")[0].as_py()
            for params in (
                {"rows": "x"},
                {"rows": "1:2:3"},
                {"cols": "5:2"},
                {"rows": f"{depth}"},
                {"rows": f"0:{depth + 1}"},
            ):
                r = http.get(f"/v1/msas/{key}", params=params)
                assert r.status_code == 422, (params, r.status_code, r.text[:200])
            r = http.post(f"/v1/msas/{key}:slice", content=b'{"rows": [-1]}')
            assert r.status_code == 422
            # indices past int64: a client's typo, not store damage (was a 500 "store could not be read")
            huge = "99999999999999999999999"
            for params in ({"rows": f"0,{huge}"}, {"cols": f"{huge}:"}, {"rows": f"0,0:{huge}"}):
                r = http.get(f"/v1/msas/{key}", params=params)
                assert r.status_code in (413, 422), (params, r.status_code, r.text[:200])
            for body in (f'{{"cols": [{huge}]}}', f'{{"rows": "0,{huge}"}}', f'{{"rows": [0, {huge}]}}'):
                r = http.post(f"/v1/msas/{key}:slice", content=body.encode())
                assert r.status_code == 422, (body, r.status_code, r.text[:200])


def test_limits_answer_413_naming_the_limit(limited: str, reference: LocalStore) -> None:
    ids = reference.ids
    with httpx.Client(base_url=limited) as http:
        r = http.post("/v1/entries:batch", json={"ids": ids[:4]})
        assert r.status_code == 413 and r.json()["limit"] == "max_batch_entries" and r.json()["max"] == 3
        assert "max_batch_entries=3" in r.json()["detail"]
        assert (
            http.post("/v1/entries:batch", json={"ids": ids[:3], "arrays": ["tokens/restype"]}).status_code
            == 200
        )
        big = max(ids, key=lambda i: reference.entry_meta(i)["atom_count"])
        r = http.get(f"/v1/entries/{big}")
        assert r.status_code == 413 and r.json()["limit"] == "max_response_bytes"
        assert http.get(f"/v1/entries/{big}", params={"arrays": "tokens/restype"}).status_code == 200
        r = http.get("/v1/entries", params={"limit": 3})
        assert r.status_code == 413 and r.json()["limit"] == "max_page_size"
        r = http.post("/v1/entries:batch", json={"ids": ["x" * 100] * 30})
        assert r.status_code == 413 and r.json()["limit"] == "max_body_bytes"
        if reference.msas.num_rows:
            t = reference.msas.to_pylist()
            row = max(t, key=lambda m: m["depth"])
            key = row["key"]
            r = http.get(f"/v1/msas/{key}", params={"rows": "0:5", "cols": "0:1"})
            assert r.status_code == 413 and r.json()["limit"] == "max_msa_rows"
            r = http.get(f"/v1/msas/{key}", params={"rows": "0:1", "cols": "0:7"})
            assert r.status_code == 413 and r.json()["limit"] == "max_msa_cols"
            r = http.get(f"/v1/msas/{key}", params={"rows": "0:3", "cols": "0:5"})
            assert r.status_code == 413 and r.json()["limit"] == "max_msa_cells"
            r = http.get(f"/v1/msas/{key}", params={"rows": "0:2", "cols": "0:6"})
            assert r.status_code == 200
            # a short spec of many indices is refused before its list is built (it was built first:
            # ~1 GB of server memory for 0:16000000, then 422 "too many indices" past 2**24)
            r = http.get(f"/v1/msas/{key}", params={"rows": "0,0:20000000"})
            assert r.status_code == 413 and r.json()["limit"] == "max_msa_rows", r.text[:200]
            r = http.post(f"/v1/msas/{key}:slice", json={"rows": "0", "cols": "0,0:20000000"})
            assert r.status_code == 413 and r.json()["limit"] == "max_msa_cols", r.text[:200]


def test_token_required_everywhere_but_health_and_docs(protected: str, reference: LocalStore) -> None:
    good = {"authorization": f"Bearer {TOKEN}"}
    entry = f"/v1/entries/{reference.ids[0]}"
    with httpx.Client(base_url=protected) as http:
        assert http.get("/v1/health").status_code == 200
        # a browser cannot send a bearer token with a page load: the docs are public ...
        docs = http.get("/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower()
        assert http.get("/redoc").status_code == 200
        assert http.get("/docs/oauth2-redirect").status_code == 200
        schema = http.get("/openapi.json").json()
        # ... and declare the token, so /docs offers "Authorize" and sends it
        assert schema["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
        assert schema["security"] == [{"bearer": []}]
        assert schema["paths"]["/v1/health"]["get"]["security"] == []
        assert "security" not in schema["paths"]["/metrics"]["get"]  # the global rule: token needed
        for path in ("/v1/ready", "/v1/info", entry, "/v1/entries", "/metrics", "/v1/tables/entries",
                     "/no/such/route", "/openapi.json/x", "/docsx"):  # fmt: skip
            r = http.get(path)
            assert r.status_code == 401, path
            assert "missing bearer token" in r.json()["detail"]
            assert r.headers["www-authenticate"].startswith("Bearer")
            for wrong in ("Bearer nope", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN, "Bearer"):
                r = http.get(path, headers={"authorization": wrong})
                assert r.status_code == 401 and r.json()["detail"] == "invalid bearer token", (path, wrong)
        r = http.post("/v1/entries:batch", json={"ids": reference.ids[:1]})
        assert r.status_code == 401
        assert http.get(entry, headers=good).status_code == 200
        assert http.get("/metrics", headers=good).status_code == 200
        r = http.post("/v1/entries:batch", json={"ids": reference.ids[:2]}, headers=good)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/vnd.apache.arrow")
