"""A structure part damaged on disk: reads, ``verify`` and ``show`` say which entry and which file.

Real copies of the sample store, damaged the way a bad disk or a bad copy does it: a shard cut
short (zarr's crc32c check fails) and a shard file removed (zarr would read it back as zeros).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from featurecache import open_store
from featurecache.errors import StoreError
from featurecache.store.verify import verify_store
from featurecache.types import Token
from tests.conftest import CliRun, cli_in_process


def _copy(sample_store: Path, tmp_path: Path) -> Path:
    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    return store


def _largest_entry(store: Path) -> tuple[str, str]:
    """(id, part) of the entry with the most atoms: its rows cover the part's first atoms chunk."""
    ref = open_store(store)
    entry_id = max(ref.ids, key=lambda i: ref.entry_meta(i)["atom_count"])
    return entry_id, ref.entries.column("part")[ref.row_of(entry_id)].as_py()


def _only_file(array_dir: Path) -> Path:
    """The array's one shard file (store/layout.py: one shard per part array)."""
    files = [f for f in array_dir.rglob("*") if f.is_file() and f.name != "zarr.json"]
    assert len(files) == 1, files
    return files[0]


def _ids_in_part(store: Path, part: str) -> list[str]:
    import pyarrow.feather as feather

    t = feather.read_table(store / "index" / "entries.arrow")
    return [
        i for i, p in zip(t.column("id").to_pylist(), t.column("part").to_pylist(), strict=True) if p == part
    ]


def _cli(*args: str) -> CliRun:
    """``featurecache ARGS`` (verify, show): the real CLI, in this process (tests/conftest.py)."""
    return cli_in_process(*args)


def test_truncated_structure_shard(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path)
    entry_id, part = _largest_entry(store)
    shard = _only_file(store / "parts" / part / "atoms")
    with open(shard, "r+b") as f:
        f.truncate(1000)

    damaged = open_store(store)
    with pytest.raises(StoreError, match=rf"^entry {entry_id}: unreadable \(.*{part}/atoms"):
        damaged.entry(entry_id)
    # the other arrays of the entry still read, and hold what the undamaged store holds
    tokens = damaged.entry(entry_id, arrays=["tokens"]).tokens
    want = open_store(sample_store).entry(entry_id, arrays=["tokens"]).tokens
    assert tokens.keys() == want.keys() and all(np.array_equal(tokens[k], want[k]) for k in want)

    problems = verify_store(store)
    in_part = _ids_in_part(store, part)
    assert in_part and entry_id in in_part
    for i in in_part:
        assert any(p.startswith(f"entry {i}: unreadable (") and f"{part}/atoms" in p for p in problems), (
            i,
            problems,
        )

    run = _cli("verify", str(store))
    assert run.returncode == 4, (run.returncode, run.stderr[-2000:])
    assert "Traceback" not in run.stderr and f"MISMATCH entry {entry_id}: unreadable" in run.stdout

    run = _cli("show", str(store), entry_id)
    assert run.returncode == 3, (run.returncode, run.stderr[-2000:])
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: entry {entry_id}: unreadable"), run.stderr


def test_missing_structure_shard_file(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path)
    entry_id, part = _largest_entry(store)
    shard = _only_file(store / "parts" / part / "atoms")
    shard.unlink()

    # zarr alone reads the missing shard as its fill value: zeros, not an error
    with pytest.raises(StoreError, match=rf"^entry {entry_id}: unreadable \(.*missing") as info:
        open_store(store).entry(entry_id, arrays=["atoms/coords"])
    assert str(shard) in str(info.value)

    problems = verify_store(store)
    assert f"part {part}: array atoms is missing its data file {shard}" in problems, problems
    assert any(p.startswith(f"entry {entry_id}: unreadable (") and str(shard) in p for p in problems), (
        problems
    )


def test_undamaged_store_verifies(sample_store: Path) -> None:
    assert verify_store(sample_store) == []


def test_arrays_as_one_string(sample_store: Path) -> None:
    store = open_store(sample_store)
    entry_id = store.ids[0]
    one = store.entry(entry_id, arrays="atoms/coords")
    listed = store.entry(entry_id, arrays=["atoms/coords"])
    assert list(one.atoms) == ["coords"] and not one.tokens and not one.bonds
    np.testing.assert_array_equal(one.atoms["coords"], listed.atoms["coords"])
    assert one.atoms["coords"].shape == (store.entry_meta(entry_id)["atom_count"], 3)
    group = store.entry(entry_id, arrays="tokens")
    assert set(group.tokens) == set(Token.names or ()) and not group.atoms


@pytest.mark.parametrize("url", ["http://127.0.0.1:8765", "https://lookup.example.org/"])
def test_open_store_of_a_url_points_at_the_client(url: str) -> None:
    with pytest.raises(StoreError) as info:
        open_store(url)
    msg = str(info.value)
    assert msg.startswith(f"{url} is a URL") and "LookupClient" in msg, msg


def test_damaged_msa_strip_read_locally_names_the_msa(sample_store: Path, tmp_path: Path) -> None:
    """``store.msa(key)`` on a strip cut short: a StoreError naming the MSA and the array (it was
    zarr's own ValueError, which the service and verify caught but a local reader's caller got raw)."""
    store = _copy(sample_store, tmp_path)
    msas = open_store(store).msas
    key, part, array = (msas.column(c)[0].as_py() for c in ("key", "part", "array"))
    shard = _only_file(store / "parts" / part / array)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(StoreError, match=rf"MSA {key}: unreadable .*{part}/{array}"):
        open_store(store).msa(key)
