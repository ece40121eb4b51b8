"""Samples drawn through a lookup service whose store is rebuilt in place under it (real uvicorn on
127.0.0.1, real builds on the shared Dask cluster): the MSA shapes and the reference-conformer table a
:class:`~featurecache.client.job.SourceRef` keeps for its process follow the client's snapshot, so a
sample after the rebuild plans its MSA rows against the new depth.

Before the fix, ``SourceRef`` kept the shapes of its first sample for the life of the process: after
the MSA was rebuilt shallower every sample of the entry failed (``rows index out of range``), although
the ``LookupClient`` under it had noticed the new depth. A local store is a consistent snapshot (opened
once per process, as the index it reads), so only a service source is concerned.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from featurecache import open_store
from featurecache.build.run import run_build
from featurecache.client.crop import Cropper
from featurecache.client.job import SampleJob, SourceRef
from featurecache.client.sampler import SampleKey
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings
from tests.clusters import shared_scheduler
from tests.conftest import CCD, MSAS, STRUCTURES

ENTRY = "102m"
MSA_REL = "Protenix/mmcif_msa/3"  # 102m's MSA (Protenix layout), hundreds of rows stored
KEEP = 10  # sequences of each of its files the rebuild keeps
MAX_ROWS = 4096  # above either depth: a sample's row count is drawn from 1 … depth


def _build(inputs: Path, out: Path) -> None:
    summary = run_build(pdb_dir=inputs / "structures", out=out, msa_dir=inputs / "msas", ccd=CCD,
                        scheduler=shared_scheduler(1), part_size=4, progress=False)  # fmt: skip
    assert not summary.failures, summary.failures


def _cut_msas(inputs: Path, keep: int) -> None:
    """Keep the first ``keep`` sequences (the query and ``keep - 1`` hits) of each a3m file."""
    for path in sorted((inputs / "msas" / MSA_REL).glob("*.a3m")):
        records = path.read_text().split(">")[1:]
        assert len(records) > keep, path
        path.write_text("".join(">" + r for r in records[:keep]))


def _job(source: SourceRef) -> SampleJob:
    return SampleJob(source, Cropper(max_tokens=64), seed=0, max_msa_rows=MAX_ROWS, augment_ref=False,
                     use_msa=True, hook=None)  # fmt: skip


def _depth(store: Path) -> int:
    reader = open_store(store)
    key = next(c["msa_key"] for c in reader.entry_chains(ENTRY) if c["msa_key"])
    return int(reader.msa(key, None, []).depth)


def _service_depths(url: str) -> set[int]:
    from featurecache.store import arrow_io

    body = httpx.get(f"{url}/v1/tables/msas", timeout=10).content
    return set(arrow_io.read_table(body).column("depth").to_pylist())


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    (tmp_path / "structures").mkdir()
    shutil.copy(STRUCTURES / f"{ENTRY}.cif", tmp_path / "structures")
    shutil.copytree(MSAS / MSA_REL, tmp_path / "msas" / MSA_REL)
    return tmp_path


def test_samples_after_an_in_place_rebuild_plan_rows_against_the_new_depth(inputs: Path) -> None:
    store = inputs / "store"
    _build(inputs, store)
    deep = _depth(store)
    with ThreadedServer(Settings(store_path=store, store_check_seconds=0)) as url:
        source = SourceRef(url)
        job = _job(source)
        first = job(SampleKey(0, 0, 0, ENTRY))
        assert {d for d, _ in source.msa_shapes().values()} == {deep}

        _cut_msas(inputs, KEEP)
        _build(inputs, store)  # in place, under the running service
        shallow = _depth(store)
        assert shallow <= 2 * KEEP < first["msa"].shape[0] <= deep  # the first sample used rows now gone
        assert _service_depths(url) == {shallow}  # the service serves the new index

        local = _job(SourceRef(str(store)))  # the same samples read from the rebuilt store directly
        for i in range(1, 6):  # before: each raised InvalidRequest (rows index out of range)
            key = SampleKey(i, 0, i, ENTRY)
            got = job(key)
            want = local(key)
            assert 1 <= got["msa"].shape[0] <= shallow, i
            for name in ("msa", "msa_mask", "msa_deletions", "profile", "deletion_mean", "restype"):
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} of sample {i}")
        assert {d for d, _ in source.msa_shapes().values()} == {shallow}
        source.get().close()


def test_a_refreshed_client_gives_the_source_its_new_tables(inputs: Path) -> None:
    store = inputs / "store"
    _build(inputs, store)
    deep = _depth(store)
    with ThreadedServer(Settings(store_path=store, store_check_seconds=0)) as url:
        source = SourceRef(url)
        client = source.get()
        components = source.components()
        assert components is not None
        assert {d for d, _ in source.msa_shapes().values()} == {deep}
        _cut_msas(inputs, KEEP)
        _build(inputs, store)
        shallow = _depth(store)
        assert shallow < deep
        client.refresh()  # what a trainer calls to see a rebuilt store (a miss calls it too)
        # the shapes and the conformer table of the snapshot the client holds now, not the first one
        assert {d for d, _ in source.msa_shapes().values()} == {shallow}
        assert source.components() is client.component_table()
        assert source.components() is not components
        client.close()
