"""Review R42c s52 #4: what a store holds steered its reads outside it. Whoever can write a store
that is served or read (a downloaded store, another user of a shared store directory) read the
reader's files through it:

- (a) a ``part`` value of ``index/entries.arrow`` (or ``msas.arrow``, ``components.arrow``) of
  ``../../outside/s-OUT`` was joined to ``STORE/parts/``: ``open_store``, ``show``, ``serve`` and
  training read that directory's arrays as the entry's;
- (b) links inside a part were followed: a shard file, its directory, the array's or the part's
  directory linked to a file or directory outside the store;
- (c) an array whose ``zarr.json`` names codecs other than the store format's (plain ``bytes``: no
  sharding, no checksum) was handed to zarr, which returned any file's raw bytes as the array.

Each trick is applied to a copy of a real store built from samples/, the outside file holding
bytes of its own (a marker), and no read may return them: the index is refused when read (a
StoreError naming the file, the column and the value), a link is not followed and an array of
another layout not read (a StoreError naming the path and what is wrong). A store linked as a
whole, or with its ``parts/`` directory linked to another disk, reads as before. One case goes
through a real ``featurecache serve`` on 127.0.0.1: a 500 naming the problem, the outside file's
bytes nowhere in the answer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import zarr

from featurecache.errors import FeatureCacheError, StoreError
from featurecache.store.index import read_table, write_table
from featurecache.store.layout import ENTRY_GROUPS
from featurecache.store.reader import open_store
from services.lookup.server import free_port, wait_ready
from tests.conftest import cli_in_process

#: the byte every outside array and file is filled with: 16 in a row never occur in the sample's data
MARK = 0x5A
RUN = bytes([MARK]) * 16
SECRET = b"ssh-private-key: SUPERSECRET-"


def _fill(array_dir: Path) -> None:
    """Rewrite the zarr array at ``array_dir`` through zarr with :data:`MARK` everywhere: the store
    format's layout, shard index and checksums valid, every value the marker."""
    arr = zarr.open_array(str(array_dir), mode="r+")
    arr[...] = np.full(arr.shape, MARK, dtype=arr.dtype)


def _entry_part(store: Path, entry_id: str) -> str:
    entries = open_store(store).entries
    return str(entries.column("part")[entries.column("id").to_pylist().index(entry_id)].as_py())


def _everything(store: Path) -> tuple[bytes, BaseException | None]:
    """The bytes of every array a reader gives of ``store`` (every entry's groups as stored, every
    MSA, every reference conformer), as far as it gets, and the error that stopped it (None)."""
    got = bytearray()
    try:
        s = open_store(store)
        for entry_id in s.ids:
            for records in s.read_groups(entry_id, ["atoms", "tokens", "bonds", "interfaces"]).values():
                got += records.tobytes()
            entry = s.entry(entry_id)
            for group in (entry.atoms, entry.tokens, entry.bonds, entry.interfaces):
                for values in group.values():
                    got += np.ascontiguousarray(values).tobytes()
        for key in s.msas.column("key").to_pylist():
            block = s.msa(key)
            for a in (block.residues, block.deletions, block.species, block.profile):
                got += np.ascontiguousarray(a).tobytes()
        table = s.component_table()
        for a in (table.ref_pos, table.name, table.element, table.charge):
            got += np.ascontiguousarray(a).tobytes()
    except StoreError as exc:
        return bytes(got), exc
    return bytes(got), None


@pytest.fixture
def store(two_entry_store: Path, tmp_path: Path) -> Path:
    """A copy of a real store (1psm and 2q2k of samples/ with their MSAs and the sample CCD, one
    entry a part), read in full once: no marker in its data."""
    copy = tmp_path / "store"
    shutil.copytree(two_entry_store, copy, symlinks=True)
    got, err = _everything(copy)
    assert err is None and RUN not in got and SECRET not in got
    return copy


# --------------------------------------------------------------------------- (a) names in the index


def _point_index_outside(store: Path, table: str, prefix: str) -> str:
    """Copy the first part ``table`` names to ``STORE/../outside/<prefix>-OUT`` with its arrays of
    marker values, and make every row of ``index/<table>.arrow`` naming that part name the copy
    by ``../../outside/<prefix>-OUT``; returns the value."""
    f = store / "index" / f"{table}.arrow"
    t = read_table(f, memory_map=False)
    part = str(t.column("part")[0].as_py())
    outside = store.parent / "outside" / f"{prefix}-OUT"
    shutil.copytree(store / "parts" / part, outside)
    arrays = {"entries": ["atoms"], "components": ["atoms"]}.get(table)
    if arrays is None:  # an MSA part: its residues
        arrays = [str(a) for a in t.column("array").to_pylist() if (outside / str(a)).is_dir()]
    for name in arrays:
        _fill(outside / name)
    value = f"../../outside/{prefix}-OUT"
    parts = [value if p == part else p for p in t.column("part").to_pylist()]
    write_table(f, t.set_column(t.column_names.index("part"), "part", pa.array(parts, pa.string())))
    return value


@pytest.mark.parametrize("table, prefix", [("entries", "s"), ("msas", "m"), ("components", "c")])
def test_a_part_named_outside_the_store_by_the_index_is_refused(store: Path, table: str, prefix: str) -> None:
    value = _point_index_outside(store, table, prefix)
    got, err = _everything(store)
    assert RUN not in got, "the outside part's arrays were read as the store's"
    assert isinstance(err, StoreError), "no error for an index naming a part outside the store"
    message = str(err)
    assert f"{table}.arrow" in message and repr(value) in message and "not a part name" in message, message


def test_the_cli_refuses_such_an_index_with_exit_3(store: Path) -> None:
    value = _point_index_outside(store, "entries", "s")
    run = cli_in_process("show", str(store), "1psm")
    assert run.returncode == 3, (run.returncode, run.stdout, run.stderr)
    assert "entries.arrow" in run.stderr and repr(value) in run.stderr, run.stderr


# --------------------------------------------------------------------------- (b) links in a part


def _link_outside(store: Path, where: str) -> Path:
    """Replace, in the part holding 1psm, ``where`` (the atoms array's shard file, its directory,
    the array's directory or the part's directory) by a link to a copy outside the store whose
    atoms are marker values; returns the link."""
    part = store / "parts" / _entry_part(store, "1psm")
    outside = store.parent / "outside" / part.name
    shutil.copytree(part, outside)
    _fill(outside / "atoms")
    (shard,) = [p for p in (part / "atoms" / "c").rglob("*") if p.is_file()]
    link = {
        "shard file": shard,
        "shard directory": part / "atoms" / "c",
        "array directory": part / "atoms",
        "part directory": part,
    }[where]
    target = outside / link.relative_to(part)
    if link.is_dir():
        shutil.rmtree(link)
    else:
        link.unlink()
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("where", ["shard file", "shard directory", "array directory", "part directory"])
def test_a_link_inside_a_part_is_not_followed(store: Path, where: str) -> None:
    link = _link_outside(store, where)
    got, err = _everything(store)
    assert RUN not in got, f"the {where} linked outside the store was followed"
    assert isinstance(err, StoreError), "no error for a link inside a part"
    assert "symbolic link" in str(err) and str(link) in str(err), err


def test_a_store_linked_whole_or_its_parts_directory_linked_reads_as_before(
    store: Path, tmp_path: Path
) -> None:
    want, err = _everything(store)
    assert err is None and want
    whole = tmp_path / "current"
    whole.symlink_to(store)  # serve's documented swap: a link to the store
    assert _everything(whole) == (want, None)
    disk2 = tmp_path / "disk2"
    disk2.mkdir()
    shutil.move(str(store / "parts"), str(disk2 / "parts"))
    (store / "parts").symlink_to(disk2 / "parts")  # parts/ moved to another disk and linked back
    assert _everything(store) == (want, None)
    assert _everything(whole) == (want, None)


# --------------------------------------------------------------------------- (c) another layout


def _plain_bytes(store: Path, victim: Path | None) -> tuple[Path, bytes]:
    """The reviewer's trick on the atoms of 1psm's part: its ``zarr.json`` codecs set to plain
    ``[bytes]`` (no sharding, no checksum), its one chunk file a link to ``victim`` (written here
    at the chunk's size; None: the secret's bytes in a regular file inside the store). Returns the
    array's directory and the bytes the chunk holds."""
    array = store / "parts" / _entry_part(store, "1psm") / "atoms"
    meta = json.loads((array / "zarr.json").read_text())
    size = int(np.prod(meta["chunk_grid"]["configuration"]["chunk_shape"]))
    meta["codecs"] = [{"name": "bytes"}]
    (array / "zarr.json").write_text(json.dumps(meta))
    shutil.rmtree(array / "c")
    (array / "c" / "0").mkdir(parents=True)
    secret = (SECRET * (size // len(SECRET) + 1))[:size]
    chunk = array / "c" / "0" / "0"
    if victim is None:
        chunk.write_bytes(secret)
    else:
        victim.write_bytes(secret)
        victim.chmod(0o600)
        chunk.symlink_to(victim)
    return array, secret


@pytest.mark.parametrize("chunk", ["a link to a file outside the store", "a file in the store"])
def test_an_array_not_of_the_store_layout_is_not_read(store: Path, tmp_path: Path, chunk: str) -> None:
    victim = tmp_path / "victim.txt" if chunk.startswith("a link") else None
    array, _ = _plain_bytes(store, victim)
    got, err = _everything(store)
    assert SECRET not in got, "the chunk's bytes were returned as the array"
    assert isinstance(err, StoreError), "no error for an array of another layout"
    message = str(err)
    assert "not of the store format's layout" in message and "codecs [bytes]" in message, message
    assert str(array / "zarr.json") in message, message


def test_the_lookup_service_answers_500_without_the_outside_file(store: Path, tmp_path: Path) -> None:
    """The reviewer's exact reproduction through a real ``featurecache serve``: the array of plain
    ``bytes`` whose chunk links to a 0600 file outside the store, and a shard file of another array
    linked to an outside copy of marker values."""
    _plain_bytes(store, tmp_path / "victim.txt")
    part = store / "parts" / _entry_part(store, "2q2k")
    outside = tmp_path / "outside2"
    shutil.copytree(part / "atoms", outside)
    _fill(outside)
    (shard,) = [p for p in (part / "atoms" / "c").rglob("*") if p.is_file()]
    shard.unlink()
    shard.symlink_to(outside / shard.relative_to(part / "atoms"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEATURECACHE_AUTH_TOKEN")}
    proc = subprocess.Popen([sys.executable, "-m", "featurecache.cli", "serve", str(store), "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        wait_ready(url, timeout=60)
        import httpx

        from featurecache.client.http import LookupClient

        client = LookupClient(url)
        for entry_id, problem in (("1psm", "not of the store format's layout"), ("2q2k", "symbolic link")):
            body = b""
            try:
                atoms = client.entry(entry_id, arrays=["atoms"]).atoms
                # the records put back together (the client gives them field by field)
                records = np.zeros(len(atoms["coords"]), dtype=ENTRY_GROUPS["atoms"])
                for f, values in atoms.items():
                    records[f] = values
                body = records.tobytes()
                error = ""
            except FeatureCacheError as exc:
                error = str(exc)
            assert SECRET not in body and RUN not in body, f"{entry_id}: the outside file was served"
            assert problem in error, (entry_id, error)
            assert SECRET.decode() not in error, error
            raw = httpx.get(f"{url}/v1/entries/{entry_id}", timeout=30)
            assert raw.status_code == 500, (raw.status_code, raw.text[:300])
            assert SECRET not in raw.content and RUN not in raw.content
            assert problem in raw.json()["detail"], raw.text
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert SECRET.decode() not in out
