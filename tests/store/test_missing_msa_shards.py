"""A missing shard file of an MSA or component part is an error naming the part, array and file.

zarr does not write a shard that holds only the fill value, and zarr reads a missing shard back as
that fill value: a deleted MSA strip read as residue 0 everywhere, a deleted ``rows`` file as
species 0 and no deletions, a deleted component ``atoms`` file as reference positions at the
origin, and training got them silently. MSA and component parts now list the shard files zarr
left unwritten (``fill_only_shards``); any other missing file is damage. Real stores (the sample
and a one-entry build), files deleted as a bad copy deletes them, a real uvicorn for the service.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import zarr

from featurecache import open_store
from featurecache.errors import StoreError
from featurecache.store.verify import verify_store
from tests.conftest import STRUCTURES, build_store


def _copy(src: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(src, tmp_path / "store"))


def _shard_files(array_dir: Path) -> list[Path]:
    return sorted(f for f in array_dir.rglob("*") if f.is_file() and f.name != "zarr.json")


def _cli_verify(store: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "featurecache.cli", "verify", "--no-progress", str(store)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _deepest_msa(store: Path) -> tuple[str, str, str]:
    """(key, part, residues array) of the deepest MSA: one built from alignment files."""
    msas = open_store(store).msas
    i = int(np.argmax(msas.column("depth").to_numpy()))
    return tuple(msas.column(c)[i].as_py() for c in ("key", "part", "array"))  # type: ignore[return-value]


def test_a_deleted_msa_strip_is_an_error_not_zeros(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path)
    key, part, array = _deepest_msa(store)
    (shard,) = _shard_files(store / "parts" / part / array)
    stored = np.asarray(zarr.open_array(str(store / "parts" / part / array), mode="r")[...])
    assert stored.any(), "the strip holds residues other than code 0: its file was written"
    shard.unlink()
    # zarr alone now reads the strip as the fill value, with no error
    assert not np.asarray(zarr.open_array(str(store / "parts" / part / array), mode="r")[...]).any()

    with pytest.raises(StoreError, match=rf"^MSA {key}: unreadable \(.*{part}/{array}.*missing") as info:
        open_store(store).msa(key, rows=[0], cols=[0])
    assert str(shard) in str(info.value)

    problems = verify_store(store)
    assert f"part {part}: array {array} is missing its data file {shard}" in problems, problems
    assert any(p.startswith(f"MSA {key}: unreadable (") and str(shard) in p for p in problems), problems
    run = _cli_verify(store)
    assert run.returncode == 4 and "Traceback" not in run.stderr, (run.returncode, run.stderr[-2000:])
    assert f"MSA {key}: unreadable" in run.stdout


def test_a_deleted_msa_rows_file_is_an_error(sample_store: Path, tmp_path: Path) -> None:
    """The per-row records (species, source, deletion offsets) of a part's MSAs."""
    store = _copy(sample_store, tmp_path)
    key, part, _ = _deepest_msa(store)
    (shard,) = _shard_files(store / "parts" / part / "rows")
    shard.unlink()
    with pytest.raises(StoreError, match=rf"^MSA {key}: unreadable \(.*{part}/rows.*missing"):
        open_store(store).msa(key)
    assert f"part {part}: array rows is missing its data file {shard}" in verify_store(store)


def test_a_deleted_component_shard_is_an_error(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path)
    reader = open_store(store)
    comps = reader.components
    part = comps.column("part")[0].as_py()
    (shard,) = _shard_files(store / "parts" / part / "atoms")
    shard.unlink()
    with pytest.raises(StoreError, match=rf"^components: unreadable \(.*{part}/atoms.*missing") as info:
        open_store(store).component_table()
    assert str(shard) in str(info.value)
    problems = verify_store(store)
    assert f"part {part}: array atoms is missing its data file {shard}" in problems, problems
    assert any(p.startswith("components: unreadable (") and str(shard) in p for p in problems), problems


@pytest.fixture(scope="module")
def single_sequence_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1psm built without MSA files: its MSA part holds a single-sequence MSA only."""
    inputs = tmp_path_factory.mktemp("single") / "in"
    inputs.mkdir()
    shutil.copy(STRUCTURES / "1psm.cif", inputs)
    store = inputs.parent / "s"
    build_store(store, inputs, workers=1)
    return store


def test_a_shard_left_unwritten_as_all_fill_value_reads(single_sequence_store: Path, tmp_path: Path) -> None:
    """One entry without MSA files: its part holds single-sequence MSAs only, whose row records
    (species 0, source 0 = the query, no deletions) are all zero, so zarr writes no ``rows`` file.
    That part reads and verifies; deleting a file that was written is still damage."""
    store = _copy(single_sequence_store, tmp_path)
    reader = open_store(store)
    (key,) = reader.msas.column("key").to_pylist()
    part = reader.msas.column("part")[0].as_py()
    assert _shard_files(store / "parts" / part / "rows") == []  # all fill value: not written
    attrs = json.loads((store / "parts" / part / "zarr.json").read_text())["attributes"]
    assert attrs["fill_only_shards"] == ["rows/c/0/0"]
    block = reader.msa(key)
    assert block.depth == 1 and not block.species.any() and not block.source.any()
    sequence = next(s for s in reader.chains.column("sequence").to_pylist() if s)
    assert block.residues.shape == (1, len(sequence))
    assert verify_store(store) == []

    (cols,) = _shard_files(store / "parts" / part / "cols")
    cols.unlink()
    with pytest.raises(StoreError, match=rf"^MSA {key}: unreadable \(.*{part}/cols.*missing"):
        open_store(store).msa(key)


def test_a_part_from_before_the_list_reads_as_it_did(single_sequence_store: Path, tmp_path: Path) -> None:
    """An MSA part written by an older featurecache has no ``fill_only_shards``: a missing file
    there cannot be told from an empty shard, so it reads as the fill value, as it always did
    (the store stays readable)."""
    store = _copy(single_sequence_store, tmp_path)
    reader = open_store(store)
    (key,) = reader.msas.column("key").to_pylist()
    part = reader.msas.column("part")[0].as_py()
    meta = store / "parts" / part / "zarr.json"
    doc = json.loads(meta.read_text())
    del doc["attributes"]["fill_only_shards"]  # the group metadata the older writer left
    meta.write_text(json.dumps(doc))
    assert open_store(store).msa(key).depth == 1
    assert verify_store(store) == []


def test_the_service_answers_500_for_a_missing_msa_strip(sample_store: Path, tmp_path: Path) -> None:
    from services.lookup.server import ThreadedServer
    from services.lookup.settings import Settings

    store = _copy(sample_store, tmp_path)
    key, part, array = _deepest_msa(store)
    other = next(k for k in open_store(store).msas.column("key").to_pylist() if k != key)
    with ThreadedServer(Settings(store_path=store)) as url, httpx.Client(base_url=url) as http:
        assert http.get(f"/v1/msas/{other}").status_code == 200
        (shard,) = _shard_files(store / "parts" / part / array)
        shard.unlink()
        r = http.get(f"/v1/msas/{key}", params={"rows": "0", "cols": "0"})
        assert r.status_code == 500 and "retry-after" not in r.headers, (r.status_code, r.text[:300])
        detail = r.json()["detail"]
        assert detail.startswith(f"MSA {key}: unreadable (") and "is missing" in detail, detail
        assert str(tmp_path) not in r.text
