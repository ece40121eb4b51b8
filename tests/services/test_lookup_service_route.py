"""The client learns the service's limits from ``GET /v1/service``, never from ``GET /v1/info``.

``/v1/info`` sums the store's sizes; on a 200k-entry store it took 23–52 s and a training
client's first MSA fetch (which asks the limits first) failed with a read timeout. The service's
own request counters (``/metrics``) say which routes a fresh client called.
"""

from __future__ import annotations

import httpx

from featurecache.client.http import LookupClient
from featurecache.store.reader import LocalStore
from tests.services.lookup_helpers import metric_samples, metric_sum

REQUESTS = "featurecache_lookup_requests_total"


def _calls(url: str, route: str) -> float:
    return metric_sum(metric_samples(httpx.get(f"{url}/metrics").text), REQUESTS, route=route)


def test_limits_come_from_the_service_route_not_info(lookup_url: str, reference: LocalStore) -> None:
    info_before = _calls(lookup_url, "/v1/info")
    service_before = _calls(lookup_url, "/v1/service")
    client = LookupClient(lookup_url)
    ids = reference.ids[:3]
    got = client.entries_batch(ids, arrays=["tokens"])  # asks max_batch_entries
    assert [e.id for e in got] == ids
    key = reference.msas.column("key")[0].as_py()
    block = client.msa(key, rows=slice(0, 4))  # asks the max_msa_* limits
    assert block.residues.shape[0] == min(4, reference.msa(key).residues.shape[0])
    limits = client.service_info["limits"]
    assert limits["max_batch_entries"] >= 1 and "max_msa_cells" in limits
    assert "entries" in client.service_info["tables"]
    assert _calls(lookup_url, "/v1/info") == info_before
    assert _calls(lookup_url, "/v1/service") == service_before + 1  # asked once, then cached


def test_service_route_is_the_service_part_of_info(lookup_url: str) -> None:
    service = httpx.get(f"{lookup_url}/v1/service").json()
    info = httpx.get(f"{lookup_url}/v1/info").json()
    assert service == info["service"]
    assert set(service) == {"version", "auth", "limits", "tables", "capabilities"}
    # info stays whole: counts and sizes of the store
    assert info["counts"]["entries"] > 0 and info["bytes"]["total"] >= info["bytes"]["parts"] > 0
