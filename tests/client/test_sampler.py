"""Sampler over a real store's index: filters, epochs, AF3 weights recomputed by hand."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from featurecache.client.sampler import Sampler, SamplerFilter


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def test_uniform_epoch_is_a_permutation_and_seeded(client_reader: Any) -> None:
    s = Sampler(client_reader.entries, seed=3)
    n = len(client_reader.ids)
    assert len(s) == n
    e0 = [s.key(p).entry_id for p in range(n)]
    e1 = [s.key(p).entry_id for p in range(n, 2 * n)]
    assert sorted(e0) == sorted(client_reader.ids) == sorted(e1)
    assert e0 != e1  # another epoch, another order
    again = Sampler(client_reader.entries, seed=3)
    assert [again.key(p).entry_id for p in range(n)] == e0
    k = s.key(n + 2)
    assert (k.epoch, k.index, k.chains) == (1, 2, ())


def test_filters(client_reader: Any) -> None:
    rows = _rows(client_reader.entries)
    f = SamplerFilter(max_resolution=2.0, date_cutoff="2010-01-01", max_tokens=300, keep_undated=False)
    s = Sampler(client_reader.entries, filters=f)
    expected = {
        r["id"]
        for r in rows
        if (math.isnan(r["resolution"]) or r["resolution"] <= 2.0)
        and r["release_date"]
        and r["release_date"] <= "2010-01-01"
        and r["token_count"] <= 300
    }
    assert set(s.entry_ids) == expected and expected  # 102m (1998, 1.84 Å) at least
    assert "7pzb" not in expected and "1A8O" not in expected  # too recent / undated
    with pytest.raises(ValueError, match="no entry"):
        Sampler(client_reader.entries, filters=SamplerFilter(max_tokens=1))


def _af3_expected(
    reader: Any, clusters: dict[tuple[str, int], str]
) -> dict[tuple[str, tuple[int, ...]], float]:
    """Unnormalized AF3 weights of every chain and interface, straight from the formula."""
    alpha = {0: 3.0, 1: 3.0, 2: 3.0, 3: 1.0}
    chains = {(r["entry_id"], r["asym_id"]): r for r in _rows(reader.chains) if r["n_resolved"] > 0}
    units: dict[tuple[str, tuple[int, ...]], float] = {}
    csize = Counter(clusters[k] for k in chains)
    for k, r in chains.items():
        units[(k[0], (k[1],))] = 0.5 / csize[clusters[k]] * alpha[r["mol_type"]]
    itf = [
        r
        for r in _rows(reader.interfaces)
        if (r["entry_id"], r["chain_i"]) in chains and (r["entry_id"], r["chain_j"]) in chains
    ]
    pair = {
        (r["entry_id"], r["chain_i"], r["chain_j"]): tuple(
            sorted((clusters[(r["entry_id"], r["chain_i"])], clusters[(r["entry_id"], r["chain_j"])]))
        )
        for r in itf
    }
    psize = Counter(pair.values())
    for (e, a, b), p in pair.items():
        w = alpha[chains[(e, a)]["mol_type"]] + alpha[chains[(e, b)]["mol_type"]]
        units[(e, (a, b))] = 1.0 / psize[p] * w
    return units


def _sampler_weights(s: Sampler) -> dict[tuple[str, tuple[int, ...]], float]:
    p = s.unit_probabilities
    return {s.unit(u): float(p[u]) for u in range(s.n_units)}


def test_af3_weights_match_the_formula(client_reader: Any) -> None:
    s = Sampler(client_reader.entries, client_reader.chains, client_reader.interfaces, weighting="af3")
    by_seq = {(r["entry_id"], r["asym_id"]): r["sequence_hash"] for r in _rows(client_reader.chains)}
    expected = _af3_expected(client_reader, by_seq)
    total = sum(expected.values())
    got = _sampler_weights(s)
    assert got.keys() == expected.keys()
    for k, w in expected.items():
        assert got[k] == pytest.approx(w / total, rel=1e-9), k
    # draws follow the probabilities (within 5 binomial standard deviations)
    n = len(s) * 300
    draws = Counter((k.entry_id, k.chains) for k in (s.key(p) for p in range(n)))
    for k, w in expected.items():
        p = w / total
        assert abs(draws[k] / n - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-9, (k, draws[k] / n, p)


def test_cluster_table_overrides_sequence_clusters(client_reader: Any) -> None:
    chains = _rows(client_reader.chains)
    # one cluster for every protein chain, by label id
    table = pa.table(
        {
            "entry_id": [r["entry_id"] for r in chains if r["mol_type"] == 0],
            "label_id": [r["label_id"] for r in chains if r["mol_type"] == 0],
            "cluster_id": ["all-proteins"] * sum(r["mol_type"] == 0 for r in chains),
        }
    )
    s = Sampler(client_reader.entries, client_reader.chains, client_reader.interfaces, weighting="af3",
                cluster_table=table)  # fmt: skip
    clusters = {
        (r["entry_id"], r["asym_id"]): ("all-proteins" if r["mol_type"] == 0 else r["sequence_hash"])
        for r in chains
    }
    expected = _af3_expected(client_reader, clusters)
    total = sum(expected.values())
    got = _sampler_weights(s)
    for k, w in expected.items():
        assert got[k] == pytest.approx(w / total, rel=1e-9), k


def test_af3_epoch_length_and_reference_chains(client_reader: Any) -> None:
    s = Sampler(client_reader.entries, client_reader.chains, client_reader.interfaces, weighting="af3",
                samples_per_epoch=50, seed=1)  # fmt: skip
    keys = [s.key(p) for p in range(50)]
    assert len(s) == 50 and all(1 <= len(k.chains) <= 2 for k in keys)
    itf = {(r["entry_id"], (r["chain_i"], r["chain_j"])) for r in _rows(client_reader.interfaces)}
    assert all((k.entry_id, k.chains) in itf for k in keys if len(k.chains) == 2)
    assert np.isclose(s.unit_probabilities.sum(), 1.0)
