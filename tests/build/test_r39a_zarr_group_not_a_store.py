"""Review R39a s50 #2: any zarr group whose attributes held a ``format_version`` (another tool's,
``"1.0"``) was taken for a featurecache store inside the inputs: its directory's structure files
silently stopped being inputs, and their stored entries were reported "sources gone" (which
``prune --sources-gone`` then did not remove). A directory below the inputs is left out as a store
only when it is laid out as featurecache writes a store's root: ``zarr.json`` a group whose
attributes hold an int ``format_version``, an int ``schema_version`` and a ``featurizer_version``,
next to the ``index/`` and ``parts/`` directories. The refusal of a ``--out`` that is a zarr group
(``store.root.check_store_dir``) keeps its own test."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from featurecache.build.discover import is_store_root, walk_inputs
from featurecache.errors import StoreError
from featurecache.store.reader import open_store
from featurecache.store.root import check_store_dir, init_store
from tests.conftest import SAMPLES, build_store


def _group(path: Path, attributes: dict[str, object]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "zarr.json").write_text(
        json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes})
    )


def test_another_tools_zarr_group_is_read_as_input(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pdb = tmp_path / "pdb"
    (pdb / "x").mkdir(parents=True)
    (pdb / "y").mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    shutil.copy(SAMPLES / "structures" / "1A8O.pdb", pdb / "x")
    shutil.copy(SAMPLES / "structures" / "2q2k.cif", pdb / "y")
    out = tmp_path / "store"
    summary = build_store(out, pdb, workers=1)
    assert summary.n_failed == 0
    assert sorted(open_store(out).entries.column("id").to_pylist()) == ["102m", "1A8O", "2q2k"]

    _group(pdb / "x", {"format_version": "1.0", "tool": "mytool"})
    # featurecache's root attributes, but not a store's layout (no index/, parts/)
    store_attrs = json.loads((out / "zarr.json").read_text())["attributes"]
    _group(pdb / "y", store_attrs)
    (pdb / "y" / "index").mkdir()  # one of the two directories only

    caplog.set_level(logging.INFO)
    summary = build_store(out, pdb, workers=1)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "featurecache store inside" in m], messages
    assert summary.entries_gone == []
    assert summary.n_inputs == 5
    fails = set(open_store(out).failures.column("path").to_pylist())
    assert fails == {"x/zarr.json", "y/zarr.json"}
    assert sorted(open_store(out).entries.column("id").to_pylist()) == ["102m", "1A8O", "2q2k"]


def test_out_refusal_keeps_its_test(tmp_path: Path) -> None:
    """A ``--out`` that is a zarr group with a ``format_version`` is still taken for a store (and
    refused for a format this code does not know), one without for another zarr group."""
    _group(tmp_path / "a", {"format_version": "1.0"})
    with pytest.raises(StoreError, match=r"store format '1\.0', which this featurecache does not know"):
        check_store_dir(tmp_path / "a")
    _group(tmp_path / "b", {"tool": "mytool"})
    with pytest.raises(StoreError, match="is a zarr group but not a featurecache store"):
        check_store_dir(tmp_path / "b")


_MISSING = object()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("schema_version", _MISSING),
        ("schema_version", "3"),
        ("schema_version", 3.0),
        ("format_version", _MISSING),
        ("format_version", "2"),
        ("featurizer_version", _MISSING),
        ("featurizer_version", 7),
    ],
    ids=lambda v: "missing" if v is _MISSING else repr(v),
)
def test_each_root_attribute_is_needed_to_be_a_store(tmp_path: Path, key: str, value: object) -> None:
    """Review R40c s51 #6: a store's layout (``index/``, ``parts/``, the root group written by
    ``init_store``) with one of the three attributes missing or of another type is no store: its
    directory's files are inputs. The same layout with the attributes as written is one (left out)."""
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    (pdb / "top.cif").write_text("x\n")
    root = pdb / "other"
    init_store(root, {})
    (root / "a.cif").write_text("x\n")
    assert is_store_root(root)
    assert sorted(p.relative_to(pdb).as_posix() for p in walk_inputs(pdb, warn=False)) == ["top.cif"]

    doc = json.loads((root / "zarr.json").read_text())
    assert type(doc["attributes"][key]) is not type(value)
    if value is _MISSING:
        del doc["attributes"][key]
    else:
        doc["attributes"][key] = value
    (root / "zarr.json").write_text(json.dumps(doc))
    assert not is_store_root(root)
    walked = sorted(p.relative_to(pdb).as_posix() for p in walk_inputs(pdb, warn=False))
    assert walked == ["other/a.cif", "other/parts/zarr.json", "other/zarr.json", "top.cif"], walked
