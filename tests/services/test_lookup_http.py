"""The lookup service over HTTP: a real ``featurecache serve --workers 2`` on 127.0.0.1.

Expected values come from the store opened directly and from the entries' own arrays.
"""

from __future__ import annotations

import random
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow.ipc as ipc
import pytest
from lookup_helpers import metric_samples, metric_sum

from featurecache.client.http import LookupClient
from featurecache.const import MolType
from featurecache.store import arrow_io
from featurecache.store.reader import LocalStore


def test_health_ready_and_docs(lookup_url: str, reference: LocalStore) -> None:
    assert httpx.get(f"{lookup_url}/v1/health").json() == {"status": "ok"}
    ready = httpx.get(f"{lookup_url}/v1/ready")
    assert ready.status_code == 200 and ready.json()["entries"] == len(reference.ids)
    docs = httpx.get(f"{lookup_url}/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    paths = httpx.get(f"{lookup_url}/openapi.json").json()["paths"]
    for p in ("/v1/health", "/v1/ready", "/v1/info", "/v1/entries", "/v1/entries/{entry_id}", "/v1/entries:batch",
              "/v1/msas/{key}", "/v1/tables/{name}", "/metrics"):  # fmt: skip
        assert p in paths, p


def test_the_docs_list_every_route(lookup_url: str) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text()
    listed_text = doc[doc.index("\nRoutes: ") :].split("\n\n", 1)[0]

    def shape(path: str) -> str:  # `GET /v1/entries/{id}?arrays=` -> /v1/entries/{}
        return re.sub(r"\{[^}]*\}", "{}", path.split()[-1].split("?")[0])

    listed = {shape(p) for p in re.findall(r"`((?:GET |POST )?/[^`]*)`", listed_text)}
    served = {shape(p) for p in httpx.get(f"{lookup_url}/openapi.json").json()["paths"]}
    assert served <= listed, f"docs/service.md's route list lacks {sorted(served - listed)}"


def test_entry_is_an_arrow_stream_decoded_without_copies(lookup_url: str, reference: LocalStore) -> None:
    entry_id = reference.ids[0]
    r = httpx.get(f"{lookup_url}/v1/entries/{entry_id}")
    assert r.headers["content-type"] == arrow_io.MEDIA_TYPE
    body = r.content
    # any Arrow reader can open it: one row, one column per array
    table = ipc.open_stream(body).read_all()
    assert table.num_rows == 1 and "atoms/coords" in table.column_names
    start = np.frombuffer(body, np.uint8).__array_interface__["data"][0]
    (record,) = arrow_io.decode(body)
    want = reference.entry(entry_id)
    for name, arr in record.arrays.items():
        g, _, f = name.partition("/")
        np.testing.assert_array_equal(arr, getattr(want, g)[f])
        if arr.size:
            ptr = arr.__array_interface__["data"][0]
            assert start <= ptr < start + len(body), f"{name} was copied out of the response body"
            assert not arr.flags.writeable


def _expected_ids(reference: LocalStore, predicate: Any) -> list[str]:
    return [i for i in reference.ids if predicate(reference.entry(i), reference.entry_meta(i))]


@pytest.mark.parametrize(
    "params, predicate",
    [
        ({"max_resolution": 2.0}, lambda e, m: m["resolution"] == m["resolution"] and m["resolution"] <= 2.0),
        ({"released_after": "2000-01-01"}, lambda e, m: bool(m["release_date"]) and m["release_date"] >= "2000-01-01"),
        ({"released_before": "1999-12-31", "released_after": "1990-01-01"},
         lambda e, m: bool(m["release_date"]) and "1990-01-01" <= m["release_date"] <= "1999-12-31"),
        ({"min_tokens": 300}, lambda e, m: len(e.tokens["restype"]) >= 300),
        ({"max_tokens": 300, "min_atoms": 500}, lambda e, m: len(e.tokens["restype"]) <= 300 and len(e.atoms["coords"]) >= 500),
        ({"mol_type": "ligand"}, lambda e, m: bool((e.tokens["mol_type"] == MolType.LIGAND).any())),
        ({"mol_type": ["protein", "dna"]},
         lambda e, m: bool((e.tokens["mol_type"] == MolType.PROTEIN).any() and (e.tokens["mol_type"] == MolType.DNA).any())),
    ],
)  # fmt: skip
def test_listing_filters(
    lookup_url: str, reference: LocalStore, params: dict[str, Any], predicate: Any
) -> None:
    doc = httpx.get(f"{lookup_url}/v1/entries", params={**params, "limit": 1000}).json()
    expected = _expected_ids(reference, predicate)
    assert [item["id"] for item in doc["items"]] == expected
    assert doc["total"] == len(expected)


def test_listing_pages_cover_every_entry_once(lookup_url: str, reference: LocalStore) -> None:
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        doc = httpx.get(f"{lookup_url}/v1/entries", params={"offset": offset, "limit": 4}).json()
        assert len(doc["items"]) <= 4
        seen += [item["id"] for item in doc["items"]]
        offset = doc["next_offset"]
    assert seen == reference.ids
    item = httpx.get(f"{lookup_url}/v1/entries", params={"limit": 1}).json()["items"][0]
    want = reference.entry(item["id"])
    assert item["token_count"] == len(want.tokens["restype"]) and item["atom_count"] == len(
        want.atoms["coords"]
    )


def test_msa_slice_sends_only_the_asked_columns(lookup_url: str, reference: LocalStore) -> None:
    t = reference.msas
    assert t.num_rows > 0, "the sample store is built with samples/msas: it must hold MSAs"
    row = max(t.to_pylist(), key=lambda r: r["depth"] * r["length"])
    key, depth, length = row["key"], row["depth"], row["length"]
    cols = np.arange(3, length, max(1, length // 8))[:8]
    full = httpx.get(f"{lookup_url}/v1/msas/{key}")
    part = httpx.get(f"{lookup_url}/v1/msas/{key}", params={"cols": ",".join(map(str, cols))})
    (block,) = arrow_io.decode(part.content)
    assert block.arrays["residues"].shape == (depth, len(cols))
    np.testing.assert_array_equal(block.arrays["residues"], reference.msa(key).residues[:, cols])
    # the answer is about 8 columns' worth (+ per-row species/source), far below the whole MSA
    per_cell = 1 + 2  # residues uint8 + deletions int16
    assert len(part.content) < depth * (len(cols) * per_cell + 5) + 8192
    assert len(full.content) >= depth * length * per_cell


def test_many_threads_get_correct_answers(lookup_url: str, reference: LocalStore) -> None:
    rng = random.Random(7)
    ids = reference.ids
    keys = reference.msas.column("key").to_pylist() if reference.msas.num_rows else []
    ops: list[tuple[Any, ...]] = []
    for _ in range(240):
        kind = rng.choice(["entry", "subset", "batch", "msa"] if keys else ["entry", "subset", "batch"])
        if kind == "entry":
            ops.append(("entry", rng.choice(ids)))
        elif kind == "subset":
            ops.append(("subset", rng.choice(ids), ("atoms/coords", "tokens/restype")))
        elif kind == "batch":
            ops.append(("batch", tuple(rng.choices(ids, k=3))))
        else:
            key = rng.choice(keys)
            d, n = (
                reference.msas.filter(reference.msas.column("key").to_numpy(zero_copy_only=False) == key)
                .select(["depth", "length"])
                .to_pylist()[0]
                .values()
            )
            rows = tuple(sorted(rng.sample(range(d), k=min(d, 5))))
            cols = tuple(sorted(rng.sample(range(n), k=min(n, 16))))
            ops.append(("msa", key, rows, cols))
    client = LookupClient(lookup_url, max_connections=32)

    def run(op: tuple[Any, ...]) -> Any:
        if op[0] == "entry":
            return client.entry(op[1])
        if op[0] == "subset":
            return client.entry(op[1], list(op[2]))
        if op[0] == "batch":
            return client.entries_batch(list(op[1]))
        return client.msa(op[1], list(op[2]), list(op[3]))

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(run, ops))
    client.close()
    for op, got in zip(ops, results, strict=True):
        if op[0] in ("entry", "subset"):
            want = reference.entry(op[1], list(op[2]) if op[0] == "subset" else None)
            for g in ("atoms", "tokens", "bonds", "interfaces"):
                assert set(getattr(got, g)) == set(getattr(want, g))
                for f, a in getattr(want, g).items():
                    np.testing.assert_array_equal(getattr(got, g)[f], a)
        elif op[0] == "batch":
            assert [e.id for e in got] == list(op[1])
            for e in got:
                np.testing.assert_array_equal(
                    e.atoms["coords"], reference.entry(e.id, ["atoms/coords"]).atoms["coords"]
                )
        else:
            block = reference.msa(op[1], list(op[2]), list(op[3]))
            np.testing.assert_array_equal(got.residues, block.residues)
            np.testing.assert_array_equal(got.deletions, block.deletions)


def test_metrics_count_across_workers(lookup_url: str, reference: LocalStore) -> None:
    before = metric_samples(httpx.get(f"{lookup_url}/metrics").text)
    n = 12
    with httpx.Client(base_url=lookup_url) as http:
        for i in range(n):
            assert http.get(f"/v1/entries/{reference.ids[i % len(reference.ids)]}").status_code == 200
        assert http.get("/v1/entries/not-there").status_code == 404
    after = metric_samples(httpx.get(f"{lookup_url}/metrics").text)
    served = "featurecache_lookup_entries_served_total"
    assert metric_sum(after, served) - metric_sum(before, served) == n
    route = "/v1/entries/{entry_id}"
    reqs = "featurecache_lookup_requests_total"
    assert (
        metric_sum(after, reqs, route=route, status="200")
        - metric_sum(before, reqs, route=route, status="200")
        == n
    )
    errs = "featurecache_lookup_errors_total"
    assert (
        metric_sum(after, errs, route=route, status="404")
        - metric_sum(before, errs, route=route, status="404")
        == 1
    )
    hist = "featurecache_lookup_request_duration_seconds_count"
    assert metric_sum(after, hist, route=route) - metric_sum(before, hist, route=route) == n + 1
    out = "featurecache_lookup_response_bytes_total"
    assert metric_sum(after, out, route=route) - metric_sum(before, out, route=route) > 0
