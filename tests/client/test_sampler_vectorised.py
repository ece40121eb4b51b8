"""``Sampler(weighting="af3")``'s units and weights (vectorised, review F3) against a plain statement of
AF3's weighted sampling (supplement §2.5.1), written here row by row from the index rows:

    chain:     w = β_chain / N_cluster · α_type
    interface: w = β_interface / N_interface_cluster · (α_type(a) + α_type(b))

A chain's cluster is its cluster table row (by entry and asym id, or entry and label id) else its
sequence hash, the two kinds never equal; an interface's cluster is the unordered pair of its
chains' clusters. Units are compared exactly and weights bitwise (``np.array_equal``): the statement
below does the same float64 operations in the same order per unit (β / N, times α or α_a + α_b,
sums of small integers and so exact), so no tolerance is needed.

Real index tables: the store built from the committed samples (``sample_store``), as is, restricted
to some entries, with cluster tables, and repeated to a larger dataset; synthetic tables for each
branch (unresolved chains, dropped interfaces, absent entries, cluster tables, empty tables).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from featurecache import open_store
from featurecache.client.sampler import (
    AF3_ALPHA_LIGAND,
    AF3_ALPHA_NUCLEIC,
    AF3_ALPHA_PROTEIN,
    AF3_BETA_CHAIN,
    AF3_BETA_INTERFACE,
    Sampler,
    _af3_units,
)
from featurecache.errors import InvalidRequest

ALPHA = {0: AF3_ALPHA_PROTEIN, 1: AF3_ALPHA_NUCLEIC, 2: AF3_ALPHA_NUCLEIC, 3: AF3_ALPHA_LIGAND}

Units = tuple[np.ndarray, np.ndarray, np.ndarray]


# ------------------------------------------------------------------------------ the statement
def af3_reference(
    entry_ids: list[str], chains: pa.Table, interfaces: pa.Table, cluster_table: pa.Table | None = None
) -> Units:
    """(entry row, (chain_a, chain_b)) of every unit and its AF3 weight, one row at a time: chains
    with a resolved token in the order of ``chains``, then interfaces of two such chains in the
    order of ``interfaces``. Entry ids are distinct here."""
    row_of = {e: i for i, e in enumerate(entry_ids)}
    table: dict[tuple[str, Any], tuple[str, Any]] = {}
    by_label = cluster_table is not None and "asym_id" not in cluster_table.column_names
    for r in cluster_table.to_pylist() if cluster_table is not None else []:
        table[(r["entry_id"], r["label_id"] if by_label else r["asym_id"])] = ("table", r["cluster_id"])

    kept: dict[tuple[str, int], dict[str, Any]] = {}
    cluster: dict[tuple[str, int], tuple[str, Any]] = {}
    for r in chains.to_pylist():
        if r["entry_id"] not in row_of or (r.get("n_resolved", 1) or 0) <= 0:
            continue
        key = (r["entry_id"], r["asym_id"])
        kept[key] = r
        by = (r["entry_id"], r["label_id"] if by_label else r["asym_id"])
        cluster[key] = table.get(by, ("sequence", r["sequence_hash"]))
    chain_n = Counter(cluster.values())

    entry: list[int] = []
    units: list[tuple[int, int]] = []
    weights: list[float] = []
    for key, r in kept.items():
        entry.append(row_of[key[0]])
        units.append((key[1], -1))
        weights.append(AF3_BETA_CHAIN / chain_n[cluster[key]] * ALPHA[r["mol_type"]])

    pairs = []
    for r in interfaces.to_pylist():
        a, b = (r["entry_id"], r["chain_i"]), (r["entry_id"], r["chain_j"])
        if a in kept and b in kept:
            pairs.append((a, b, frozenset((cluster[a], cluster[b]))))
    pair_n = Counter(p for _, _, p in pairs)
    for a, b, p in pairs:
        entry.append(row_of[a[0]])
        units.append((a[1], b[1]))
        alphas = ALPHA[kept[a]["mol_type"]] + ALPHA[kept[b]["mol_type"]]
        weights.append(AF3_BETA_INTERFACE / pair_n[p] * alphas)
    return (
        np.asarray(entry, dtype=np.int64),
        np.asarray(units, dtype=np.int64).reshape(-1, 2),
        np.asarray(weights, dtype=np.float64),
    )


def _matches_no_chain(entry_ids: list[str], chains: pa.Table, cluster_table: pa.Table) -> bool:
    """The table names none of the sampled chains with a resolved token (and there are some)."""
    by = "label_id" if "asym_id" not in cluster_table.column_names else "asym_id"
    listed = {(r["entry_id"], r[by]) for r in cluster_table.to_pylist()}
    sampled = [(r["entry_id"], r[by]) for r in chains.to_pylist()
               if r["entry_id"] in entry_ids and (r.get("n_resolved", 1) or 0) > 0]  # fmt: skip
    return bool(sampled) and not listed.intersection(sampled)


def assert_same(
    entry_ids: list[str], chains: pa.Table, interfaces: pa.Table, cluster_table: pa.Table | None = None
) -> Units:
    if cluster_table is not None and _matches_no_chain(entry_ids, chains, cluster_table):
        # refused since review R26c s44 #5 (it was ignored: every chain clustered by sequence)
        with pytest.raises(InvalidRequest, match="cluster_table matches none of the"):
            _af3_units(entry_ids, chains, interfaces, cluster_table)
        return af3_reference(entry_ids, chains, interfaces, None)
    got = _af3_units(entry_ids, chains, interfaces, cluster_table)
    want = af3_reference(entry_ids, chains, interfaces, cluster_table)
    for name, g, w in zip(("entry rows", "chains", "weights"), got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.dtype, w.shape)
        assert np.array_equal(g, w), (name, g, w)
    return got


# ---------------------------------------------------------------------------- real index tables
@pytest.fixture(scope="module")
def sample_tables(sample_store: Path) -> Iterator[tuple[pa.Table, pa.Table, pa.Table]]:
    reader = open_store(sample_store)
    yield reader.entries, reader.chains, reader.interfaces
    reader.close()


def _ids(entries: pa.Table) -> list[str]:
    return [str(x) for x in entries.column("id").to_pylist()]


def test_real_tables(sample_tables: tuple[pa.Table, pa.Table, pa.Table]) -> None:
    entries, chains, interfaces = sample_tables
    entry, units, weights = assert_same(_ids(entries), chains, interfaces)
    # the sample has interfaces and a cluster of two protein chains (721p's two H-Ras chains)
    assert (units[:, 1] >= 0).any() and (weights == AF3_BETA_CHAIN / 2 * AF3_ALPHA_PROTEIN).any()
    s = Sampler(entries, chains, interfaces, weighting="af3")
    assert np.array_equal(s.unit_probabilities, weights / weights.sum())
    ids = _ids(entries)
    want = [(ids[e], tuple(int(c) for c in u if c >= 0)) for e, u in zip(entry, units, strict=True)]
    assert [s.unit(u) for u in range(s.n_units)] == want


def test_real_tables_some_entries(sample_tables: tuple[pa.Table, pa.Table, pa.Table]) -> None:
    """Chains and interfaces of entries not sampled are dropped; entry rows are rows of the subset."""
    entries, chains, interfaces = sample_tables
    ids = _ids(entries)[::2]
    assert_same(ids, chains, interfaces)
    assert_same(ids[::-1], chains, interfaces)


def test_real_tables_repeated(sample_tables: tuple[pa.Table, pa.Table, pa.Table]) -> None:
    """The sample's tables copied 40 times under other entry ids (as benchmarks/sampler_scale.py
    does): every cluster then holds 40 or more units."""
    entries, chains, interfaces = sample_tables
    ids, ch, itf = _repeat(_ids(entries), chains, interfaces, 40)
    _, _, weights = assert_same(ids, ch, itf)
    assert weights.max() <= AF3_BETA_INTERFACE / 40 * (2 * AF3_ALPHA_PROTEIN)


def test_real_tables_cluster_table_by_label(sample_tables: tuple[pa.Table, pa.Table, pa.Table]) -> None:
    """Protein chains of every entry in one cluster (by label id); the other chains by sequence."""
    entries, chains, interfaces = sample_tables
    protein = chains.filter(pc.equal(chains.column("mol_type"), 0))
    table = pa.table({"entry_id": protein.column("entry_id"), "label_id": protein.column("label_id"),
                      "cluster_id": ["all-proteins"] * protein.num_rows})  # fmt: skip
    assert protein.num_rows > 1
    assert_same(_ids(entries), chains, interfaces, table)


def test_real_tables_cluster_table_by_asym(sample_tables: tuple[pa.Table, pa.Table, pa.Table]) -> None:
    """Every other chain clustered by the table under an id that is another chain's sequence hash:
    a table cluster and a sequence cluster that read the same are still two clusters."""
    entries, chains, interfaces = sample_tables
    part = chains.take(np.arange(0, chains.num_rows, 2))
    hashes = chains.column("sequence_hash").to_pylist()
    table = pa.table({"entry_id": part.column("entry_id"), "asym_id": part.column("asym_id"),
                      "cluster_id": [hashes[-1]] * part.num_rows})  # fmt: skip
    assert_same(_ids(entries), chains, interfaces, table)


# ------------------------------------------------------------------------------ synthetic tables
def _chains(rows: list[tuple[str, int, str, int, str, int | None]]) -> pa.Table:
    """(entry_id, asym_id, label_id, mol_type, sequence_hash, n_resolved) rows, the store's types."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * 6
    return pa.table(
        {
            "entry_id": pa.array(cols[0], pa.string()),
            "asym_id": pa.array(cols[1], pa.int32()),
            "label_id": pa.array(cols[2], pa.string()),
            "mol_type": pa.array(cols[3], pa.int8()),
            "sequence_hash": pa.array(cols[4], pa.string()),
            "n_resolved": pa.array(cols[5], pa.int32()),
        }
    )


def _interfaces(rows: list[tuple[str, int, int]]) -> pa.Table:
    cols = list(zip(*rows, strict=True)) if rows else [()] * 3
    return pa.table({"entry_id": pa.array(cols[0], pa.string()), "chain_i": pa.array(cols[1], pa.int32()),
                     "chain_j": pa.array(cols[2], pa.int32())})  # fmt: skip


def _repeat(
    ids: list[str], chains: pa.Table, interfaces: pa.Table, k: int
) -> tuple[list[str], pa.Table, pa.Table]:
    """The tables ``k`` times, copy ``c``'s entry ids suffixed ``~c``."""

    def copies(t: pa.Table, c: int) -> pa.Table:
        renamed = pc.binary_join_element_wise(t.column("entry_id"), f"~{c}", "")
        return t.set_column(t.column_names.index("entry_id"), "entry_id", renamed)

    out_ids = [f"{e}~{c}" for c in range(k) for e in ids]
    return (
        out_ids,
        pa.concat_tables([copies(chains, c) for c in range(k)]),
        pa.concat_tables([copies(interfaces, c) for c in range(k)]),
    )


#: two entries: e1 a homodimer (A, B same sequence) with a ligand, e2 a protein-DNA complex whose
#: protein has e1's sequence; a chain never resolved, one with a null count, an entry not sampled
CHAINS = _chains([
    ("e1", 0, "A", 0, "hP", 10), ("e1", 1, "B", 0, "hP", 12), ("e1", 2, "C", 3, "hL", 1),
    ("e1", 3, "D", 3, "hL", 0),  # no resolved token: not a unit, its interfaces dropped
    ("e2", 0, "A", 0, "hP", 30), ("e2", 1, "B", 2, "hD", 20), ("e2", 2, "C", 1, "hR", None),  # null: 0
    ("e3", 0, "A", 0, "hP", 5),  # e3 is not sampled
])  # fmt: skip
INTERFACES = _interfaces([
    ("e1", 0, 1), ("e1", 0, 2), ("e1", 1, 2), ("e1", 2, 3), ("e2", 0, 1), ("e2", 1, 0), ("e2", 0, 2),
    ("e3", 0, 0), ("e9", 0, 1),
])  # fmt: skip


def test_unresolved_chains_and_their_interfaces_are_dropped() -> None:
    entry, units, weights = assert_same(["e1", "e2"], CHAINS, INTERFACES)
    chains = [(int(e), int(u[0])) for e, u in zip(entry, units, strict=True) if u[1] < 0]
    assert chains == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    pairs = [(int(e), tuple(u)) for e, u in zip(entry, units, strict=True) if u[1] >= 0]
    assert pairs == [(0, (0, 1)), (0, (0, 2)), (0, (1, 2)), (1, (0, 1)), (1, (1, 0))]
    # hP: 3 chains; e1 (A, C) and (B, C) are one interface cluster {hP, hL}, as are e2's two rows
    assert weights[0] == 0.5 / 3 * 3.0 and weights[6] == 1.0 / 2 * 4.0 and weights[8] == 1.0 / 2 * 6.0


def test_without_n_resolved_every_chain_counts() -> None:
    assert_same(["e1", "e2", "e3"], CHAINS.drop_columns(["n_resolved"]), INTERFACES)


def test_entry_rows_follow_entry_ids() -> None:
    entry, _, _ = assert_same(["e3", "e2"], CHAINS, INTERFACES)
    assert set(entry.tolist()) == {0, 1}
    assert_same(["e9", "e2", "x"], CHAINS, INTERFACES)


def test_cluster_table_by_asym_id(caplog: pytest.LogCaptureFixture) -> None:
    table = pa.table({"entry_id": ["e1", "e2", "e2", "e7"], "asym_id": [2, 1, 2, 0],
                      "cluster_id": ["nucleic-or-ligand"] * 4})  # fmt: skip
    with caplog.at_level(logging.INFO, logger="featurecache.client.sampler"):
        assert_same(["e1", "e2"], CHAINS, INTERFACES, table)
    assert "cluster table covers 2 of 5 chains" in caplog.text


def test_cluster_table_by_label_id() -> None:
    table = pa.table(
        {"entry_id": ["e1", "e1", "e2"], "label_id": ["A", "C", "B"], "cluster_id": ["k1", "k2", "k1"]}
    )
    assert_same(["e1", "e2"], CHAINS, INTERFACES, table)


def test_cluster_table_with_integer_ids() -> None:
    table = pa.table(
        {"entry_id": ["e1", "e2"], "asym_id": pa.array([0, 0], pa.int64()), "cluster_id": [7, 7]}
    )
    assert_same(["e1", "e2"], CHAINS, INTERFACES, table)


def test_table_cluster_and_sequence_hash_that_read_the_same_are_two_clusters() -> None:
    """e1's A in table cluster "hP": B (sequence hash "hP") is not in its cluster."""
    table = pa.table({"entry_id": ["e1"], "asym_id": [0], "cluster_id": ["hP"]})
    _, _, weights = assert_same(["e1", "e2"], CHAINS, INTERFACES, table)
    assert weights[0] == 0.5 / 1 * 3.0 and weights[1] == 0.5 / 2 * 3.0


def test_cluster_ids_holding_a_bar_are_still_two_pairs() -> None:
    """An interface's cluster is the unordered pair of its chains' clusters. Up to f805882 the pair
    was keyed by "|".join of the clusters' names, so ("table:p|table:q", "table:r") and
    ("table:p", "table:q|table:r") were one interface cluster: e1's A-B and e2's A-B here."""
    table = pa.table({
        "entry_id": ["e1", "e1", "e2", "e2"], "asym_id": [0, 1, 0, 1],
        "cluster_id": ["p|table:q", "r", "p", "q|table:r"],
    })  # fmt: skip
    entry, units, weights = assert_same(["e1", "e2"], CHAINS, INTERFACES, table)
    got = {(int(e), int(u[0]), int(u[1])): float(w) for e, u, w in zip(entry, units, weights, strict=True)}
    protein_pair = ALPHA[0] + ALPHA[0]
    assert got[(0, 0, 1)] == AF3_BETA_INTERFACE / 1 * protein_pair  # e1's A-B alone in its cluster
    assert got[(1, 0, 1)] == got[(1, 1, 0)] == AF3_BETA_INTERFACE / 2 * protein_pair  # e2's two


def test_an_entry_or_cluster_row_listed_twice_is_its_last_row() -> None:
    """An id twice in ``entry_ids``: its units carry its last row. A chain twice in the cluster
    table: its last row's cluster (the statement's dict keeps the last too)."""
    entry, units, weights = _af3_units(["e2", "e1", "e2"], CHAINS, INTERFACES, None)
    want_entry, want_units, want_weights = af3_reference(["e2", "e1"], CHAINS, INTERFACES)
    assert np.array_equal(entry, np.where(want_entry == 0, 2, want_entry)) and 0 not in entry
    assert np.array_equal(units, want_units) and np.array_equal(weights, want_weights)
    table = pa.table({"entry_id": ["e1", "e1", "e2"], "asym_id": [0, 0, 0], "cluster_id": ["k1", "k2", "k1"]})
    _, _, weights = assert_same(["e1", "e2"], CHAINS, INTERFACES, table)
    assert weights[0] == 0.5 / 1 * 3.0  # k2 alone, not k1 with e2's A


def test_cluster_table_without_its_columns_is_refused() -> None:
    for cols in ({"entry_id": ["e1"], "cluster_id": ["k"]}, {"entry_id": ["e1"], "asym_id": [0]},
                 {"asym_id": [0], "cluster_id": ["k"]}):  # fmt: skip
        with pytest.raises(InvalidRequest, match="cluster_table needs columns"):
            _af3_units(["e1"], CHAINS, INTERFACES, pa.table(cols))


def test_empty_tables() -> None:
    entry, units, weights = assert_same(["e1"], _chains([]), _interfaces([]))
    assert entry.size == weights.size == 0 and units.shape == (0, 2)
    assert_same(
        ["e1"],
        _chains([]),
        _interfaces([]),
        pa.table({"entry_id": ["e1"], "asym_id": [0], "cluster_id": ["k"]}),
    )
    assert_same(["e1", "e2"], CHAINS, _interfaces([]))  # chains, no interface
    assert_same(["e1"], CHAINS.filter(pc.equal(CHAINS.column("asym_id"), 3)), INTERFACES)  # none resolved
    entries = pa.table({"id": ["e1"]})
    with pytest.raises(InvalidRequest, match="no chain or interface"):
        Sampler(entries, _chains([]), _interfaces([]), weighting="af3")


def _random_case(seed: int) -> tuple[list[str], pa.Table, pa.Table, pa.Table | None]:
    """Up to 6 entries of up to 6 chains (each asym once), a few sequences, random interfaces
    (some to chains that do not exist), and maybe a partial cluster table by asym or label id."""
    rng = random.Random(seed)
    entries = [f"e{i}" for i in range(rng.randint(1, 6))]
    rows = [
        (
            e,
            a,
            "ABCDEF"[a],
            rng.randint(0, 3),
            rng.choice(["s1", "s2", "s3", "t1"]),
            rng.choice([0, 1, 9, None]),
        )
        for e in [*entries, "gone"]
        for a in rng.sample(range(6), rng.randint(0, 6))
    ]
    rng.shuffle(rows)
    itf = [
        (rng.choice([*entries, "gone"]), rng.randint(0, 6), rng.randint(0, 6))
        for _ in range(rng.randint(0, 30))
    ]
    table = None
    if rng.random() < 0.6:
        picked = rng.sample(rows, len(rows) // 2)
        col = "asym_id" if rng.random() < 0.5 else "label_id"
        table = pa.table({"entry_id": [r[0] for r in picked], col: [r[1] if col == "asym_id" else r[2] for r in picked],
                          "cluster_id": [rng.choice(["t1", "t2", "s1"]) for _ in picked]})  # fmt: skip
    return rng.sample(entries, rng.randint(1, len(entries))), _chains(rows), _interfaces(itf), table


@pytest.mark.parametrize("seed", range(200))
def test_random_tables(seed: int) -> None:
    assert_same(*_random_case(seed))
