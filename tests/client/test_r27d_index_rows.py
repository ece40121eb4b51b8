"""A reader keeps each entry's index rows (``entry_meta``, ``entry_chains``) as dicts once
converted, per index table (review R27d s45 #8): every sample of an entry read whole converted its
Arrow rows again. The answers must equal a plain conversion of the table's rows (the reference
here), be fresh copies each call, follow a new table (a refreshed index) and stay bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import featurecache
from featurecache.store import base
from featurecache.store.base import ENTRY_META_SKIP, FeatureReader


def _meta_reference(entries: pa.Table, entry_id: str) -> dict[str, Any]:
    row = entries.filter(pc.equal(entries.column("id"), entry_id)).to_pylist()
    assert len(row) == 1
    return {k: v for k, v in row[0].items() if k not in ENTRY_META_SKIP}


def _chains_reference(chains: pa.Table, entry_id: str) -> list[dict[str, Any]]:
    return chains.filter(pc.equal(chains.column("entry_id"), entry_id)).to_pylist()


def test_rows_equal_the_tables_rows_every_call(client_store: Path) -> None:
    with featurecache.open_store(client_store) as reader:
        assert reader.ids
        for _ in range(3):  # converted, then kept
            for eid in reader.ids:
                assert reader.entry_meta(eid) == _meta_reference(reader.entries, eid)
                assert reader.entry_chains(eid) == _chains_reference(reader.chains, eid)
                assert reader.entry(eid, []).meta == _meta_reference(reader.entries, eid)
        assert reader.entry_chains("no-such-entry") == []
        with pytest.raises(KeyError):
            reader.entry_meta("no-such-entry")


def test_callers_get_copies(client_store: Path) -> None:
    with featurecache.open_store(client_store) as reader:
        eid = reader.ids[0]
        meta, chains = reader.entry_meta(eid), reader.entry_chains(eid)
        meta["resolution"] = -1.0
        chains[0]["msa_key"] = "changed"
        chains.append({})
        assert reader.entry_meta(eid) == _meta_reference(reader.entries, eid)
        assert reader.entry_chains(eid) == _chains_reference(reader.chains, eid)


class _Tables(FeatureReader):
    """A reader of in-memory tables that can be swapped (what a refreshed index looks like)."""

    def __init__(self, entries: pa.Table, chains: pa.Table) -> None:
        self.tables = {"entries": entries, "chains": chains}

    @property
    def ids(self) -> list[str]:
        return [str(x) for x in self.tables["entries"].column("id").to_pylist()]

    @property
    def entries(self) -> pa.Table:
        return self.tables["entries"]

    @property
    def chains(self) -> pa.Table:
        return self.tables["chains"]

    @property
    def interfaces(self) -> pa.Table:
        return pa.table({})

    @property
    def failures(self) -> pa.Table:
        return pa.table({})

    def info(self) -> dict[str, Any]:
        return {}

    def entry(self, entry_id: str, arrays: Any = None) -> Any:
        raise NotImplementedError


def test_a_new_table_is_read_anew_and_the_rows_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = pa.table({"id": ["a", "b", "c"], "resolution": [1.0, 2.0, 3.0], "part": ["p", "p", "p"]})
    chains = pa.table({"entry_id": ["a", "a", "b", "c"], "asym_id": [0, 1, 0, 0]})
    reader = _Tables(entries, chains)
    assert reader.entry_meta("a") == {"id": "a", "resolution": 1.0}
    assert reader.entry_chains("a") == [{"entry_id": "a", "asym_id": 0}, {"entry_id": "a", "asym_id": 1}]
    reader.tables = {
        "entries": pa.table({"id": ["a"], "resolution": [9.0], "part": ["q"]}),
        "chains": pa.table({"entry_id": ["a"], "asym_id": [5]}),
    }
    assert reader.entry_meta("a") == {"id": "a", "resolution": 9.0}
    assert reader.entry_chains("a") == [{"entry_id": "a", "asym_id": 5}]
    monkeypatch.setattr(base, "ROWS_KEPT", 2)
    reader.tables = {"entries": entries, "chains": chains}
    for eid in ("a", "b", "c", "a", "b", "c"):
        assert reader.entry_meta(eid) == _meta_reference(entries, eid)
        assert reader.entry_chains(eid) == _chains_reference(chains, eid)
        assert all(len(rows) <= 2 for _, rows in reader._rows_kept.values())  # type: ignore[attr-defined]
