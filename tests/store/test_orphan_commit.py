"""A part writer whose temp dir is removed under it (a task orphaned by a killed build, while the
next build runs ``remove_leftovers``) must not commit; an incomplete part is never committed.

Real writer functions, real zarr arrays in real directories; the removal is the real
``store.root.remove_leftovers``.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from featurecache.errors import StoreError
from featurecache.featurize.entry import featurize_bytes
from featurecache.store.index import table_from_rows, write_table
from featurecache.store.layout import ENTRY_GROUPS, PART_DONE_FILE, PART_INDEX_DIR, PARTS_DIR, TMP_PREFIX
from featurecache.store.root import remove_leftovers
from featurecache.store.writer import (
    EntryRecord,
    PartContents,
    commit_part,
    part_tmp_dir,
    write_record_array,
    write_structure_part,
)

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "structures" / "1psm.cif"


def _structure_manifest(name: str) -> dict[str, object]:
    return {"part": name, "kind": "structures", "n_entries": 0, "n_failures": 0, "keys": []}


def _write_tables(tmp: Path) -> None:
    idx = tmp / PART_INDEX_DIR
    for t in ("entries", "chains", "interfaces", "failures"):
        write_table(idx / f"{t}.arrow", table_from_rows(t, []))


def _write_arrays(group: zarr.Group, names: list[str]) -> None:
    for g in names:
        records = np.zeros(3, dtype=ENTRY_GROUPS[g])
        records.view(np.uint8)[:] = 7  # not all fill value: zarr writes every shard file
        write_record_array(group, g, records)


def _visible(root: Path) -> list[str]:
    return sorted(p.name for p in (root / PARTS_DIR).iterdir() if not p.name.startswith(TMP_PREFIX))


def test_temp_dir_removed_mid_write_is_not_committed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with pytest.raises(StoreError, match="s-000000"), part_tmp_dir(root, "s-000000") as tmp:
        group = zarr.open_group(str(tmp), mode="w", attributes={"kind": "structures"})
        _write_arrays(group, ["atoms"])
        assert remove_leftovers(root) == 1  # the next build's cleanup
        assert not tmp.exists()
        _write_arrays(group, ["tokens", "bonds", "interfaces"])  # recreates the dir
        _write_tables(tmp)
        assert tmp.is_dir() and not (tmp / "atoms").exists()
        commit_part(tmp, root / PARTS_DIR / "s-000000", _structure_manifest("s-000000"))
    assert _visible(root) == []


def test_temp_dir_recreated_complete_is_not_committed(tmp_path: Path) -> None:
    """Even a dir holding every array is refused once the cleanup removed the writer's own dir."""
    root = tmp_path / "store"
    with (
        pytest.raises(StoreError, match="removed while it was being written"),
        part_tmp_dir(root, "s-000000") as tmp,
    ):
        group = zarr.open_group(str(tmp), mode="w", attributes={"kind": "structures"})
        _write_arrays(group, list(ENTRY_GROUPS))
        _write_tables(tmp)
        shutil.copytree(tmp, tmp_path / "copy")
        assert remove_leftovers(root) == 1
        shutil.copytree(tmp_path / "copy", tmp)  # the orphan's writes land after the removal
        commit_part(tmp, root / PARTS_DIR / "s-000000", _structure_manifest("s-000000"))
    assert _visible(root) == []


def test_incomplete_part_is_not_committed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with pytest.raises(StoreError, match="atoms"), part_tmp_dir(root, "s-000000") as tmp:
        group = zarr.open_group(str(tmp), mode="w", attributes={"kind": "structures"})
        _write_arrays(group, ["tokens", "bonds", "interfaces"])
        _write_tables(tmp)
        commit_part(tmp, root / PARTS_DIR / "s-000000", _structure_manifest("s-000000"))
    assert _visible(root) == []


def test_normal_write_commits_and_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "store"
    data = SAMPLE.read_bytes()
    s = featurize_bytes(data, SAMPLE.name, "1psm")
    rec = EntryRecord(s, "k1", SAMPLE.name, hashlib.sha256(data).hexdigest(), len(data), "cif", 0.0)
    manifest = write_structure_part(root, "s-000000", PartContents(entries=[rec]))
    assert manifest["part"] == "s-000000"
    assert sorted(p.name for p in (root / PARTS_DIR).iterdir()) == ["s-000000"]  # no temp dir or sentinel
    part = root / PARTS_DIR / "s-000000"
    assert (part / PART_INDEX_DIR / PART_DONE_FILE).is_file()
    for g, dt in ENTRY_GROUPS.items():
        raw = zarr.open_array(str(part / g), mode="r")[...]
        got = np.ascontiguousarray(raw).view(dt).reshape(-1)
        assert got.tobytes() == np.ascontiguousarray(getattr(s, g)).tobytes(), g


def test_remove_leftovers_removes_dirs_and_their_sentinels(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with pytest.raises(StoreError), part_tmp_dir(root, "s-000003") as tmp:
        zarr.open_group(str(tmp), mode="w")
        assert len(list((root / PARTS_DIR).iterdir())) >= 1
        assert remove_leftovers(root) == 1
        assert list((root / PARTS_DIR).iterdir()) == []
        raise StoreError("stop")
