"""Bit damage inside a shard's inner chunk is an error on read, not wrong values served as data:
every array the writers create checksums each inner chunk (``layout.chunk_compressors``).

A real build of the sample store, copied and damaged as a bad disk does it: 64 bytes in the middle
of one compressed inner chunk XORed, the file keeping its size (the shard index and its crc32c stay
intact, so only a per-chunk checksum can tell). Where the chunk lies in the shard file is read from
the shard index itself (zarr v3 sharding: ``n`` little-endian (offset, nbytes) uint64 pairs and a
crc32c at the end of the file), not from the product's code.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from featurecache import open_store
from featurecache.errors import StoreError
from featurecache.store.verify import verify_store
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings
from tests.conftest import REPO, SAMPLES, featurecache_at
from tests.store.test_damaged_parts import _cli, _copy, _largest_entry, _only_file


def _sharding(array_dir: Path) -> dict:
    """The ``sharding_indexed`` codec entry of the array's zarr.json."""
    meta = json.loads((array_dir / "zarr.json").read_text())
    (codec,) = [c for c in meta["codecs"] if c["name"] == "sharding_indexed"]
    return codec


def _chunk_range(array_dir: Path, shard: Path, row: int) -> tuple[int, int]:
    """(offset, nbytes) in ``shard`` of the inner chunk holding row ``row`` of a 2-D record array
    stored as one shard of inner chunks one chunk wide."""
    codec = _sharding(array_dir)["configuration"]
    assert codec["index_location"] == "end"
    meta = json.loads((array_dir / "zarr.json").read_text())
    shard_rows = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    chunk_rows = codec["chunk_shape"][0]
    n_chunks = -(-shard_rows // chunk_rows)
    data = shard.read_bytes()
    index = data[-(16 * n_chunks + 4) : -4]
    pairs = struct.unpack(f"<{2 * n_chunks}Q", index)
    return pairs[2 * (row // chunk_rows)], pairs[2 * (row // chunk_rows) + 1]


def _xor_middle(path: Path, offset: int, nbytes: int, width: int = 64) -> None:
    """XOR ``width`` bytes in the middle of ``[offset, offset + nbytes)`` of ``path`` (size kept)."""
    assert nbytes >= 2 * width, nbytes
    data = bytearray(path.read_bytes())
    size = len(data)
    start = offset + nbytes // 2 - width // 2
    for i in range(start, start + width):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    assert path.stat().st_size == size


def _damage_entry_atoms(store: Path) -> tuple[str, str, Path]:
    """Damage the inner chunk of ``atoms`` holding the largest entry's first atom; (id, part, shard)."""
    entry_id, part = _largest_entry(store)
    array_dir = store / "parts" / part / "atoms"
    shard = _only_file(array_dir)
    start = int(open_store(store).entry_meta(entry_id)["atom_start"])
    _xor_middle(shard, *_chunk_range(array_dir, shard, start))
    return entry_id, part, shard


def test_every_written_array_has_a_chunk_checksum(sample_store: Path) -> None:
    """Structure, MSA and component parts: each array's inner chunks are zstd frames with a content
    checksum (zarr.json's codec configuration ``checksum: true``)."""
    arrays = [m.parent for m in (sample_store / "parts").rglob("zarr.json")
              if json.loads(m.read_text())["node_type"] == "array"]  # fmt: skip
    kinds = {a.relative_to(sample_store / "parts").parts[0][:2] for a in arrays}
    assert kinds == {"s-", "m-", "c-"}, kinds
    for a in arrays:
        inner = _sharding(a)["configuration"]["codecs"]
        assert [c["name"] for c in inner] == ["bytes", "zstd"], (a, inner)
        assert inner[1]["configuration"]["checksum"] is True, (a, inner)


def test_bit_damage_in_a_structure_chunk_is_an_error(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path)
    entry_id, part, shard = _damage_entry_atoms(store)

    damaged = open_store(store)
    with pytest.raises(StoreError, match=rf"^entry {entry_id}: unreadable \(.*{part}/atoms") as info:
        damaged.entry(entry_id)
    assert f"cannot be read ({shard})" in str(info.value), info.value
    # the entry's other arrays are not damaged and read as the undamaged store's
    tokens = damaged.entry(entry_id, arrays=["tokens"]).tokens
    want = open_store(sample_store).entry(entry_id, arrays=["tokens"]).tokens
    assert all(np.array_equal(tokens[k], want[k]) for k in want)

    problems = verify_store(store)
    assert any(p.startswith(f"entry {entry_id}: unreadable (") and str(shard) in p for p in problems), (
        problems
    )
    assert not any("content hash" in p for p in problems), problems
    run = _cli("verify", str(store))
    assert run.returncode == 4, (run.returncode, run.stderr[-2000:])
    assert "Traceback" not in run.stderr and f"MISMATCH entry {entry_id}: unreadable" in run.stdout
    assert str(shard) in run.stdout


def test_bit_damage_is_a_500_from_the_service(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path)
    entry_id, _, shard = _damage_entry_atoms(store)
    with ThreadedServer(Settings(store_path=store)) as url, httpx.Client(base_url=url) as http:
        r = http.get(f"/v1/entries/{entry_id}")
        assert r.status_code == 500, (r.status_code, r.text[:300])
        detail = r.json()["detail"]
        assert detail.startswith(f"entry {entry_id}: unreadable ("), detail
        assert f"STORE/{shard.relative_to(store)}" in detail and str(tmp_path) not in r.text, detail
        assert http.get(f"/v1/entries/{entry_id}", params={"arrays": "tokens"}).status_code == 200


def test_bit_damage_in_an_msa_chunk_is_an_error(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path)
    msas = open_store(store).msas
    depth = msas.column("depth").to_pylist()
    k = int(np.argmax(depth))  # the deepest MSA: its first strip's chunk is big enough to damage
    key, part = msas.column("key")[k].as_py(), msas.column("part")[k].as_py()
    start = int(msas.column("row_start")[k].as_py())
    array_dir = store / "parts" / part / "rows"
    shard = _only_file(array_dir)
    _xor_middle(shard, *_chunk_range(array_dir, shard, start))
    with pytest.raises(StoreError, match=rf"{part}/rows") as info:
        open_store(store).msa(key)
    assert str(shard) in str(info.value), info.value


#: the last commit whose writer stored inner chunks without a checksum
BEFORE_CHUNK_CHECKSUMS = "b9e112fc6bc69d103c960c8aa475b58ba7c97a62"


#: run by the old package on its own store: a digest of every array its reader returns
_DIGEST = """
import hashlib, json, sys
import numpy as np
from featurecache import open_store

def digest(x):
    x = np.ascontiguousarray(x)
    return hashlib.sha256(str((x.dtype.str, x.shape)).encode() + x.tobytes()).hexdigest()

def entry_digests(store):
    out = {}
    for entry_id in store.ids:
        e = store.entry(entry_id)
        for g in ("atoms", "tokens", "bonds", "interfaces"):
            for k, v in getattr(e, g).items():
                out[f"{entry_id}/{g}/{k}"] = digest(v)
    for key in store.msas.column("key").to_pylist():
        out[f"msa/{key}"] = digest(store.msa(key).residues)
    return out

if __name__ == "__main__":
    print(json.dumps(entry_digests(open_store(sys.argv[1]))))
"""


def test_a_store_without_chunk_checksums_still_reads(tmp_path: Path) -> None:
    """A store written before (zstd without its checksum) reads and verifies with this reader: every
    array equals what the old code's own reader returns from it (the features themselves changed
    since, so another build is no reference)."""
    package = featurecache_at(BEFORE_CHUNK_CHECKSUMS, tmp_path / "old")
    old = tmp_path / "old-store"
    # the sample store's inputs (conftest.build_with_package, with the CCD the sample store has)
    args = ["build", "--pdb-dir", str(SAMPLES / "structures"), "--msa-dir", str(SAMPLES / "msas"),
            "--ccd", str(SAMPLES / "ccd"), "--out", str(old), "--workers", "1", "--no-progress"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(package)}
    run = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                         cwd=package, env=env, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    atoms = json.loads((old / "parts" / "s-000000" / "atoms" / "zarr.json").read_text())
    inner = next(c for c in atoms["codecs"] if c["name"] == "sharding_indexed")["configuration"]["codecs"]
    assert inner[1]["name"] == "zstd" and inner[1]["configuration"]["checksum"] is False, inner

    script = tmp_path / "digest.py"
    script.write_text(_DIGEST)

    def digests(tree: Path) -> dict[str, str]:
        res = subprocess.run([sys.executable, str(script), str(old)], capture_output=True, text=True, cwd=tree,
                             env={**os.environ, "PYTHONPATH": str(tree)}, timeout=300)  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        return dict(json.loads(res.stdout))

    want, got = digests(package), digests(REPO)  # the old reader, this reader
    assert any(k.startswith("msa/") for k in want) and len(want) > 50
    # this reader also gives the tokens' centre_coords (featurizer 0.7.0), derived for older parts
    # from the atoms (tests/client/test_crop_first.py compares it with a 0.7.0 build's)
    added = {k for k in got if k not in want}
    assert added and all(k.endswith("/tokens/centre_coords") for k in added), sorted(added)
    assert {k: v for k, v in got.items() if k in want} == want
    assert verify_store(old) == []
