"""Worker processes of a training client over the lookup service read no index table of their own:
each starts on the few columns of ``entries`` and ``msas`` its lookups need, which the trainer's
client fetched once (``LookupClient.lookup_snapshot``), and a client that does not hold the whole
``entries`` / ``chains`` tables takes an entry's index row and chains rows from the service's
answer about the entry. Before, every DataLoader worker fetched the whole ``entries`` and ``msas``
tables (review s32 r2, F2: ~79 MB a worker at 200k entries).

Oracles: the service's own request counters (``/metrics``, route ``/v1/tables/{name}``) of a real
``featurecache serve`` on 127.0.0.1 over a real store; the samples of a local ``FeatureDataset``
over the same store."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from featurecache import open_store
from featurecache.client import FeatureDataset
from featurecache.client.http import LookupClient
from services.lookup.server import background_server
from tests.client.test_crop_first import _same

TABLES_ROUTE = 'route="/v1/tables/{name}"'
SKIP = ("position", "reorder_depth", "skipped")


def _table_requests(url: str) -> int:
    """Requests the service answered on ``/v1/tables/{name}`` so far (every status)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("featurecache_lookup_requests_total") and TABLES_ROUTE in line
    )


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True)


def test_loader_workers_fetch_no_index_table(client_store: Path) -> None:
    local = FeatureDataset(client_store, crop_size=64, seed=3, weighting="uniform", samples_per_epoch=12)
    with background_server(client_store) as url:
        ds = FeatureDataset(url, crop_size=64, seed=3, weighting="uniform", infinite=True)
        ds.job.crop_first_atoms = 0  # every entry over the crop is read crop first: meta and chains rows too
        parent = _table_requests(url)
        assert parent >= 3  # entries, chains, interfaces for the sampler (and the msas columns)

        # two DataLoader workers: samples from both, not one table request more
        loader = ds.loader(batch_size=1, num_workers=2)
        seen: set[int] = set()
        for _, batch in zip(range(40), loader, strict=False):
            seen.update(int(i) % 2 for i in batch.get("position", []))
            if seen == {0, 1}:
                break
        assert seen == {0, 1}
        del loader
        assert _table_requests(url) == parent  # before: +2 a worker (entries and msas, whole)

        # a process pool's workers: the same samples as the local store's, no table request either
        pooled = FeatureDataset(url, crop_size=64, seed=3, weighting="uniform", samples_per_epoch=12,
                                pool="process", workers=2)  # fmt: skip
        pooled.job.crop_first_atoms = 0
        before = _table_requests(url)
        n = 0
        for s in pooled:
            want = local.sample(s["position"])
            _same({k: v for k, v in s.items() if k not in SKIP}, {k: v for k, v in want.items() if k not in SKIP},
                  f"position {s['position']}")  # fmt: skip
            n += 1
        pooled.close()
        assert n == 12
        assert _table_requests(url) == before

        # an entry's index row and chains rows without the whole tables: the store's
        store = open_store(client_store)
        client = LookupClient(url)
        for eid in store.ids:
            assert _json(client.entry_meta(eid)) == _json(store.entry_meta(eid)), eid  # NaN resolution: equal
            assert _json(client.entry_chains(eid)) == _json(store.entry_chains(eid)), eid
            assert (
                client.row_count(eid, "atoms")
                == store.entries.column("atom_count")[store.row_of(eid)].as_py()
            )
        assert client.entry_chains("no-such-entry") == []
        assert client.msa_shapes() and client.msa_shapes() == {
            k: (d, n) for k, d, n in zip(*(store.msas.column(c).to_pylist() for c in ("key", "depth", "length")),
                                         strict=True)
        }  # fmt: skip
        assert "entries" not in client._tables and "chains" not in client._tables
        client.close()
        ds.close()
    local.close()
