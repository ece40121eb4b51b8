"""``MSAReader.msa`` reads an MSA's deletion cells in its first round trip into zarr's event loop
when the row range spans most of the MSA (review R2 s26, finding 4): it once read the residues and
row / column records in one ``read_many``, then the range's deletion cells in a second. Both paths
must give the same blocks: compared over the real corpus store's MSAs on random selections
(duplicates, unsorted rows, a single row, the last row), and with the whole MSA read and indexed
by numpy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import featurecache
import featurecache.store.msa as msa_mod
from featurecache.store.msa import MSAReader

ARRAYS = ("residues", "deletions", "species", "source", "profile", "deletion_mean")


def _counting(reader: MSAReader) -> list[int]:
    """Count the reader's round trips into zarr (every read goes through ``read_many``)."""
    calls: list[int] = []
    parts = reader._part_arrays
    read_many = parts.read_many

    def counted(*reads: Any) -> Any:
        calls.append(len(reads))
        return read_many(*reads)

    parts.read_many = counted  # type: ignore[method-assign]
    return calls


def _selections(depth: int, length: int, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    n = min(depth, 200)
    out = [
        (np.sort(rng.choice(depth, n, replace=False)), np.arange(length)),  # a sample's uniform draw
        (rng.choice(depth, n, replace=False), rng.permutation(length)[: max(1, length // 3)]),  # unsorted
        (rng.integers(0, depth, 2 * n), rng.integers(0, length, 40)),  # duplicates in both
        (np.array([depth - 1]), np.arange(length)),  # the last row alone
        (np.array([0, depth - 1, depth - 1, 0]), np.array([length - 1, 0])),  # first and last, repeated
        (np.array([rng.integers(depth)]), np.array([rng.integers(length)])),  # a single cell
        (np.arange(depth // 2, depth // 2 + 3), np.arange(length)),  # a short range in the middle
    ]
    return out


def test_both_deletion_paths_give_the_same_blocks(
    corpus_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = featurecache.open_store(corpus_store)
    try:
        table = store.msas
    finally:
        store.close()
    rows = [r for r in table.to_pylist() if r["depth"] > 1]
    assert sum(r["del_count"] > 0 for r in rows) >= 10  # MSAs with deletion cells to place
    reader = MSAReader(corpus_store, table)
    calls = _counting(reader)
    rng = np.random.default_rng(0)
    folded = 0
    try:
        for r in rows:
            key, depth, length = r["key"], r["depth"], r["length"]
            monkeypatch.setattr(msa_mod, "READ_ALL_DELETIONS_EXTRA", -1)  # never: a second round trip
            whole = reader.msa(key)
            for sel_rows, sel_cols in _selections(depth, length, rng):
                expect = {
                    "residues": whole.residues[np.ix_(sel_rows, sel_cols)],
                    "deletions": whole.deletions[np.ix_(sel_rows, sel_cols)],
                    "species": whole.species[sel_rows], "source": whole.source[sel_rows],
                    "profile": whole.profile[sel_cols], "deletion_mean": whole.deletion_mean[sel_cols],
                }  # fmt: skip
                got = {}
                for extra in (-1, 1 << 62):  # never / always in the first trip
                    monkeypatch.setattr(msa_mod, "READ_ALL_DELETIONS_EXTRA", extra)
                    got[extra] = reader.msa(key, sel_rows, sel_cols)
                for blk in got.values():
                    for name in ARRAYS:
                        a, b = getattr(blk, name), expect[name]
                        assert a.dtype == b.dtype and a.shape == b.shape, (key, name)
                        assert a.tobytes() == b.tobytes(), (key, name, sel_rows[:5], sel_cols[:5])
                folded += int(r["del_count"] > 0 and np.any(expect["deletions"]))
    finally:
        reader.close()
    assert folded >= 10  # selections whose blocks hold deletions: the cells were placed
    assert calls  # the reads went through the counted read_many


def test_a_sample_draw_reads_an_msa_in_one_round_trip(corpus_store: Path) -> None:
    store = featurecache.open_store(corpus_store)
    try:
        table = store.msas
    finally:
        store.close()
    rows = [r for r in table.to_pylist() if r["depth"] > 100 and r["del_count"] > 0]
    assert rows
    reader = MSAReader(corpus_store, table)
    calls = _counting(reader)
    rng = np.random.default_rng(1)
    try:
        for r in rows:
            reader.msa(r["key"], [0], [0])  # arrays opened; not counted below
            calls.clear()
            # the client's draw: the query and a uniform subset of the other rows, cropped columns
            sel = np.r_[0, np.sort(rng.choice(np.arange(1, r["depth"]), 127, replace=False))]
            blk = reader.msa(r["key"], sel, np.arange(min(r["length"], 100)))
            assert len(calls) == 1, (r["key"], calls)
            assert calls[0] == 4  # residues, row and column records, deletion cells
            assert blk.deletions.shape == (128, min(r["length"], 100))
    finally:
        reader.close()


def test_a_deletions_array_cut_short_is_one_store_error_on_either_path(
    sample_store: Path, tmp_path: Path
) -> None:
    """Review RF1 s26 #2: with the part's deletions array shorter than the index says, a narrow row
    range (the second round trip) raised an IndexError or returned all-zero deletions; only the
    folded read checked the length. Both paths now raise one StoreError naming the MSA, the part
    and the array."""
    import json
    import shutil

    from featurecache.errors import StoreError

    store = tmp_path / "store"
    shutil.copytree(sample_store, store)
    msas = featurecache.open_store(store).msas.to_pylist()
    # the MSA whose deletion cells end its part's deletions array, the one with the most cells
    last = {}
    for m in msas:
        if m["del_count"] > 0 and m["del_start"] + m["del_count"] >= last.get(m["part"], {"end": -1})["end"]:
            last[m["part"]] = {**m, "end": m["del_start"] + m["del_count"]}
    m = max(last.values(), key=lambda x: x["del_count"])
    assert m["depth"] >= 20 and m["del_count"] >= 20, m  # the premise: a deep MSA with deletions
    meta_path = store / "parts" / m["part"] / "deletions" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    assert meta["shape"][0] == m["end"], (meta["shape"], m["end"])
    meta["shape"][0] = m["del_start"] + m["del_count"] // 2  # the MSA's later half of cells is cut
    meta_path.write_text(json.dumps(meta))

    reader = MSAReader(store, featurecache.open_store(store).msas)
    depth, key = int(m["depth"]), m["key"]
    narrow = np.arange(depth - 10, depth)  # the last rows: their cells are the cut ones
    assert not msa_mod.read_all_deletions(narrow.size, depth, int(m["del_count"]))
    wide = np.arange(depth)
    assert msa_mod.read_all_deletions(wide.size, depth, int(m["del_count"]))
    for rows in (narrow, wide):
        with pytest.raises(StoreError) as err:
            reader.msa(key, rows, np.arange(int(m["length"])))
        text = str(err.value)
        assert text.startswith(f"MSA {key}: unreadable (part {m['part']}: array deletions is smaller"), text
