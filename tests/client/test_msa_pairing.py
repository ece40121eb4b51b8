"""MSA pairing by species across chains (AF3 supplement §2.3): the pairing of real MSAs against a
reference written here, the row plan, and samples of a real entry whose two protein chains carry
two different real MSAs."""

from __future__ import annotations

import gzip
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.client.assemble import assemble_sample, msa_row_plan, species_pairs
from featurecache.const import MolType
from tests.conftest import MSAS


# ------------------------------------------------------------------ species from headers, here
def _taxon(header: str) -> int:
    """The NCBI taxon id a header names (``OX=``, or a UniRef ``_<taxid>/`` id); 0 when none."""
    m = re.search(r"\bOX=(\d+)", header) or re.match(r"UniRef100_[A-Z0-9]+_(\d+)/", header)
    return int(m.group(1)) if m else 0


def _a3m_species(path: Path) -> np.ndarray:
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as fh:
        headers = [line[1:].strip() for line in fh if line.startswith(">")]
    return np.asarray([0] + [_taxon(h) for h in headers[1:]])  # row 0: the query


def _sto_species(path: Path) -> np.ndarray:
    headers = [line for line in path.read_text().splitlines() if line.startswith("#=GS") and " DE " in line]
    return np.asarray([0] + [_taxon(h) for h in headers])  # a query row first, as in a store


def _reference_pairs(species: list[np.ndarray], cap: int = 600) -> list[tuple[int, ...]]:
    """Every paired row as a tuple of rows (-1: gap), in order, by dictionaries and sorted(), as
    AF3's ``msa_pairing.create_paired_features`` pairs: for a species in ≥ 2 MSAs, the i-th row
    of it (stored order) in each MSA that has it, i below min(cap, the fewest rows of it in those
    MSAs); rows shared by more MSAs first, then by the product of the row indices (a gap counts
    |-1| = 1), ties by species id, then i."""
    rows_of: list[dict[int, list[int]]] = []
    for sp in species:
        d: dict[int, list[int]] = {}
        for row, s in enumerate(sp.tolist()):
            if row and s:
                d.setdefault(s, []).append(row)
        rows_of.append(d)
    found = []
    for s in set().union(*rows_of):
        having = [k for k, d in enumerate(rows_of) if s in d]
        if len(having) < 2:
            continue
        for i in range(min(cap, *(len(rows_of[k][s]) for k in having))):
            found.append((s, i, tuple(rows_of[k][s][i] if k in having else -1 for k in range(len(species)))))

    def rank(item: tuple[int, int, tuple[int, ...]]) -> tuple[int, int, int, int]:
        s, i, rows = item
        return (-sum(r >= 0 for r in rows), math.prod(abs(r) for r in rows), s, i)

    return [rows for _, _, rows in sorted(found, key=rank)]


@pytest.fixture(scope="module")
def real_species() -> list[np.ndarray]:
    return [
        _a3m_species(MSAS / "Protenix/mmcif_msa/3/pairing.a3m"),  # myoglobin (102m), UniRef100 ids
        _sto_species(MSAS / "openfold/4zey_A/uniprot_hits.sto"),  # NRBF2 (4zey), UniProt OX=
        _sto_species(MSAS / "openfold/2crb_A/uniprot_hits.sto"),
    ]


def test_species_pairs_of_real_msas_match_the_reference(real_species: list[np.ndarray]) -> None:
    for msas in (real_species[:2], real_species):
        got = species_pairs(msas)
        want = _reference_pairs(msas)
        assert len(want) > 50  # the real MSAs do share species
        assert [tuple(r) for r in got.tolist()] == want  # the same pairs, in AF3's order
        # every paired row is one species; a row is used at most once per MSA
        for k in range(len(msas)):
            used = got[:, k][got[:, k] >= 0]
            assert used.size == np.unique(used).size
        species_of_row = [{int(msas[k][r]) for k, r in enumerate(row) if r >= 0} for row in got.tolist()]
        assert all(len(s) == 1 for s in species_of_row)
    # three MSAs: rows shared by all three come before rows shared by two
    got = species_pairs(real_species)
    n_shared = (got >= 0).sum(1)
    assert n_shared.max() == 3 and np.all(np.diff(n_shared) <= 0)


def test_paired_rows_with_equal_products_go_by_species_id() -> None:
    # species 30: rows (1, 6), species 20: (2, 3), species 10: (3, 2): every product is 6
    a = np.asarray([0, 30, 20, 10])
    b = np.asarray([0, 99, 10, 20, 99, 99, 30])
    assert species_pairs([a, b]).tolist() == [[3, 2], [2, 3], [1, 6]]


def test_at_most_600_rows_of_a_species_are_paired() -> None:
    # AF3 (WholePdbPipeline.Config.max_paired_sequence_per_species = 600) crops a species to
    # min(600, fewest rows); AF-Multimer would drop the species (over 600 rows in an MSA)
    a = np.asarray([0] + [7] * 700 + [9] * 3)
    b = np.asarray([0] + [9] * 5 + [7] * 650)
    got = species_pairs([a, b])
    assert got.shape == (603, 2)
    assert [tuple(r) for r in got.tolist()] == _reference_pairs([a, b])
    assert int((a[got[:, 0]] == 7).sum()) == 600 and int((a[got[:, 0]] == 9).sum()) == 3
    np.testing.assert_array_equal(got[a[got[:, 0]] == 7, 0], np.arange(1, 601))  # the first 600, stored order


def test_the_per_species_cap_is_a_parameter(real_species: list[np.ndarray]) -> None:
    for cap in (1, 2):
        got = species_pairs(real_species, max_per_species=cap)
        assert [tuple(r) for r in got.tolist()] == _reference_pairs(real_species, cap)
    assert species_pairs(real_species, max_per_species=0).shape == (0, 3)


def test_products_past_int64_are_ordered_exactly() -> None:
    # five deep MSAs sharing species: row products reach ~12000**5 (> 2**63)
    rng = np.random.default_rng(3)
    msas = [np.r_[0, rng.integers(1, 2500, size=12000)] for _ in range(5)]
    got = species_pairs(msas)
    assert float(np.log(np.where(got >= 0, got, 1)).sum(1).max()) > math.log(2**63)
    assert [tuple(r) for r in got.tolist()] == _reference_pairs(msas)


def test_no_species_in_common_pairs_nothing() -> None:
    assert species_pairs([np.asarray([0, 5, 5, 0]), np.asarray([0, 6, 7])]).shape == (0, 2)
    assert species_pairs([np.asarray([0, 0, 0]), np.asarray([0, 0])]).shape == (0, 2)


def test_row_plan_pairs_first_then_unpaired(real_species: list[np.ndarray]) -> None:
    # the paired rows drawn come first (stacked order), the unpaired ones below; how many of each
    # is a uniform draw over the stacked MSA (tests/client/test_e4_msa_rows.py), read here from
    # which of chain 0's rows are paired rows of the reference
    a, b = real_species[:2]
    paired_rows_a = {rows[0] for rows in _reference_pairs([a, b])}
    depths = {0: a.size, 1: b.size, 2: a.size, 3: 40}  # chain 2: a copy of chain 0; chain 3: not paired
    n_paired_seen = 0
    for seed in range(20):
        plan = msa_row_plan(
            depths, np.random.default_rng(seed), 1024, {0: "A", 1: "B", 2: "A"}, {"A": a, "B": b}
        )
        n = max(rows.size for rows in plan.values())
        is_paired = [int(r) in paired_rows_a for r in plan[0][1:]]
        p = sum(is_paired)
        assert is_paired == [True] * p + [False] * (len(is_paired) - p)  # the paired block first
        n_paired_seen += p
        for rows in plan.values():
            assert rows[0] == 0 and rows.size <= n
            real = rows[rows >= 0]
            assert real.size == np.unique(real).size  # no row twice
        for r in range(1, 1 + p):
            assert a[plan[0][r]] == b[plan[1][r]] != 0  # paired rows: one species
        np.testing.assert_array_equal(plan[0][: 1 + p], plan[2][: 1 + p])  # copies share the paired rows
        assert np.all(plan[3][1 : 1 + p] == -1)  # an unpaired chain is gap in the paired block
        paired_a = set(plan[0][1 : 1 + p].tolist())
        assert not paired_a & set(plan[2][1 + p :].tolist())  # no paired row again among the unpaired
    assert n_paired_seen > 0


def test_row_plan_without_pairing_draws_as_an_unpaired_msa() -> None:
    # The rule without pairing, written out: n uniform in 1..min(deepest, max); one draw of n - 1
    # merged indices j in 0..deepest - 2, uniformly without replacement, in order, for all chains
    # (AF3's merged MSA); each chain its query and row j + 1 where it has one, a gap (-1) beyond.
    depths = {3: 50, 1: 7, 4: 200}
    for seed in range(10):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(1, min(200, 64), endpoint=True))
        j: Any = np.sort(rng.choice(199, size=n - 1, replace=False)) if n > 1 else np.zeros(0, np.int64)
        want = {c: np.concatenate([[0], np.where(j + 1 < depths[c], j + 1, -1)]) for c in sorted(depths)}
        got = msa_row_plan(depths, np.random.default_rng(seed), 64)
        assert got.keys() == want.keys()
        for c in want:
            np.testing.assert_array_equal(got[c], want[c])


# ------------------------------------------------------------------------ samples of a real entry
def _stored_rows(reader: Any, key: str, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    block = reader.msa(key, None, cols)
    return block.residues, block.species


def test_a_heteromer_sample_pairs_rows_of_one_species(client_reader: Any) -> None:
    # 2q2k's two protein chains are one sequence; here they carry two different real MSAs (102m's
    # myoglobin MSA, 4zey's NRBF2 MSA: both longer than the 70-residue chains) to make a heteromer.
    entry = client_reader.entry("2q2k")
    msas = {row["key"]: (row["depth"], row["length"]) for row in client_reader.msas.to_pylist()}
    by_entry = {row["entry_id"]: row["msa_key"] for row in client_reader.chains.to_pylist() if row["msa_key"]}
    key_a, key_b = by_entry["102m"], by_entry["4zey"]
    chains = [dict(row) for row in entry.chains]
    prot = [ch for ch in chains if int(ch["mol_type"]) == MolType.PROTEIN]
    assert len(prot) == 2
    prot[0]["msa_key"], prot[1]["msa_key"] = key_a, key_b
    for ch in chains:
        if int(ch["mol_type"]) != MolType.PROTEIN:
            ch["msa_key"] = None
    tok = entry.tokens
    keep = np.arange(len(tok["restype"]), dtype=np.int64)
    # the pairs available, counted here from the stored species ids
    sp = {k: client_reader.msa(k, None, np.zeros(0, np.int64)).species for k in (key_a, key_b)}
    count = [Counter(s[1:][s[1:] != 0].tolist()) for s in sp.values()]
    n_pairs = sum(min(count[0][s], count[1][s]) for s in set(count[0]) & set(count[1]))
    assert n_pairs > 100
    ref_pairs = set(_reference_pairs([sp[key_a], sp[key_b]]))

    checked = 0
    for seed in range(6):
        s = assemble_sample(entry, keep, np.random.default_rng(seed), chains=chains, msa_fetch=client_reader.msa,
                            msa_shape=msas.get, augment_ref=False)  # fmt: skip
        m = s["msa"].shape[0]
        # the sample rows that are paired rows: chain A's and chain B's rows are a pair of the
        # reference (from the stored species ids); they lead (the paired block first), and how many
        # there are is a uniform draw over the stacked MSA (tests/client/test_e4_msa_rows.py)
        cand = []
        for ch, key in ((prot[0], key_a), (prot[1], key_b)):
            pos = np.flatnonzero(tok["asym_id"] == ch["asym_id"])
            stored, _ = _stored_rows(client_reader, key, tok["residue_index"][pos].astype(np.int64) - 1)
            cand.append(
                [set(np.flatnonzero(np.all(stored == s["msa"][r, pos], axis=1)).tolist()) for r in range(m)]
            )
        is_paired = [any((x, y) in ref_pairs for x in cand[0][r] for y in cand[1][r]) for r in range(1, m)]
        p = is_paired.index(False) if False in is_paired else m - 1  # the leading paired rows
        # no paired row below them (a row identical to a paired one on these columns can seem one)
        assert not any(
            is_paired[i] and len(cand[0][i + 1]) == len(cand[1][i + 1]) == 1 for i in range(p, m - 1)
        ), seed
        species_rows = []
        for ch, key in ((prot[0], key_a), (prot[1], key_b)):
            pos = np.flatnonzero(tok["asym_id"] == ch["asym_id"])
            cols = tok["residue_index"][pos].astype(np.int64) - 1
            stored, species = _stored_rows(client_reader, key, cols)
            # the species of the stored rows this sample row can be (its residues over the chain)
            species_rows.append(
                [
                    {int(x) for x in species[np.all(stored == s["msa"][r, pos], axis=1)]}
                    for r in range(1, 1 + p)
                ]
            )
        for r in range(p):
            assert (species_rows[0][r] & species_rows[1][r]) - {0}, (seed, r + 1)
        checked += p
    assert checked > 50


def _heteromer(reader: Any) -> tuple[Any, list[dict[str, Any]], dict[str, tuple[int, int]]]:
    """2q2k with its two protein chains given 102m's and 4zey's MSAs (as in the test above)."""
    entry = reader.entry("2q2k")
    msas = {row["key"]: (row["depth"], row["length"]) for row in reader.msas.to_pylist()}
    by_entry = {row["entry_id"]: row["msa_key"] for row in reader.chains.to_pylist() if row["msa_key"]}
    chains = [dict(row) for row in entry.chains]
    prot = [ch for ch in chains if int(ch["mol_type"]) == MolType.PROTEIN]
    prot[0]["msa_key"], prot[1]["msa_key"] = by_entry["102m"], by_entry["4zey"]
    for ch in chains:
        if int(ch["mol_type"]) != MolType.PROTEIN:
            ch["msa_key"] = None
    return entry, chains, msas


def test_the_service_pairs_as_the_store(client_store: Path, client_reader: Any) -> None:
    """Over a real lookup service (uvicorn on 127.0.0.1) the species ids, the pairs and the
    samples' MSAs are those of the store read directly."""
    from featurecache.client.http import LookupClient
    from services.lookup.server import background_server

    entry, chains, msas = _heteromer(client_reader)
    keys = sorted({str(ch["msa_key"]) for ch in chains if ch["msa_key"]})
    with background_server(client_store) as url:
        remote = LookupClient(url)
        try:
            r_entry, r_chains, r_msas = _heteromer(remote)
            assert r_msas == msas
            none = np.zeros(0, np.int64)
            local_sp = [np.asarray(client_reader.msa(k, None, none).species) for k in keys]
            remote_sp = [np.asarray(remote.msa(k, None, none).species) for k in keys]
            for a, b in zip(local_sp, remote_sp, strict=True):
                np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(species_pairs(remote_sp), species_pairs(local_sp))
            keep = np.arange(len(entry.tokens["restype"]), dtype=np.int64)
            for seed in range(3):
                here = assemble_sample(entry, keep, np.random.default_rng(seed), chains=chains,
                                       msa_fetch=client_reader.msa, msa_shape=msas.get, augment_ref=False)  # fmt: skip
                there = assemble_sample(r_entry, keep, np.random.default_rng(seed), chains=r_chains,
                                        msa_fetch=remote.msa, msa_shape=r_msas.get, augment_ref=False)  # fmt: skip
                for name in ("msa", "msa_mask", "msa_deletions"):
                    np.testing.assert_array_equal(here[name], there[name])
        finally:
            remote.close()


class _CountingReader:
    """The real reader, counting the reads of whole-MSA species ids (rows None, no column)."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.species_reads: Counter[str] = Counter()

    def msa(self, key: str, rows: Any = None, cols: Any = None) -> Any:
        if rows is None and cols is not None and len(cols) == 0:
            self.species_reads[key] += 1
        return self.reader.msa(key, rows, cols)


def test_species_ids_are_read_once_per_reader(client_reader: Any) -> None:
    entry = client_reader.entry("2q2k")
    msas = {row["key"]: (row["depth"], row["length"]) for row in client_reader.msas.to_pylist()}
    by_entry = {row["entry_id"]: row["msa_key"] for row in client_reader.chains.to_pylist() if row["msa_key"]}
    chains = [dict(row) for row in entry.chains]
    prot = [ch for ch in chains if int(ch["mol_type"]) == MolType.PROTEIN]
    prot[0]["msa_key"], prot[1]["msa_key"] = by_entry["102m"], by_entry["4zey"]
    keep = np.arange(len(entry.tokens["restype"]), dtype=np.int64)
    counting = _CountingReader(client_reader)
    for seed in range(3):
        assemble_sample(entry, keep, np.random.default_rng(seed), chains=chains, msa_fetch=counting.msa,
                        msa_shape=msas.get, augment_ref=False)  # fmt: skip
    assert counting.species_reads == {by_entry["102m"]: 1, by_entry["4zey"]: 1}
    # without pairing nothing reads them
    other = _CountingReader(client_reader)
    assemble_sample(entry, keep, np.random.default_rng(0), chains=chains, msa_fetch=other.msa, msa_shape=msas.get,
                    pair_msa=False)  # fmt: skip
    assert not other.species_reads


def test_the_dataset_can_turn_pairing_off(client_store: Path) -> None:
    """``FeatureDataset(pair_msa=False)`` reaches the sample job (its ``assemble_sample`` call);
    pairing is on by default. (The heteromer test above shows what pairing does to the rows.)"""
    from featurecache.client import FeatureDataset

    assert FeatureDataset(client_store, crop_size=64).job.pair_msa is True
    ds = FeatureDataset(client_store, crop_size=64, pair_msa=False, workers=1)
    assert ds.job.pair_msa is False
    sample = next(iter(ds))
    assert sample["msa"].shape[0] >= 1
