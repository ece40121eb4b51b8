"""A LookupClient's index tables are a snapshot: a store rebuilt or extended under a running service
(real uvicorn on 127.0.0.1, real builds) is picked up where the client would otherwise fail or answer
from the old index: an MSA selected against its old depth, an id the old index lacks, ``refresh()``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from featurecache import open_store
from featurecache.build.config import BuildConfig
from featurecache.build.run import run_build
from featurecache.client.http import LookupClient
from services.lookup.server import ThreadedServer, wait_ready
from services.lookup.settings import Settings
from tests.clusters import shared_scheduler
from tests.conftest import CCD, MSAS, STRUCTURES

MSA_DEPTH = 50  # the rebuilt store's --msa-depth
MSA_REL = "Protenix/mmcif_msa/3"  # 102m's MSA (Protenix layout), 836 rows stored


def _build(root: Path, files: tuple[str, ...], msa_depth: int | None) -> Path:
    inputs = root / "structures"
    inputs.mkdir(parents=True)
    for f in files:
        shutil.copy(STRUCTURES / f, inputs / f)
    shutil.copytree(MSAS / MSA_REL, root / "msas" / MSA_REL)
    out = root / "store"
    config = BuildConfig(msa_depth_cap=msa_depth) if msa_depth is not None else None
    summary = run_build(pdb_dir=inputs, out=out, msa_dir=root / "msas", ccd=CCD,
                        scheduler=shared_scheduler(1), part_size=4, config=config, progress=False)  # fmt: skip
    assert summary.n_built == len(files), summary.failures
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(deep, shallow): 102m with its whole MSA; 102m and 1A8O with the MSA cut to :data:`MSA_DEPTH`."""
    root = tmp_path_factory.mktemp("snapshot")
    return _build(root / "deep", ("102m.cif",), None), _build(
        root / "shallow", ("102m.cif", "1A8O.cif"), MSA_DEPTH
    )


class Served:
    """A store directory served by a real uvicorn server; :meth:`replace` swaps in another store."""

    def __init__(self, root: Path, first: Path) -> None:
        self.path = root / "served"
        shutil.copytree(first, self.path)
        self.server = ThreadedServer(Settings(store_path=self.path, store_check_seconds=0))

    def replace(self, store: Path) -> None:
        staged = self.path.with_name("staged")
        shutil.copytree(store, staged)
        old = self.path.rename(self.path.with_name(f"old-{id(staged)}"))
        staged.rename(self.path)
        shutil.rmtree(old)
        wait_ready(self.server.url, timeout=30)


@pytest.fixture
def served(tmp_path: Path, stores: tuple[Path, Path]) -> Iterator[Served]:
    s = Served(tmp_path, stores[0])
    with s.server:
        yield s


def _msa_key(store: Path) -> str:
    chains = open_store(store).entry_chains("102m")
    return next(c["msa_key"] for c in chains if c["msa_key"])


def test_an_msa_rebuilt_shallower_is_selected_against_its_new_depth(
    served: Served, stores: tuple[Path, Path]
) -> None:
    deep, shallow = stores
    key = _msa_key(deep)
    assert key == _msa_key(shallow)  # same sequence, same key: only the depth differs
    deep_depth = open_store(deep).msa(key, None, []).depth
    assert deep_depth > 200 > MSA_DEPTH
    client = LookupClient(served.server.url)
    assert client.msa(key, rows=slice(0, 5000), cols=slice(0, 5)).residues.shape == (deep_depth, 5)
    served.replace(shallow)
    got = client.msa(key, rows=slice(0, 5000), cols=slice(0, 5))  # before: InvalidRequest, 422
    want = open_store(shallow).msa(key, slice(0, 5000), slice(0, 5))
    assert got.residues.shape == (MSA_DEPTH, 5) and got.depth == MSA_DEPTH
    np.testing.assert_array_equal(got.residues, want.residues)
    np.testing.assert_array_equal(got.species, want.species)
    with pytest.raises(ValueError) as local:
        open_store(shallow).msa(key, [0, deep_depth - 1])
    with pytest.raises(ValueError) as remote:  # an index past the new depth: refused as locally
        client.msa(key, rows=[0, deep_depth - 1])
    assert str(remote.value) == str(local.value)
    client.close()


def test_an_msa_rebuilt_deeper_is_not_cut_to_its_old_depth(served: Served, stores: tuple[Path, Path]) -> None:
    deep, shallow = stores
    served.replace(shallow)
    key = _msa_key(shallow)
    client = LookupClient(served.server.url)
    assert client.msa(key).residues.shape[0] == MSA_DEPTH
    served.replace(deep)
    got = client.msa(key, rows=slice(0, 200), cols=[0, 1, 2])  # before: the old 50 rows, silently
    want = open_store(deep).msa(key, slice(0, 200), [0, 1, 2])
    assert got.residues.shape == (200, 3)
    np.testing.assert_array_equal(got.residues, want.residues)
    client.close()


def test_entries_an_extension_added_are_found_and_refresh_shows_them(
    served: Served, stores: tuple[Path, Path]
) -> None:
    deep, shallow = stores
    client = LookupClient(served.server.url)
    assert client.ids == ["102m"]
    served.replace(shallow)
    new_ids = open_store(shallow).ids
    (added,) = set(new_ids) - {"102m"}
    assert added not in client  # a snapshot: `in` and ids do not ask the service
    assert client.row_of(added) == new_ids.index(added)  # before: NotFound
    assert client.ids == new_ids
    assert client.entry_meta(added)["id"] == added
    served.replace(deep)
    client.refresh()
    assert client.ids == ["102m"]
    with pytest.raises(KeyError):
        client.row_of(added)
    client.close()
