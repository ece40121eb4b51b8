"""Crop first over the lookup service never fails a sample that the whole-entry read serves (RF1's
findings of session 28 on ``POST /v1/entries/{id}:rows``):

* a service rolled back to a version without the route, on the same store and port (its index, so
  the client's snapshot, unchanged): the client drops the capability at the first 404/405, says so
  once, and reads entries whole, the sample in hand included;
* a rebuild or extension that the no-rows ``stored_fields`` request is the first to see: the sample
  is drawn again from the new index (it failed with "did not say which fields" before);
* a ``max_response_bytes`` that the whole entry fits: the atom rows are asked with the fields the
  sample uses only (``client.job.ATOM_FIELDS``, as ``LocalStore.read_rows(fields=)`` gives them),
  and a 413 from the route reads the entry whole.

Oracle: the same key's sample from the local store, crop first, byte for byte. Real parts: the
session's client store (real build), real ``featurecache serve`` processes on 127.0.0.1 (this
tree's, and the package of the last commit before the route), a real extension build."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from featurecache import open_store
from featurecache.client import FeatureDataset
from featurecache.client.http import INDEX_HEADER, LookupClient
from featurecache.client.job import ENTRY_ARRAYS
from featurecache.errors import InvalidRequest
from featurecache.store.layout import ENTRY_GROUPS
from services.lookup.payloads import estimate_entry_bytes
from services.lookup.server import background_server, free_port
from tests.client.test_crop_first import BEFORE_ROWS_ROUTE, REQUESTS, ROWS_ROUTE, _same, _service_package
from tests.conftest import CCD, STRUCTURES, build_store
from tests.services.lookup_helpers import metric_samples, metric_sum

#: the client store's largest entry (5222 atoms, 600 tokens): crops of most of it cost more bytes a
#: row over the route (8 for its number + its fields) than the whole entry's GET does
BIG = "7pzb"
#: bytes an atom row costs over the route with every field the part stores, as the route charges it
ROW_BYTES_ALL = 8 + ENTRY_GROUPS["atoms"].itemsize
#: the atom fields a sample uses (what it reads of a whole entry)
USED = [n.partition("/")[2] for n in ENTRY_ARRAYS if n.startswith("atoms/")]
#: the same with only the fields the sample uses
ROW_BYTES_USED = 8 + sum(ENTRY_GROUPS["atoms"][f].itemsize for f in USED)


def _dataset(source: Any, **kw: Any) -> FeatureDataset:
    """Crop first on every entry the crop cuts (``crop_first_atoms=0``: the client store's entries
    are below the default threshold)."""
    ds = FeatureDataset(source, seed=11, weighting="uniform", samples_per_epoch=400, **kw)
    ds.job.crop_first_atoms = 0
    return ds


def _positions(ds: FeatureDataset, entry_id: str, n: int) -> list[int]:
    return [p for p in range(400) if ds.sampler.key(p).entry_id == entry_id][:n]


def _job_sample(ds: FeatureDataset, p: int) -> dict[str, Any]:
    return {k: v for k, v in ds.sample(p).items() if k not in ("position", "reorder_depth", "skipped")}


def _index_of(url: str) -> str:
    """The index the service answers from now (not through a client: it would follow it)."""
    return httpx.get(f"{url}/v1/service", timeout=10).headers[INDEX_HEADER]


def _metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return metric_samples(httpx.get(f"{url}/metrics", timeout=10).text)


# ------------------------------------------------------------------------------ 1. a rollback
def test_a_service_rolled_back_without_the_route_is_read_whole(
    client_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """This tree's service, then (same store, same port) BEFORE_ROWS_ROUTE's: a client that had
    read rows (its part's fields known: the atom rows' POST is refused) and one that had only
    learned the route (the no-rows POST is refused) both read the large entry whole from then on,
    the first sample too, with the samples of crop first locally; each says so once and posts to
    the route once."""
    pkg = _service_package(BEFORE_ROWS_ROUTE, tmp_path / "pkg")
    port = free_port()
    here = _dataset(client_store, crop_size=48)
    positions = _positions(here, BIG, 4)
    with background_server(client_store, port=port) as url:
        read, learned = _dataset(url, crop_size=48), _dataset(url, crop_size=48)
        _same(_job_sample(read, positions[0]), _job_sample(here, positions[0]), "before the rollback")
        got = _metrics(url)
        assert metric_sum(got, REQUESTS, route=ROWS_ROUTE, method="POST", status="200") == 2  # no rows, rows
        assert learned.job.source.get().row_reads()  # the route known, no part asked yet
    caplog.set_level(logging.INFO, logger="featurecache")
    with background_server(client_store, port=port, cwd=pkg, env={"PYTHONPATH": str(pkg)}) as url:
        assert "capabilities" not in LookupClient(url).service_info  # the premise: the service of then
        for ds in (read, learned):
            for p in positions:
                _same(_job_sample(ds, p), _job_sample(here, p), f"after the rollback, position {p}")
            assert ds.job.source.get().row_reads() is False
        refused = sum(v for (n, lab), v in _metrics(url).items()
                      if n == REQUESTS and dict(lab)["method"] == "POST" and int(dict(lab)["status"]) >= 400)  # fmt: skip
        assert refused == 2, refused  # one refused POST a client: then no more posts, whole reads
    said = [r for r in caplog.records if "no longer answers POST /v1/entries/{id}:rows" in r.getMessage()]
    assert len(said) == 2 and all(r.levelno == logging.WARNING for r in said), [r.getMessage() for r in said]
    assert all(url in r.getMessage() and "read whole" in r.getMessage() for r in said)
    for ds in (here, read, learned):
        ds.close()


# ------------------------------------------------------------------------------ 2. a rebuild seen first by stored_fields
def test_an_extension_first_seen_by_the_no_rows_request_draws_the_sample_again(
    client_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The served store is extended between two samples; the second one's first request is the
    no-rows POST that asks what the large entry's part stores (no part known yet): its answer, from
    the new index, refreshes the client, is used without being kept, and the sample is drawn again:
    the sample of the extended store, crop first locally (RF1's race.py, on demand)."""
    served = tmp_path / "store"
    shutil.copytree(client_store, served)
    with background_server(served, env={"FEATURECACHE_STORE_CHECK_SECONDS": "0"}) as url:
        ds = _dataset(url, crop_size=48)
        reader = ds.job.source.get()
        ds.job.crop_first_atoms = None  # a first sample read whole: tables, service, MSA shapes
        ds.sample(0)
        ds.job.crop_first_atoms = 0
        assert reader.row_reads()
        rows_posts = metric_sum(_metrics(url), REQUESTS, route=ROWS_ROUTE, method="POST")
        assert rows_posts == 0 and reader.generation == 0  # the premise: no part's fields known
        before = _index_of(url)
        new = tmp_path / "new"
        new.mkdir()
        shutil.copy(STRUCTURES / "5y2e.cif", new / "5y2e.cif")
        summary = build_store(served, new, workers=1, ccd=CCD, part_size=4)
        assert summary.n_built == 1, summary.failures
        for _ in range(100):  # the service answers from the extended index (checked on every request)
            if _index_of(url) != before:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the service never answered from the extended store's index")
        caplog.set_level(logging.INFO, logger="featurecache")
        p = _positions(ds, BIG, 1)[0]
        got = _job_sample(ds, p)
        assert reader.generation == 1  # the refresh happened during this sample
        assert any("drawing it again" in r.getMessage() for r in caplog.records)
        assert "5y2e" in reader.ids
        here = _dataset(served, crop_size=48)
        assert "5y2e" in here.job.source.get().ids
        _same(got, here.job(ds.sampler.key(p)), f"extended store, position {p}")
        ds.close()
        here.close()


# ------------------------------------------------------------------------------ 3. max_response_bytes
@pytest.fixture(scope="module")
def limited(client_store: Path) -> Iterator[tuple[str, int]]:
    """(URL, limit): ``featurecache serve`` whose ``max_response_bytes`` is the smallest under which
    every entry's whole read (``ENTRY_ARRAYS``, what a sample reads whole) is served."""
    local = open_store(client_store)
    limit = max(estimate_entry_bytes(local, [e], list(ENTRY_ARRAYS)) for e in local.ids)
    with background_server(client_store, env={"FEATURECACHE_MAX_RESPONSE_BYTES": str(limit)}) as url:
        yield url, limit


def test_crop_first_under_a_limit_the_whole_entry_fits_never_fails(
    limited: tuple[str, int], client_store: Path
) -> None:
    """Crops that keep most of the largest entry: atom rows that fit only without the fields the
    sample does not use are read crop first; rows over the limit even so (413) are read whole; each
    sample is crop first's locally, none fails."""
    url, limit = limited
    client = LookupClient(url)
    client.entry(BIG, list(ENTRY_ARRAYS))  # the premise: the whole read is served
    n_big = client.row_count(BIG, "atoms")
    with pytest.raises(InvalidRequest, match="413"):  # the premise: every field of every row is not
        client.read_rows(BIG, "atoms", [(0, n_big)])
    fits_used_only = refused = 0
    for cfg in ({"crop_size": 520, "crop_weights": (1, 0, 0)}, {"crop_size": 520, "crop_weights": (0, 1, 0)},
                {"crop_size": 570, "crop_weights": (1, 0, 0)}):  # fmt: skip
        ds, here = _dataset(url, use_msa=False, **cfg), _dataset(client_store, use_msa=False, **cfg)
        for p in _positions(ds, BIG, 5):
            before = _metrics(url)
            got = _job_sample(ds, p)
            after = _metrics(url)
            served = metric_sum(
                after, "featurecache_lookup_entry_rows_served_total", group="atoms"
            ) - metric_sum(before, "featurecache_lookup_entry_rows_served_total", group="atoms")
            too_large = metric_sum(after, REQUESTS, route=ROWS_ROUTE, status="413") - metric_sum(
                before, REQUESTS, route=ROWS_ROUTE, status="413"
            )
            fits_used_only += int(served * ROW_BYTES_ALL > limit >= served * ROW_BYTES_USED)
            refused += int(too_large > 0 and served == 0)
            _same(got, _job_sample(here, p), f"limit {limit}, {cfg} position {p}")
        ds.close()
        here.close()
    # the premises: both kinds of crop were drawn
    assert fits_used_only > 0 and refused > 0, (fits_used_only, refused)


def test_read_rows_fields_locally_and_over_the_service(limited: tuple[str, int], client_store: Path) -> None:
    """``read_rows(..., fields=)``: the same records from both readers, those fields only, packed,
    in the group's order; a field the group lacks is refused by both."""
    url, _ = limited
    local, client = open_store(client_store), LookupClient(url)
    whole = local.read_group(BIG, "atoms")
    ranges = [(900, 960), (0, 40), (4000, 4100)]
    fields = ["ref_space_uid", "coords", "name"]  # not in the group's order
    rows, rec = local.read_rows(BIG, "atoms", ranges, fields=fields)
    assert rec.dtype.names == ("coords", "name", "ref_space_uid")
    assert rec.dtype.itemsize == sum(whole.dtype[f].itemsize for f in fields)  # packed
    for f in fields:
        assert rec[f].tobytes() == whole[f][rows].tobytes(), f
    remote_rows, remote = client.read_rows(BIG, "atoms", ranges, fields=fields)
    want = np.concatenate([np.arange(a, b) for a, b in sorted(ranges)])
    assert remote_rows.tobytes() == want.tobytes()
    assert remote.dtype == rec.dtype and remote.tobytes() == rec[np.searchsorted(rows, want)].tobytes()
    for reader in (local, client):
        with pytest.raises(InvalidRequest, match=r"atoms has no field\(s\) \['nope'\]"):
            reader.read_rows(BIG, "atoms", ranges, fields=["coords", "nope"])
