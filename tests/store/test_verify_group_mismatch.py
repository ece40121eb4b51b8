"""``verify``'s content-hash mismatch names the entry's part and the array groups that changed.

Real copies of the sample store whose records are rewritten through zarr (the shards and their
checksums stay valid, as after a bad copy between stores or a writer bug, so only the content hash
can tell): the test changes chosen fields of chosen groups and expects exactly those groups named.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

from featurecache import open_store
from featurecache.store.root import decode_records
from featurecache.store.verify import verify_store
from featurecache.types import Atom, Bond, Token
from tests.store.test_damaged_parts import _cli, _copy


def _rewrite(store: Path, part: str, group: str, dtype: np.dtype, row: int, field: str, delta: float) -> None:
    """Add ``delta`` to ``field`` of record ``row`` of the part's ``group`` array, written back
    through zarr (a valid shard with the new bytes)."""
    arr = zarr.open_array(str(store / "parts" / part / group), mode="r+")
    rec = decode_records(arr[row : row + 1], dtype).copy()
    rec[field] = rec[field] + delta
    arr[row : row + 1] = rec.view(np.uint8).reshape(1, dtype.itemsize)


def test_mismatch_names_the_part_and_the_groups(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path)
    ref = open_store(store)
    metas = {i: ref.entry_meta(i) for i in ref.ids}
    first = max(metas, key=lambda i: metas[i]["atom_count"])
    second = next(i for i in sorted(metas) if i != first and metas[i]["bond_count"] > 0)
    part_of = {i: ref.entries.column("part")[ref.row_of(i)].as_py() for i in (first, second)}

    _rewrite(store, part_of[first], "atoms", Atom, int(metas[first]["atom_start"]), "coords", 1.0)
    _rewrite(
        store, part_of[second], "tokens", Token, int(metas[second]["token_start"]), "residue_index", 1000
    )
    _rewrite(store, part_of[second], "bonds", Bond, int(metas[second]["bond_start"]), "order", 1)

    problems = verify_store(store)
    (one,) = [p for p in problems if p.startswith(f"entry {first}: ")]
    assert f"(part {part_of[first]}: array group atoms differs)" in one, problems
    (two,) = [p for p in problems if p.startswith(f"entry {second}: ")]
    assert f"(part {part_of[second]}: array groups tokens, bonds differ)" in two, problems
    assert len(problems) == 2, problems

    run = _cli("verify", str(store))
    assert run.returncode == 4, (run.returncode, run.stderr[-2000:])
    assert f"MISMATCH {one}" in run.stdout and "Traceback" not in run.stderr, run.stderr[-2000:]


def test_mismatch_in_a_part_without_group_hashes(sample_store: Path, tmp_path: Path) -> None:
    """A part written before the per-group hashes existed: the line still names the part."""
    store = _copy(sample_store, tmp_path)
    ref = open_store(store)
    entry_id = ref.ids[0]
    part = ref.entries.column("part")[ref.row_of(entry_id)].as_py()
    _rewrite(store, part, "atoms", Atom, int(ref.entry_meta(entry_id)["atom_start"]), "b_factor", 5.0)
    hashes = [f for f in (store / "parts" / part).rglob("*") if f.is_file() and "group_hashes" in f.name]
    assert len(hashes) == 1, hashes
    hashes[0].unlink()
    problems = verify_store(store)
    (line,) = [p for p in problems if p.startswith(f"entry {entry_id}: ")]
    assert line.endswith(f"(part {part}: it records no per-group hashes)"), problems
