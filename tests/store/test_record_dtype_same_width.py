"""Records as wide as this featurecache's, described otherwise by their ``record_dtype``, are
refused, not decoded as this featurecache's (review R16 s40 #2).

The reader consulted a part's ``record_dtype`` attribute only when the record width differed from
its own dtype's, so a part whose atoms renamed or retyped a field at the same width (a later
featurecache's) was decoded with this one's fields: ``occupancy`` stored as int32 read back as
float32 1.0 where the int was 1065353216, and ``verify`` said the store was fine. The attribute is
what a plain zarr reader decodes with (docs/store.md "Reading a store without featurecache")."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import featurecache
from featurecache.errors import StoreError
from featurecache.types import Atom


def _retyped(src: Path, dst: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    shutil.copytree(src, dst, symlinks=True)
    part = featurecache.open_store(dst).entries.column("part")[0].as_py()
    meta = dst / "parts" / part / "atoms" / "zarr.json"
    doc = json.loads(meta.read_text())
    descr = ast.literal_eval(doc["attributes"]["record_dtype"])
    doc["attributes"]["record_dtype"] = repr(edit(descr))
    assert np.dtype(ast.literal_eval(doc["attributes"]["record_dtype"])).itemsize == Atom.itemsize
    meta.write_text(json.dumps(doc))
    return dst


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: [(("b_factor_x100" if n == "b_factor" else n), *rest) for n, *rest in d], "b_factor_x100"),
        (lambda d: [(n, "<i4" if n == "occupancy" else t, *rest) for n, t, *rest in d], "occupancy"),
    ],
    ids=["renamed", "retyped"],
)
def test_a_same_width_part_with_other_fields_is_refused(
    sample_store: Path, tmp_path: Path, edit, field: str
) -> None:  # type: ignore[no-untyped-def]
    store = featurecache.open_store(_retyped(sample_store, tmp_path / "s", edit))
    with pytest.raises(StoreError, match=rf"atoms.*{field}"):
        store.entry(store.ids[0])


def test_a_same_width_part_with_the_same_dtype_reads(sample_store: Path, tmp_path: Path) -> None:
    """The attribute spelled otherwise (no blanks), the dtype equal: read as before."""
    want = featurecache.open_store(sample_store)
    copy = _retyped(sample_store, tmp_path / "s", lambda d: d)
    part = want.entries.column("part")[0].as_py()
    meta = copy / "parts" / part / "atoms" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["record_dtype"] = doc["attributes"]["record_dtype"].replace(" ", "")
    assert doc["attributes"]["record_dtype"] != repr(Atom.descr)
    meta.write_text(json.dumps(doc))
    store = featurecache.open_store(copy)
    for entry_id in store.ids:
        for name in ("coords", "occupancy", "b_factor", "name"):
            assert store.entry(entry_id).atoms[name].tobytes() == want.entry(entry_id).atoms[name].tobytes()
