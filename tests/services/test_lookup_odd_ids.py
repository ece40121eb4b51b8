"""Every entry a build stores is served, whatever legal file name it came from (review R12 s39 M2).

The service refused ids with a backslash or a control character (422) and ids longer than 255
characters, though the build gives such ids: a file name on Linux may hold any byte but ``/`` and
NUL, and nested inputs whose names collide get their relative path as id (``/`` written ``__``),
which can be longer than any one file name. A real build of real files under such names, served by a
real uvicorn server and read with :class:`LookupClient`, as a training job would read it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from featurecache import open_store
from featurecache.client.http import LookupClient
from services.lookup.server import ThreadedServer
from services.lookup.settings import Settings
from tests.conftest import SAMPLES, build_store

#: file names Linux allows and URLs must escape, each a copy of a small real entry
ODD_NAMES = ("back\\slash.pdb", "tab\tx.pdb", "a#b%20c?d.pdb", "plus+sign.pdb", "semi;colon.pdb")
#: two files named x.pdb: the nested one's id is its relative path, longer than 255 characters
DEEP = ("d" * 200, "e" * 60)


@pytest.fixture(scope="module")
def odd_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    inputs = tmp_path_factory.mktemp("odd_in")
    small = SAMPLES / "structures" / "1A8O.pdb"
    for name in ODD_NAMES:
        shutil.copy(small, inputs / name)
    shutil.copy(small, inputs / "x.pdb")
    deep = inputs.joinpath(*DEEP)
    deep.mkdir(parents=True)
    shutil.copy(small, deep / "x.pdb")
    out = tmp_path_factory.mktemp("odd") / "s"
    build_store(out, inputs)
    return out


def test_every_built_id_is_served(odd_store: Path) -> None:
    local = open_store(odd_store)
    ids = local.ids
    # the build gave these ids (the premise): the odd stems, and a nested id past 255 characters
    assert {n.removesuffix(".pdb") for n in ODD_NAMES} <= set(ids), ids
    assert max(len(i) for i in ids) > 255, [len(i) for i in ids]
    assert len(ids) == len(ODD_NAMES) + 2
    with ThreadedServer(Settings(store_path=odd_store)) as url:
        client = LookupClient(url, retries=0)
        assert client.ids == ids
        for entry_id in ids:
            got = client.entry(entry_id, arrays=["atoms/coords"])
            assert got.id == entry_id
            np.testing.assert_array_equal(got.atoms["coords"], local.entry(entry_id).atoms["coords"])
        batch = client.entries_batch(ids, arrays=["atoms/coords"])
        assert [e.id for e in batch] == ids
