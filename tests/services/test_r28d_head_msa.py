"""HEAD on an MSA answers the GET's headers without reading the MSA (review R28d s46, a suspicion:
``GET /v1/msas/{key}``'s HEAD read and encoded the whole slice, 101 MB for a large selection, for
the middleware to drop it; an entry's HEAD is answered from the index since s24).

A ThreadedServer over the sample store, in this process, where an audit hook sees which files a
request opens; HEAD and GET are compared for several selections (the whole MSA, rows, columns, a
repeated index, none, one out of range, an unknown key, one over max_response_bytes).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from featurecache.store.arrow_io import msa_answer_bytes
from featurecache.store.reader import LocalStore
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings
from tests.services.lookup_helpers import opened_files


def test_head_reads_no_msa_and_says_the_gets_length(sample_store: Path, reference: LocalStore) -> None:
    msas = reference.msas.to_pylist()
    big = max(msas, key=lambda m: m["depth"] * m["length"])
    key, depth = big["key"], big["depth"]
    assert depth > 3, big
    # the whole MSA is over the limit, a slice of it is not
    limit = msa_answer_bytes(key, depth - 1, big["length"])
    parts = str(sample_store / "parts")
    with ThreadedServer(Settings(store_path=sample_store, max_response_bytes=limit)) as url:
        assert httpx.get(f"{url}/v1/ready", timeout=30).status_code == 200
        target = f"{url}/v1/msas/{key}?rows=0:{depth - 1}"
        with opened_files() as opened:
            head = httpx.head(target, timeout=30)
        assert head.status_code == 200, head.text
        assert not [p for p in opened if p.startswith(parts)], opened
        with opened_files() as opened:
            get = httpx.get(target, timeout=30)
        assert get.status_code == 200, get.text
        assert [p for p in opened if p.startswith(parts)], opened  # (the hook sees the reads)
        assert head.headers["content-length"] == get.headers["content-length"] == str(len(get.content))

        statuses = set()
        for query in ("", "?rows=1:3", "?cols=0,2,5:9", "?rows=0,0,0&cols=1", "?rows=&cols=", "?rows=0:1&cols=",
                      f"?rows={depth}", "?cols=a"):  # fmt: skip
            for k in (key, "no-such-msa"):
                get = httpx.get(f"{url}/v1/msas/{k}{query}", timeout=30)
                head = httpx.head(f"{url}/v1/msas/{k}{query}", timeout=30)
                assert head.status_code == get.status_code, (k, query, head.status_code, get.text)
                assert head.content == b"", (k, query)
                for name in ("content-type", "content-length", "x-featurecache-index"):
                    assert head.headers.get(name) == get.headers.get(name), (k, query, name)
                assert get.headers["content-length"] == str(len(get.content)), (k, query)
                statuses.add(get.status_code)
        assert statuses == {200, 404, 413, 422}, statuses
