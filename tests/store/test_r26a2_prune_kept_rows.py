"""prune takes every part's rows from the index's kept rows (review R26a s44 #2).

Before, ``unused_parts`` gathered every part's ``_index/*.arrow`` files two or three times (the
index over every part, and again without the unused parts), and the rebuild after the removal a
third time, as a part the kept rows covered was gone: at 12.5k parts 112 s and 1.8 GB to remove
one part. Now the dry run reads no part's index files while the kept rows cover the parts, and
the prune reads only those of the highest part of each kind (``index.forget_parts``' check); what
it writes is what it wrote before: the index files unchanged, the kept rows those of a full gather.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from featurecache.store import index
from featurecache.store.index import complete_parts, gather_part_rows, rebuild_index
from featurecache.store.prune import _ipc_bytes, prune_store, unused_parts


def _index_bytes(store: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((store / "index").glob("*.arrow"))}


def _count_part_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real = index._part_tables

    def counting(part: Path) -> dict[str, object]:
        reads.append(part.name)
        return real(part)

    monkeypatch.setattr(index, "_part_tables", counting)
    return reads


def test_prune_reads_no_part_rows_the_index_kept(
    replaced_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    rebuild_index(store)  # the kept rows cover every part
    before = _index_bytes(store)
    reads = _count_part_reads(monkeypatch)

    assert [p.name for p in unused_parts(store)] == ["s-000000"]
    assert reads == []  # before: every part, twice

    result = prune_store(store)
    assert result.parts == ["s-000000"]
    kinds = {p.name[:2] for p in complete_parts(store)}
    assert len(reads) <= len(kinds) and "s-000000" not in reads  # before: every part three times
    monkeypatch.undo()

    assert _index_bytes(store) == before
    kept = index._load_part_rows(store, index._load_manifest(store) or {})
    assert kept is not None
    full, held = gather_part_rows(complete_parts(store))
    assert {n: _ipc_bytes(t) for n, t in kept.items()} == {n: _ipc_bytes(t) for n, t in full.items()}
    assert set((index._load_manifest(store) or {})["held"]) == held

    fresh = Path(shutil.copytree(store, tmp_path / "fresh"))
    rebuild_index(fresh, incremental=False)
    assert {n: b for n, b in _index_bytes(fresh).items()} == before


def test_kept_rows_of_other_parts_are_not_forgotten(replaced_store: Path, tmp_path: Path) -> None:
    """forget_parts refuses what it cannot vouch for: nothing is changed and the rebuild gathers."""
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    rebuild_index(store)
    manifest = (store / "index" / ".part-rows" / "manifest.json").read_bytes()
    # a part still in place is not gone
    assert not index.forget_parts(store, {"s-000000": store / "parts" / "s-000000"})
    # a part the kept rows never covered
    assert not index.forget_parts(store, {"s-999999": tmp_path / "nowhere"})
    assert (store / "index" / ".part-rows" / "manifest.json").read_bytes() == manifest
