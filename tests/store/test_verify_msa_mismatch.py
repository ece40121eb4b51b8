"""``verify`` on an MSA that differs from its index names the MSA's part and the arrays that changed.

Real copies of the sample store whose MSA arrays are rewritten through zarr (the shards and their
checksums stay valid, as after a bad copy between stores or a writer bug, so only the content hash
or the array's shape can tell): the test changes chosen arrays of chosen MSAs and expects exactly
those named, as ``test_verify_group_mismatch`` does for entries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import zarr

from featurecache import open_store
from featurecache.store.msa import MSA_COL, MSA_ROW
from featurecache.store.root import decode_records
from featurecache.store.verify import verify_store
from tests.store.test_damaged_parts import _cli, _copy


def _msas(store: Path) -> list[dict[str, Any]]:
    """The msas index rows, deepest first (key order among equals)."""
    rows = open_store(store).msas.to_pylist()
    return sorted(rows, key=lambda r: (-int(r["depth"]), str(r["key"])))


def _add_to_record(
    store: Path, part: str, array: str, dtype: np.dtype, row: int, field: str, delta: float
) -> None:
    """Add ``delta`` to ``field`` of record ``row`` of the part's record array, written back
    through zarr (a valid shard with the new bytes)."""
    arr = zarr.open_array(str(store / "parts" / part / array), mode="r+")
    rec = decode_records(arr[row : row + 1], dtype).copy()
    rec[field] = rec[field] + delta
    arr[row : row + 1] = rec.view(np.uint8).reshape(1, dtype.itemsize)


def _bump_residue_row(store: Path, part: str, array: str, row: int) -> None:
    arr = zarr.open_array(str(store / "parts" / part / array), mode="r+")
    arr[row] = (np.asarray(arr[row]) + 1) % 20


def test_msa_mismatch_names_the_part_and_the_arrays(sample_store: Path, tmp_path: Path) -> None:
    store = _copy(sample_store, tmp_path)
    first, second = _msas(store)[:2]
    assert int(first["depth"]) > 3, first
    _bump_residue_row(store, str(first["part"]), str(first["array"]), 3)
    _add_to_record(store, str(second["part"]), "rows", MSA_ROW, int(second["row_start"]), "species", 7)
    _add_to_record(store, str(second["part"]), "cols", MSA_COL, int(second["col_start"]), "profile", 0.25)

    problems = verify_store(store)
    (one,) = [p for p in problems if p.startswith(f"MSA {first['key']}: content hash ")]
    assert one.endswith(f"(part {first['part']}: array {first['array']} differs)"), problems
    (two,) = [p for p in problems if p.startswith(f"MSA {second['key']}: content hash ")]
    assert two.endswith(f"(part {second['part']}: arrays rows.species, cols.profile differ)"), problems
    assert len(problems) == 2, problems

    run = _cli("verify", "--no-progress", str(store))
    assert run.returncode == 4, (run.returncode, run.stderr[-2000:])
    assert f"MISMATCH {one}" in run.stdout and "Traceback" not in run.stderr, run.stderr[-2000:]


def test_msa_mismatch_in_a_part_without_array_hashes(sample_store: Path, tmp_path: Path) -> None:
    """A part written before the per-array hashes existed: the line still names the part."""
    store = _copy(sample_store, tmp_path)
    msa = _msas(store)[0]
    _bump_residue_row(store, str(msa["part"]), str(msa["array"]), 1)
    hashes = [
        f for f in (store / "parts" / str(msa["part"])).rglob("*") if f.is_file() and "msa_hashes" in f.name
    ]
    assert len(hashes) == 1, hashes
    hashes[0].unlink()
    problems = verify_store(store)
    (line,) = [p for p in problems if p.startswith(f"MSA {msa['key']}: ")]
    assert line.endswith(f"(part {msa['part']}: it records no per-array hashes)"), problems


def test_msa_array_shape_differs_from_the_index(sample_store: Path, tmp_path: Path) -> None:
    """A residues array wider than the index says (its extra columns inside the same shard, so no
    data file is missing), or shorter: verify names the MSA's part and array, without a traceback."""
    store = _copy(sample_store, tmp_path)
    rows = _msas(store)
    # an MSA whose last column strip has room for 2 more columns in its shard (strips of 64)
    wide = next(r for r in rows if int(r["length"]) > 64 and int(r["length"]) % 64 not in (0, 63))
    short = next(r for r in rows if r is not wide and int(r["depth"]) > 1)
    a = zarr.open_array(str(store / "parts" / str(wide["part"]) / str(wide["array"])), mode="r+")
    a.resize((a.shape[0], a.shape[1] + 2))
    b = zarr.open_array(str(store / "parts" / str(short["part"]) / str(short["array"])), mode="r+")
    b.resize((b.shape[0] - 1, b.shape[1]))

    problems = verify_store(store)
    (one,) = [p for p in problems if p.startswith(f"MSA {wide['key']}: ")]
    want = (f"shape ({wide['depth']}, {int(wide['length']) + 2}), index says {wide['depth']} x {wide['length']} "
            f"(part {wide['part']}: array {wide['array']})")  # fmt: skip
    assert one == f"MSA {wide['key']}: {want}", problems
    (two,) = [p for p in problems if p.startswith(f"MSA {short['key']}: ")]
    assert two.startswith(f"MSA {short['key']}: unreadable (part {short['part']}: array {short['array']} "), (
        problems
    )
    assert len(problems) == 2, problems

    run = _cli("verify", "--no-progress", str(store))
    assert run.returncode == 4 and "Traceback" not in run.stderr, (run.returncode, run.stderr[-2000:])
    assert f"MISMATCH {one}" in run.stdout and f"MISMATCH {two}" in run.stdout, run.stdout[-2000:]
