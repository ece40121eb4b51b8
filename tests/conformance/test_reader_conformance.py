"""The reading interface, run against every implementation (``reader`` is parametrized: local, http).

Expected values come from the store opened directly (``reference``), from the sample's files on
disk, and from consistency rules of the layout (token atom ranges tile the atom table, …).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from featurecache.errors import NotFound
from featurecache.store.base import FeatureReader
from featurecache.store.layout import ENTRY_GROUPS, GROUP_OFFSETS, TABLES
from featurecache.store.reader import LocalStore
from featurecache.types import Entry

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "structures"
GROUPS = tuple(ENTRY_GROUPS)


def _stem(name: str) -> str:
    for suffix in (".gz", ".cif", ".pdb", ".bcif"):
        name = name.removesuffix(suffix)
    return name


def same(a: Any, b: Any) -> bool:
    """Equality of JSON-like values where NaN equals NaN (index rows carry NaN resolutions)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def assert_tables_equal(got: pa.Table, want: pa.Table) -> None:
    assert got.schema.equals(want.schema), f"{got.schema}\n!=\n{want.schema}"
    assert got.num_rows == want.num_rows
    for name in want.column_names:
        assert same(got.column(name).to_pylist(), want.column(name).to_pylist()), name


def assert_entries_equal(got: Entry, want: Entry, groups: dict[str, set[str] | None] | None = None) -> None:
    assert got.id == want.id
    for g in GROUPS:
        want_fields = getattr(want, g)
        got_fields = getattr(got, g)
        sel = set() if groups is None else groups.get(g, set())
        expected: set[str] = set(want_fields) if groups is None or sel is None else sel
        assert set(got_fields) == expected, (g, sorted(got_fields), sorted(expected))
        for f in expected:
            a, b = got_fields[f], want_fields[f]
            assert a.dtype == b.dtype and a.shape == b.shape, (g, f, a.dtype, b.dtype, a.shape, b.shape)
            np.testing.assert_array_equal(a, b, err_msg=f"{got.id} {g}/{f}")
    assert same(got.meta, want.meta)
    assert same(got.chains, want.chains)


# ---------------------------------------------------------------------------------- the index
def test_ids_are_the_sample_structures(reader: FeatureReader) -> None:
    expected = {_stem(p.name) for p in SAMPLES.iterdir() if p.is_file()}
    assert set(reader.ids) == expected
    assert len(reader.ids) == len(expected)


def test_ids_follow_the_entries_table(reader: FeatureReader, reference: LocalStore) -> None:
    assert reader.ids == reference.ids
    assert reader.entries.column("id").to_pylist() == reference.ids


@pytest.mark.parametrize("table", TABLES)
def test_index_tables(reader: FeatureReader, reference: LocalStore, table: str) -> None:
    assert_tables_equal(getattr(reader, table), getattr(reference, table))


def test_info(reader: FeatureReader, reference: LocalStore) -> None:
    got = reader.info()
    local = reference.info()
    # the service does not reveal where its store lives; everything else is the same document
    assert local.pop("path") == str(reference.path) and ("path" in got) == isinstance(reader, LocalStore)
    got.pop("path", None)
    if not isinstance(reader, LocalStore):
        # nor the paths its store was built from: build_inputs says whether each option was given
        # and the CCD's fingerprint; the featurizer versions' counts come without each one's --pdb-dir
        inputs, served = local.pop("build_inputs"), got.pop("build_inputs")
        assert inputs["recorded"] and inputs["pdb_dir"] and inputs["ccd"]["path"]  # the sample build's
        assert served == {
            "recorded": True,
            "pdb_dir": True,
            "msa_dir": inputs["msa_dir"] is not None,
            "ccd": {"fingerprint": inputs["ccd"]["fingerprint"]},
        }
        assert "entry_source_dirs" not in got["featurizer_versions"]
        local["featurizer_versions"].pop("entry_source_dirs", None)
        assert str(reference.path) not in json.dumps(got) and inputs["pdb_dir"] not in json.dumps(got)
    assert same(got, local)
    assert got["counts"]["entries"] == len(list(SAMPLES.iterdir()))
    assert got["counts"]["atoms"] == sum(reference.entries.column("atom_count").to_pylist())


# ---------------------------------------------------------------------------------- entries
@pytest.mark.parametrize("entry_id", sorted(_stem(p.name) for p in SAMPLES.iterdir()))
def test_every_array_of_every_entry(reader: FeatureReader, reference: LocalStore, entry_id: str) -> None:
    got = reader.entry(entry_id)
    assert_entries_equal(got, reference.entry(entry_id))
    row = reference.entries.slice(reference.row_of(entry_id), 1).to_pylist()[0]
    for g, (_, count_col) in GROUP_OFFSETS.items():
        fields = getattr(got, g)
        assert set(fields) == set(ENTRY_GROUPS[g].names or ())
        assert all(a.shape[0] == row[count_col] for a in fields.values()), (g, row[count_col])
    # tokens' atom ranges tile the atom table in order, and every atom points back at its token
    starts, counts = got.tokens["atom_start"], got.tokens["atom_count"]
    assert starts[0] == 0 and int(counts.sum()) == got.n_atoms
    np.testing.assert_array_equal(starts[1:], (starts + counts)[:-1])
    np.testing.assert_array_equal(got.atoms["token_index"], np.repeat(np.arange(got.n_tokens), counts))
    assert got.atoms["coords"].shape == (got.n_atoms, 3) and got.atoms["coords"].dtype == np.float32


@pytest.mark.parametrize(
    "arrays, groups",
    [
        (["atoms/coords"], {"atoms": {"coords"}}),
        (["tokens"], {"tokens": None}),
        (["atoms/coords", "atoms/element", "tokens/restype", "bonds"], {"atoms": {"coords", "element"}, "tokens": {"restype"}, "bonds": None}),
    ],
)  # fmt: skip
def test_array_subset(
    reader: FeatureReader, reference: LocalStore, arrays: list[str], groups: dict[str, set[str] | None]
) -> None:
    entry_id = reference.ids[0]
    got = reader.entry(entry_id, arrays)
    want = reference.entry(entry_id)
    full = {g: (set(ENTRY_GROUPS[g].names or ()) if f is None else f) for g, f in groups.items()}
    assert_entries_equal(got, want, full)  # type: ignore[arg-type]


@pytest.mark.parametrize("group", GROUPS)
def test_read_group(reader: FeatureReader, reference: LocalStore, group: str) -> None:
    for entry_id in reference.ids[:3]:
        got = reader.read_group(entry_id, group)  # type: ignore[attr-defined]
        want = reference.read_group(entry_id, group)
        assert got.dtype == want.dtype == ENTRY_GROUPS[group] and got.shape == want.shape
        assert got.tobytes() == want.tobytes()


def test_no_arrays_at_all(reader: FeatureReader, reference: LocalStore) -> None:
    entry_id = reference.ids[-1]
    got = reader.entry(entry_id, [])
    assert all(getattr(got, g) == {} for g in GROUPS)
    assert same(got.meta, reference.entry_meta(entry_id)) and same(
        got.chains, reference.entry_chains(entry_id)
    )
    assert got.n_tokens == reference.entries.column("token_count")[reference.row_of(entry_id)].as_py()


def test_unknown_entry_is_not_found(reader: FeatureReader) -> None:
    with pytest.raises(NotFound, match="no-such-entry"):
        reader.entry("no-such-entry")
    with pytest.raises(KeyError):  # NotFound is a KeyError too
        reader.entry("also-missing")


def test_unknown_array_is_not_found(reader: FeatureReader, reference: LocalStore) -> None:
    with pytest.raises(NotFound, match="atoms/velocity"):
        reader.entry(reference.ids[0], ["atoms/velocity"])
    with pytest.raises(NotFound, match="residues"):
        reader.entry(reference.ids[0], ["residues"])


def test_entries_batch_in_request_order(reader: FeatureReader, reference: LocalStore) -> None:
    ids = [*reversed(reference.ids), reference.ids[0]]  # reversed, with a repeat
    got = reader.entries_batch(ids, ["atoms/coords", "tokens/restype"])
    assert [e.id for e in got] == ids
    for e in got:
        assert_entries_equal(e, reference.entry(e.id), {"atoms": {"coords"}, "tokens": {"restype"}})
    assert reader.entries_batch([]) == []


def test_entries_batch_unknown_id(reader: FeatureReader, reference: LocalStore) -> None:
    with pytest.raises(NotFound, match="missing-one"):
        reader.entries_batch([reference.ids[0], "missing-one"])


def test_entry_chains(reader: FeatureReader, reference: LocalStore) -> None:
    for entry_id in reference.ids:
        chains = reader.entry_chains(entry_id)
        assert same(chains, reference.entry_chains(entry_id))
        n_chains = reference.entries.slice(reference.row_of(entry_id), 1).column("n_chains")[0].as_py()
        assert len(chains) == n_chains
        assert [c["asym_id"] for c in chains] == list(range(n_chains))


# ---------------------------------------------------------------------------------- MSAs
def _msa_keys(reference: LocalStore) -> list[str]:
    t = reference.msas
    col = next((c for c in ("key", "msa_key", "sequence_hash") if c in t.column_names), None)
    return [str(k) for k in t.column(col).to_pylist()] if col and t.num_rows else []


def _assert_blocks_equal(got: Any, want: Any) -> None:
    for name in ("residues", "deletions", "species", "source", "profile", "deletion_mean"):
        a, b = np.asarray(getattr(got, name)), np.asarray(getattr(want, name))
        assert a.shape == b.shape, (name, a.shape, b.shape)
        np.testing.assert_array_equal(a, b.astype(a.dtype), err_msg=name)
    assert (got.key, got.depth, got.length) == (want.key, want.depth, want.length)


def test_msa_unknown_key(reader: FeatureReader) -> None:
    with pytest.raises(NotFound):
        reader.msa("0000000000deadbeef00")


def test_msa_slices(reader: FeatureReader, reference: LocalStore) -> None:
    keys = _msa_keys(reference)
    assert keys, "the sample store is built with samples/msas: the MSA stage must have written MSAs"
    for key in keys:
        full = reference.msa(key)
        depth, length = full.residues.shape
        assert (full.depth, full.length) == (depth, length)
        rows_pick = np.unique(np.array([0, depth // 2, depth - 1]))
        cols_pick = np.array(sorted({0, length // 3, length // 3 + 1, length - 1}))
        selections: list[tuple[Any, Any]] = [
            (None, None),
            (slice(0, min(3, depth)), slice(1, length)),
            (rows_pick, cols_pick),
            (rows_pick, np.zeros(0, np.int64)),
            ([0], None),
        ]
        for rows, cols in selections:
            got = reader.msa(key, rows, cols)
            _assert_blocks_equal(got, reference.msa(key, rows, cols))
            r = (
                np.arange(depth)[rows]
                if isinstance(rows, slice)
                else (np.arange(depth) if rows is None else np.asarray(rows))
            )
            c = (
                np.arange(length)[cols]
                if isinstance(cols, slice)
                else (np.arange(length) if cols is None else np.asarray(cols))
            )
            np.testing.assert_array_equal(got.residues, full.residues[np.ix_(r, c)])


# ---------------------------------------------------------------------------------- conformers
def test_component_table(reader: FeatureReader, reference: LocalStore) -> None:
    want = reference.component_table().to_arrow()
    got = reader.component_table().to_arrow()  # type: ignore[attr-defined]
    assert_tables_equal(got, want)
