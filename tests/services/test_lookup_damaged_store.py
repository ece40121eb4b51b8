"""Damaged data under a served store is a 500 naming what cannot be read, not a retryable 503.

A 503 tells clients the service is down for a while (a store being rebuilt or extended under it);
a shard that fails its checksum stays damaged however long they wait. The service tells the two
apart by whether the store changed under the reader that failed. Real uvicorn on 127.0.0.1 over
real copies of the sample store.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import httpx
import pytest

from featurecache import open_store
from featurecache.client.http import LookupClient
from featurecache.errors import ServiceError, ServiceUnavailable
from featurecache.store.layout import CHUNK_ROWS, GROUP_OFFSETS
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings
from tests.store.test_damaged_parts import _copy
from tests.store.test_damaged_parts import _largest_entry as _largest_entry_part


def _largest_entry(store: Path) -> tuple[str, Path]:
    """(id, part directory) of the entry with the most atoms (:func:`tests.store.test_damaged_parts._largest_entry`)."""
    entry_id, part = _largest_entry_part(store)
    return entry_id, store / "parts" / part


def _cut_short(array_dir: Path) -> None:
    """Cut every shard file of an array to half its size (its checksum then fails)."""
    shards = [f for f in array_dir.rglob("*") if f.is_file() and f.name != "zarr.json"]
    assert shards
    for f in shards:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _assert_damaged(r: httpx.Response, what: str, hidden: Path) -> None:
    """A JSON 500 naming ``what`` as unreadable, without ``retry-after`` or a server path."""
    assert r.status_code == 500, (r.status_code, r.text[:300])
    assert r.headers["content-type"] == "application/json"
    detail = r.json()["detail"]
    assert detail.startswith(f"{what}: unreadable ("), detail
    assert "retry-after" not in r.headers
    assert str(hidden) not in r.text, r.text


def test_damaged_entry_is_a_500_naming_it(tmp_path: Path, sample_store: Path) -> None:
    store = _copy(sample_store, tmp_path)
    entry_id, part = _largest_entry(store)
    other = next(i for i in open_store(store).ids if i != entry_id)
    with ThreadedServer(Settings(store_path=store)) as url, httpx.Client(base_url=url) as http:
        assert http.get(f"/v1/entries/{entry_id}", params={"arrays": "atoms"}).status_code == 200
        shutil.rmtree(part / "bonds")  # never opened yet: the reader says the array is missing
        _assert_damaged(http.get(f"/v1/entries/{entry_id}"), f"entry {entry_id}", tmp_path)
        _cut_short(part / "atoms")  # opened already: zarr fails to decode it
        r = http.get(f"/v1/entries/{entry_id}", params={"arrays": "atoms"})
        _assert_damaged(r, f"entry {entry_id}", tmp_path)
        assert f"{part.name}/atoms" in r.json()["detail"]
        # a batch fails on its first entry before the status goes out
        r = http.post("/v1/entries:batch", json={"ids": [entry_id, other], "arrays": ["atoms"]})
        _assert_damaged(r, f"entry {entry_id}", tmp_path)
        # what is not damaged is still served
        assert http.get(f"/v1/entries/{entry_id}", params={"arrays": "tokens"}).status_code == 200
        assert http.get("/v1/health").status_code == 200 and http.get("/v1/ready").status_code == 200
        # the client gives up as on a failed request (ServiceError), not a service that is down
        # at once: the lookup service answers 500 only for data that asking again cannot repair
        client = LookupClient(url, retries=3, backoff=0.01)
        with pytest.raises(
            ServiceError, match=rf"500: entry {entry_id}: unreadable.*after 1 attempts"
        ) as info:
            client.entry(entry_id, arrays=["atoms"])
        assert not isinstance(info.value, ServiceUnavailable)


def test_missing_shard_file_is_a_500_naming_the_file(tmp_path: Path, sample_store: Path) -> None:
    store = _copy(sample_store, tmp_path)
    entry_id, part = _largest_entry(store)
    with ThreadedServer(Settings(store_path=store)) as url, httpx.Client(base_url=url) as http:
        assert http.get(f"/v1/entries/{entry_id}").status_code == 200
        shards = [f for f in (part / "tokens").rglob("*") if f.is_file() and f.name != "zarr.json"]
        assert len(shards) == 1
        shards[0].unlink()  # zarr would read it back as zeros
        r = http.get(f"/v1/entries/{entry_id}", params={"arrays": "tokens"})
        _assert_damaged(r, f"entry {entry_id}", tmp_path)
        name = str(shards[0].relative_to(store))
        assert f"STORE/{name} is missing" in r.json()["detail"], r.json()


def test_damaged_msa_is_a_500_naming_it(tmp_path: Path, sample_store: Path) -> None:
    store = _copy(sample_store, tmp_path)
    msas = open_store(store).msas
    key, part, array = (msas.column(c)[0].as_py() for c in ("key", "part", "array"))
    with ThreadedServer(Settings(store_path=store)) as url, httpx.Client(base_url=url) as http:
        assert http.get(f"/v1/msas/{key}").status_code == 200
        _cut_short(store / "parts" / part / array)
        _assert_damaged(http.get(f"/v1/msas/{key}"), f"MSA {key}", tmp_path)


def test_failure_on_a_store_changed_under_its_reader_is_a_503(tmp_path: Path, sample_store: Path) -> None:
    """The same damage, but the index was swapped since the reader opened (a build extending the
    store): that read is retryable; once the store is reopened the damage is a 500."""
    store = _copy(sample_store, tmp_path)
    entry_id, part = _largest_entry(store)
    # the index is checked only when a read fails (not every second), so the change is first seen there
    settings = Settings(store_path=store, store_check_seconds=3600)
    with ThreadedServer(settings) as url, httpx.Client(base_url=url) as http:
        assert http.get(f"/v1/entries/{entry_id}", params={"arrays": "atoms"}).status_code == 200
        _cut_short(part / "atoms")
        entries = store / "index" / "entries.arrow"
        shutil.copy(entries, entries.with_suffix(".new"))
        os.replace(entries.with_suffix(".new"), entries)  # as a build swaps its index in
        r = http.get(f"/v1/entries/{entry_id}", params={"arrays": "atoms"})
        assert r.status_code == 503 and "retry-after" in r.headers, (r.status_code, r.text[:300])
        assert str(tmp_path) not in r.text
        _assert_damaged(
            http.get(f"/v1/entries/{entry_id}", params={"arrays": "atoms"}), f"entry {entry_id}", tmp_path
        )


def _damage_last_inner_chunk(shard: Path) -> int:
    """Flip one byte inside the last inner chunk of a sharded array's shard file (its zstd checksum
    then fails; the other inner chunks still decode). Returns the chunk's number. The shard index
    sits at the end: (offset, length) little-endian uint64 pairs, then its crc32c."""
    meta = json.loads((shard.parents[2] / "zarr.json").read_text())
    sharding = meta["codecs"][0]["configuration"]
    n = meta["chunk_grid"]["configuration"]["chunk_shape"][0] // sharding["chunk_shape"][0]
    data = bytearray(shard.read_bytes())
    pairs = struct.unpack(f"<{2 * n}Q", data[-(16 * n + 4) : -4])
    last = max(i for i in range(n) if pairs[2 * i] != 2**64 - 1)  # unwritten chunks are all ones
    offset, length = pairs[2 * last], pairs[2 * last + 1]
    data[offset + length // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    return last


def test_a_damaged_entry_later_in_a_batch_raises_naming_it(tmp_path: Path, sample_store: Path) -> None:
    """The batch's status goes out after its first entry is read; a damaged entry after it cuts
    the stream. The client then reads the entries one by one and raises ServiceError naming the
    damaged one, at once (it retried the whole batch for its retry budget, then raised
    ServiceUnavailable: "the service is down", naming no entry)."""
    store = _copy(sample_store, tmp_path)
    reader = open_store(store)
    start, count = (reader.entries.column(c).to_pylist() for c in GROUP_OFFSETS["atoms"])
    parts = reader.entries.column("part").to_pylist()
    part = parts[start.index(max(start))]
    last = _damage_last_inner_chunk(store / "parts" / part / "atoms" / "c" / "0" / "0")
    first_row = last * CHUNK_ROWS  # the inner chunks of the sample's part are CHUNK_ROWS rows
    on_part = [i for i, p in enumerate(parts) if p == part]
    ids = reader.entries.column("id").to_pylist()
    good = next(ids[i] for i in on_part if start[i] + count[i] <= first_row)
    bad = next(ids[i] for i in on_part if start[i] + count[i] > first_row)
    with ThreadedServer(Settings(store_path=store)) as url:
        client = LookupClient(url, retry_budget_s=60, backoff=0.01)
        assert client.entries_batch([good], arrays=["atoms"])[0].id == good
        with pytest.raises(ServiceError, match=rf"entry {bad}: unreadable") as info:
            client.entries_batch([good, bad], arrays=["atoms"])
        assert not isinstance(info.value, ServiceUnavailable)


def test_a_batch_lost_before_any_answer_is_retried_not_read_one_by_one() -> None:
    """A connection closed before any status (a restart, a keep-alive connection the server closed)
    is retried as the batch within the retry budget, then ServiceUnavailable; it is not a cut-short
    answer (which reads the entries one by one: 64 GETs for this batch, before the fix)."""
    import socket
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(50)
    seen: list[bytes] = []

    def close_each() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            seen.append(conn.recv(65536).split(b"\r\n")[0])
            conn.close()

    threading.Thread(target=close_each, daemon=True).start()
    try:
        client = LookupClient(f"http://127.0.0.1:{srv.getsockname()[1]}", answered=True, retry_budget_s=1.0)
        with pytest.raises(ServiceUnavailable, match="entries:batch: RemoteProtocolError"):
            client._batch([f"e{i}" for i in range(64)], None)  # one batch (no limits asked for first)
    finally:
        srv.close()
    assert seen and all(line.startswith(b"POST /v1/entries:batch") for line in seen), seen
