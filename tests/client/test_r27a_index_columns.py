"""The Arrow index's entry and chain columns against the entries' own arrays (review R27a s45, W1 W2),
and the chains' entity / copy numbers of two homomers worked out by hand.

``entries.n_resolved_tokens`` is the number of resolved tokens, ``entries.<group>_count`` the length
of each array read back; a chain row's ``entity_id``, ``sym_id``, ``asym_id`` and ``n_resolved`` are
those of its tokens (``token_start``, ``token_count``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import gemmi
import numpy as np
import pytest

import featurecache
from tests.conftest import STRUCTURES, build_store, session_store


def _rows(table: Any, entry_id: str) -> list[dict[str, Any]]:
    return [r for r in table.to_pylist() if r["entry_id"] == entry_id]


def _check_index(reader: Any) -> int:
    entries = {r["id"]: r for r in reader.entries.to_pylist()}
    checked = 0
    for eid in reader.ids:
        e = reader.entry(eid)
        row = entries[eid]
        tok = e.tokens
        assert row["n_resolved_tokens"] == int(np.asarray(tok["is_resolved"]).sum()), eid
        for group, arrays in (
            ("atom", e.atoms),
            ("token", e.tokens),
            ("bond", e.bonds),
            ("interface", e.interfaces),
        ):
            assert row[f"{group}_count"] == len(next(iter(arrays.values()))), (eid, group)
        chains = sorted(_rows(reader.chains, eid), key=lambda r: r["token_start"])
        assert row["n_chains"] == len(chains) == len(set(np.asarray(tok["asym_id"]).tolist())), eid
        covered = 0
        for c in chains:
            sl = slice(c["token_start"], c["token_start"] + c["token_count"])
            assert c["token_start"] == covered and c["token_count"] > 0, (eid, c["asym_id"])
            covered += c["token_count"]
            for col in ("asym_id", "entity_id", "sym_id"):
                assert set(np.asarray(tok[col][sl]).tolist()) == {c[col]}, (eid, c["asym_id"], col)
            assert c["n_resolved"] == int(np.asarray(tok["is_resolved"][sl]).sum()), (eid, c["asym_id"])
        assert covered == len(tok["asym_id"]), eid
        checked += 1
    return checked


def test_index_columns_equal_the_arrays_of_the_client_store(client_reader: Any) -> None:
    """7pzb, 3u8v, 2q2k … have unresolved tokens, 7pzb, 721p, 3u8v copies of a chain."""
    assert _check_index(client_reader) == len(client_reader.ids) >= 8
    entries = client_reader.entries.to_pylist()
    assert any(r["n_resolved_tokens"] < r["token_count"] for r in entries)
    assert max(client_reader.chains.column("sym_id").to_pylist()) >= 1


def test_721p_dimer_chains_by_hand(client_reader: Any) -> None:
    """SOURCES.tsv: 721p-assembly1 is the H-Ras p21 assembly with GNP + MG, its chains A and B the
    same protein (their MSAs byte-identical at source). So by AF3's rule (one entity per sequence,
    copies numbered in chain order): the protein A, B is one entity, copies 0, 1; each chain's MG
    and GNP (chains of their own) likewise."""
    chains = sorted(_rows(client_reader.chains, "721p-assembly1"), key=lambda r: r["asym_id"])
    by_label = {c["label_id"]: (c["entity_id"], c["sym_id"]) for c in chains}
    assert by_label["A"][1] == 0 and by_label["B"] == (by_label["A"][0], 1)
    assert by_label["A_MG167"][1] == 0 and by_label["B_MG167"] == (by_label["A_MG167"][0], 1)
    assert by_label["A_GNP168"][1] == 0 and by_label["B_GNP168"] == (by_label["A_GNP168"][0], 1)
    assert len({by_label[k][0] for k in ("A", "A_MG167", "A_GNP168")}) == 3


@pytest.fixture(scope="module")
def store_7a4d(tmp_path_factory: pytest.TempPathFactory) -> Path:
    def build(out: Path) -> None:
        inputs = tmp_path_factory.mktemp("r27a_7a4d_in")
        shutil.copy(STRUCTURES / "7a4d-assembly1.cif", inputs / "7a4d-assembly1.cif")
        summary = build_store(out, inputs, workers=1)
        assert summary.n_built == 1, summary.failures

    return session_store(tmp_path_factory, "r27a_7a4d", build)


def test_7a4d_chains_by_hand(store_7a4d: Path) -> None:
    """SOURCES.tsv: 7a4d-assembly1 has 6 protein chains (a coiled-coil and 2 nanobodies, 2 copies
    each by the file's _entity table). But the file (a rewritten assembly) gives no entity sequence
    (no _entity_poly_seq; its _pdbx_poly_seq_scheme lists the resolved residues only), so each
    chain's sequence is its residues, and those differ between the copies (A 118, B 117, C 113,
    D 112 residues; E and F differ at their caps), counted with gemmi below: by the tokenizer's
    rule (entity by sequence, tokenize/af3.py docstring; mmCIF entities not followed) 6 entities,
    one copy each."""
    st = gemmi.read_structure(str(STRUCTURES / "7a4d-assembly1.cif"))
    seqs = {ch.name: tuple(r.name for r in ch if not r.is_water()) for ch in st[0]}
    assert sorted(seqs) == list("ABCDEF") and len(set(seqs.values())) == 6
    assert [len(seqs[c]) for c in "ABCD"] == [118, 117, 113, 112]
    with featurecache.open_store(store_7a4d) as reader:
        chains = sorted(_rows(reader.chains, "7a4d-assembly1"), key=lambda r: r["asym_id"])
        assert [c["auth_id"] for c in chains] == list("ABCDEF")
        assert [c["entity_id"] for c in chains] == [0, 1, 2, 3, 4, 5]
        assert [c["sym_id"] for c in chains] == [0, 0, 0, 0, 0, 0]
        assert _check_index(reader) == 1
