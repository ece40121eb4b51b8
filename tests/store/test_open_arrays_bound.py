"""A reader keeps at most ``FEATURECACHE_MAX_OPEN_ARRAYS`` part arrays open (review R2 F4: a reader
kept every array it ever opened, ~13 KB each, 0.2-0.4 GB per long-lived DataLoader worker over a
store of 200k entries), and reads the same bytes as one that keeps them all; an array closed and
opened again is checked for its shard files as on its first opening."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

import featurecache
from featurecache.errors import StoreError
from featurecache.store.root import MAX_OPEN_ARRAYS, MAX_OPEN_ARRAYS_ENV, PartArrays, max_open_arrays
from tests.conformance.test_reader_conformance import assert_entries_equal
from tests.conftest import MSAS, STRUCTURES, build_store, cli_in_process

#: small real entries, one part each (part_size=1), with MSAs: 5 structure parts of 4 arrays
ENTRIES = ("102m.cif", "1A8O.cif", "1LCD.cif", "2q2k.cif", "7DDO.pdb")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pdb = tmp_path_factory.mktemp("in")
    for name in ENTRIES:
        shutil.copy(STRUCTURES / name, pdb / name)
    out = tmp_path_factory.mktemp("store") / "s"
    build_store(out, pdb, msa_dir=MSAS, part_size=1)
    return out


def test_a_bounded_reader_reads_what_an_unbounded_one_reads(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = featurecache.open_store(store)
    ids = everything.ids
    assert len(ids) == len(ENTRIES) and len(set(everything.entries.column("part").to_pylist())) == len(
        ENTRIES
    )
    want = {e: everything.entry(e) for e in ids}
    keys = sorted({k for k in everything.chains.column("msa_key").to_pylist() if k})
    assert len(keys) >= 3, keys
    want_msa = {k: everything.msa(k) for k in keys}
    monkeypatch.setenv(MAX_OPEN_ARRAYS_ENV, "3")
    bounded = featurecache.open_store(store)
    arrays = bounded._part_arrays
    assert arrays.max_open == 3
    order = [e for _ in range(4) for e in random.Random(7).sample(ids, len(ids))]
    msa_order = [k for _ in range(4) for k in random.Random(8).sample(keys, len(keys))]
    for e, k in zip(order, msa_order, strict=False):
        assert_entries_equal(bounded.entry(e), want[e])
        got, ref = bounded.msa(k), want_msa[k]
        fields = ("residues", "deletions", "species", "source", "profile")
        assert all(getattr(got, f).tobytes() == getattr(ref, f).tobytes() for f in fields), k
        # each entry's part has 4 structure arrays, more than the bound: never more open than it
        assert 0 < arrays.open_count() <= 3, arrays.open_count()
        assert 0 < bounded._msa_reader._part_arrays.open_count() <= 3
    # the unbounded default keeps every array it opened (an entry without bonds or interfaces
    # opens no array of them): more than the bound
    assert everything._part_arrays.open_count() > 3 * len(ENTRIES) // 2


def test_an_array_opened_again_is_checked_for_its_shard_files(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The missing-file check travels with the array: a shard file deleted after its array was
    opened and closed again is named on the next read, not read as zeros."""
    copy = tmp_path / "s"
    shutil.copytree(store, copy, symlinks=True)
    monkeypatch.setenv(MAX_OPEN_ARRAYS_ENV, "1")
    s = featurecache.open_store(copy)
    first, second = s.ids[0], s.ids[1]
    s.entry(first)  # opens (and, past the bound, closes) first's arrays
    s.entry(second)
    part = s.entries.column("part").to_pylist()[s.ids.index(first)]
    shards = sorted(f for f in (copy / "parts" / part / "atoms" / "c").rglob("*") if f.is_file())
    assert shards, part
    for f in shards:
        f.unlink()
    with pytest.raises(StoreError, match=r"data file .* is missing"):
        s.entry(first)


@pytest.mark.parametrize("raw", ["0", "-4", "many", "2.5"])
def test_a_bad_bound_names_the_variable(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_OPEN_ARRAYS_ENV, raw)
    with pytest.raises(StoreError, match=rf"{MAX_OPEN_ARRAYS_ENV}='{raw}' is not a positive integer"):
        max_open_arrays()
    monkeypatch.setenv(MAX_OPEN_ARRAYS_ENV, " 12 ")
    assert max_open_arrays() == 12
    monkeypatch.delenv(MAX_OPEN_ARRAYS_ENV)
    assert max_open_arrays() == MAX_OPEN_ARRAYS


def test_a_hit_keeps_an_array_open_and_the_least_recently_used_is_closed(store: Path) -> None:
    """Least recently used, not first opened: an array read again stays open when another opens."""
    part = featurecache.open_store(store).entries.column("part").to_pylist()[0]
    a, b, c = (part, "atoms"), (part, "tokens"), (part, "bonds")
    arrays = PartArrays(store, "part array", data_files_required=True, max_open=2)
    arrays.get(*a)
    arrays.get(*b)
    arrays.get(*a)  # a is now the most recently used
    arrays.get(*c)
    assert list(arrays._arrays) == [a, c], list(arrays._arrays)


@pytest.mark.parametrize("bad", [0, -1, 2.0])
def test_a_bound_that_is_not_a_positive_integer_is_refused(store: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="max_open must be a positive integer"):
        PartArrays(store, "part array", max_open=bad)  # type: ignore[arg-type]


def test_a_clear_between_reading_the_parts_file_list_and_using_it_is_no_key_error(store: Path) -> None:
    """R7 #1: the lookup service closes a reader (``clear()``) while requests still read through
    it; a reopening that recorded the part's list of unwritten shards and then looked it up again
    met the emptied dict (KeyError: a 500). The interleaving, made deterministic: the dict is
    emptied right after the record."""

    class ClearedAfterRecord(dict):  # type: ignore[type-arg]
        def setdefault(self, key, default=None):  # type: ignore[no-untyped-def]
            value = super().setdefault(key, default)
            self.clear()
            return value

    part = featurecache.open_store(store).entries.column("part").to_pylist()[0]
    arrays = PartArrays(store, "part array", data_files_required=True)
    arrays._fill_only = ClearedAfterRecord()
    assert arrays.read(part, "atoms", (slice(0, 4),)).shape[0] == 4


def test_a_build_refuses_a_bad_bound_before_it_starts(tmp_path: Path) -> None:
    """R7 #2: the build's last stages open readers; a bad value was named only after every
    structure, MSA and conformer was done. Now it is a usage error before anything runs."""
    pdb = tmp_path / "in"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", pdb)
    r = cli_in_process("build", "--pdb-dir", str(pdb), "--out", str(tmp_path / "s"), "--no-progress",
                       env={MAX_OPEN_ARRAYS_ENV: "0"})  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: {MAX_OPEN_ARRAYS_ENV}='0' is not a positive integer (how many part arrays a reader keeps open; "
        f"default {MAX_OPEN_ARRAYS})"
    ], r.stderr
    assert not (tmp_path / "s").exists()
