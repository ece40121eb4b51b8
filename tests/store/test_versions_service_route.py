"""A lookup client learns the featurizer versions of the store it reads from ``GET /v1/service``, in
the one call that also brings the service's limits, never from ``GET /v1/info`` (which sums the
store's sizes: 23-52 s on a 200k-entry store, tests/services/test_lookup_service_route.py). The
service counts them once per index generation (one ``part.json`` per part), not per request. A
service older than this code tells none: the client treats them as unknown (DEBUG) and still does
not ask ``/v1/info``.

Real stores (tests/store/conftest.py: one built by featurizer 0.5.0's package), real
``featurecache serve`` processes (this code's, and b974d7d's for the older service); which routes
a client called is read from the service's own request counters (``/metrics``)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from featurecache.store.layout import INDEX_DIR, PART_DONE_FILE, PART_INDEX_DIR, PARTS_DIR
from tests.conftest import featurecache_at
from tests.services.lookup_helpers import metric_samples, metric_sum
from tests.store.conftest import OLD_COMMIT, OLD_VERSION, Stores

REQUESTS = "featurecache_lookup_requests_total"
INDEX_HEADER = "x-featurecache-index"


def _calls(url: str, route: str) -> float:
    return metric_sum(metric_samples(httpx.get(f"{url}/metrics").text), REQUESTS, route=route)


def test_a_client_learns_the_versions_from_the_service_route_not_info(
    version_stores: Stores, tmp_path: Path
) -> None:
    from featurecache import open_store
    from featurecache.client.http import LookupClient
    from featurecache.store.versions import store_versions
    from services.lookup.server import background_server

    served = tmp_path / "served"
    shutil.copytree(version_stores.old, served)
    expected = store_versions(open_store(served))  # counted from the store's own files, locally
    del expected["entry_source_dirs"]  # the server's paths: not sent
    assert expected["entries"] == {OLD_VERSION: 1}  # the premise: the versions are there to tell
    with background_server(served) as url:
        client = LookupClient(url)
        assert len(client.entry("102m").atoms["element"]) > 0  # its first answer: the versions checked
        versions = client.featurizer_versions()
        assert _calls(url, "/v1/info") == 0
        assert versions == expected
        assert client.service_info["limits"]["max_batch_entries"] >= 1
        key = open_store(served).msas.column("key")[0].as_py()
        assert client.msa(key, rows=slice(0, 2)).residues.shape[0] == 2  # asks the max_msa_* limits
        assert _calls(url, "/v1/info") == 0
        assert _calls(url, "/v1/service") == 1  # one call: the limits and the versions
        # a loader worker's copy knows the versions it must compare with: it asks /v1/service itself
        copy = LookupClient(**client.settings())
        assert copy.featurizer_versions() == expected
        assert _calls(url, "/v1/info") == 0


def _part_json(store: Path) -> Path:
    """The ``part.json`` of the part that holds the store's one entry."""
    from featurecache import open_store

    (part,) = set(open_store(store).entries.column("part").to_pylist())
    return store / PARTS_DIR / part / PART_INDEX_DIR / PART_DONE_FILE


def _service_versions(url: str) -> tuple[dict[str, object], str]:
    response = httpx.get(f"{url}/v1/service", params={"featurizer_versions": "true"})
    assert response.status_code == 200, response.text
    return response.json()["featurizer_versions"], response.headers[INDEX_HEADER]


def test_the_service_counts_the_versions_once_per_index(version_stores: Stores, tmp_path: Path) -> None:
    """The count is cached with the index the service has open: a ``part.json`` rewritten under an
    unchanged index is not read again; once the index is replaced (a new generation, here the same
    table written again under a new inode, as a build's ``os.replace`` does) it is."""
    from services.lookup.server import background_server

    served = tmp_path / "served"
    shutil.copytree(version_stores.old, served)
    with background_server(served) as url:
        plain = httpx.get(f"{url}/v1/service").json()
        assert "featurizer_versions" not in plain  # the service part of /v1/info, as before
        first, index = _service_versions(url)
        assert first["entries"] == {OLD_VERSION: 1} and first["msas"] == {OLD_VERSION: 1}
        assert str(version_stores.a) not in json.dumps(first)  # not the server's --pdb-dir

        record = _part_json(served)
        doc = json.loads(record.read_text())
        assert doc["featurizer_version"] == OLD_VERSION
        doc["featurizer_version"] = "0.0.1-test"
        record.write_text(json.dumps(doc))
        time.sleep(1.5)  # past the service's index check (check_seconds 1 s): the index is unchanged
        again, index_again = _service_versions(url)
        assert index_again == index and again == first  # not counted again per request

        table = served / INDEX_DIR / "entries.arrow"
        shutil.copy(table, table.with_suffix(".new"))  # a new mtime: a new index id
        os.replace(table.with_suffix(".new"), table)  # a new index generation, same rows
        deadline = time.monotonic() + 30
        while True:
            now, index_now = _service_versions(url)
            if index_now != index or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert index_now != index, "the service did not reopen the replaced index"
        assert now["entries"] == {"0.0.1-test": 1}, now  # counted afresh for the new index


@contextmanager
def _old_service(store: Path, tmp: Path) -> Iterator[str]:
    """``featurecache serve STORE`` run by OLD_COMMIT's code (featurecache and services, git
    archive): a service older than ``/v1/service``'s featurizer versions."""
    from services.lookup.server import free_port, wait_ready

    pkg = featurecache_at(OLD_COMMIT, tmp / "old_pkg", ("featurecache", "services"))
    port = free_port()
    with (tmp / "old_serve.log").open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port)],
                                cwd=pkg, env={**os.environ, "PYTHONPATH": str(pkg)}, stdout=sink,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, timeout=60)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_an_older_service_leaves_the_versions_unknown_without_asking_info(
    version_stores: Stores, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from featurecache.client.http import LookupClient

    served = tmp_path / "served"
    shutil.copytree(version_stores.old, served)
    with _old_service(served, tmp_path) as url:
        service = httpx.get(f"{url}/v1/service", params={"featurizer_versions": "true"}).json()
        assert "featurizer_versions" not in service and "limits" in service  # the premise: an older service
        info_before = _calls(url, "/v1/info")
        with caplog.at_level(logging.DEBUG, logger="featurecache.client.http"):
            client = LookupClient(url)
            assert len(client.entry("102m").atoms["element"]) > 0
            assert client.featurizer_versions() is None
        assert _calls(url, "/v1/info") == info_before
    said = [r.getMessage() for r in caplog.records if "tells no featurizer versions" in r.getMessage()]
    assert said and all(r.levelno == logging.DEBUG for r in caplog.records if "featurizer" in r.getMessage())
    assert url in said[0] and "unknown" in said[0], said
