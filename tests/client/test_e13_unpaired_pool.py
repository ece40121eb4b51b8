"""The unpaired MSA rows a sample draws from leave out the UniProt rows (as AF3), not Protenix's pairing.a3m rows (as Protenix).

AF3 searches UniProt for pairing alone: its unpaired MSA is UniRef90 + small BFD + MGnify,
deduplicated (``alphafold3/data/pipeline.py``: ``Msa.from_multiple_msas([uniref90, small_bfd,
mgnify], deduplicate=True)``), its UniProt MSA ``from_multiple_msas([uniprot], deduplicate=False)``
is only paired, and a single chain is not paired. Since 3c6dcf7 a store keeps one row per
(sequence, species) of a pairing-source file, so an unpaired pool of every stored row drew exact
duplicates: a 4zey monomer, 458 of 1,570 non-query rows.

What "pairing-only" is, is decided here from the real files' names (:data:`PAIRING_FILES`, as
SOURCES.tsv describes them), and which rows a sample holds from the rows' residues matched against
the real files' rows (the monomer), or from the rows the sample asked the real reader for (the
heteromer). Real builds (Dask LocalCluster), real stores, a real lookup service on 127.0.0.1.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache import open_store
from featurecache.client.assemble import assemble_sample
from featurecache.const import MolType
from tests.client.conftest import _real_store
from tests.client.test_e4_msa_rows import hety_store  # noqa: F401  (the real heteromer store)
from tests.client.test_msa_pairing import _reference_pairs
from tests.conftest import MSAS
from tests.featurize.test_e11_msa_pairing_rows import PAIRING_FILES, _key, _rows

OPENFOLD_4ZEY = MSAS / "openfold" / "4zey_A"
N_SAMPLES = 40


#: the pairing files whose rows a sample's unpaired rows leave out: AF3's UniProt search (OpenFold
#: uniprot_hits). Protenix's pairing.a3m is not one: Protenix's data configuration uses it as
#: unpaired MSA too ("pairing-non_pairing": both used as non_pairing, pairing first).
UNIPROT_FILES = tuple(name for name in PAIRING_FILES if name.startswith("uniprot"))


def _pairing_file(path: str) -> bool:
    return Path(path.split("#", 1)[0]).name.removesuffix(".gz") in UNIPROT_FILES


def _protenix_pairing_file(path: str) -> bool:
    return Path(path.split("#", 1)[0]).name.removesuffix(".gz") == "pairing.a3m"


@pytest.fixture(scope="module")
def zey_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4zey (one protein chain) with OpenFold's 4zey_A MSAs: uniref90, bfd, mgnify, uniprot_hits."""
    return _real_store(tmp_path_factory, "e13_4zey", ("4zey.cif",), ("openfold/4zey_A",))


@pytest.fixture(scope="module")
def zey_rows() -> tuple[set[tuple[int, ...]], set[tuple[int, ...]]]:
    """(match columns of every row of the non-pairing files, the query included; of the pairing
    file's rows), encoded as the store encodes residues, read from the files here."""
    unpaired: set[tuple[int, ...]] = set()
    pairing: set[tuple[int, ...]] = set()
    for path in sorted(OPENFOLD_4ZEY.iterdir()):
        if path.name == "hmm_output.sto":  # template hits (SOURCES.tsv), not an MSA of the chain
            continue
        rows = {_key(m) for _, m in _rows(path)}
        (pairing if _pairing_file(path.name) else unpaired).update(rows)
    return unpaired, pairing


def _whole_chain_rows(sample: dict[str, Any], length: int) -> list[tuple[int, ...]]:
    """The sample's MSA rows over chain A, each as its full match-column tuple (4zey's tokens
    cover every residue of the sequence: checked)."""
    cols = np.flatnonzero((sample["asym_id"] == 0) & (sample["mol_type"] == MolType.PROTEIN))
    assert cols.size == length
    return [tuple(int(x) for x in sample["msa"][r, cols]) for r in range(sample["msa"].shape[0])]


def test_the_store_holds_pairing_only_duplicates(zey_store: Path) -> None:
    """The premise: the stored 4zey MSA has rows only a pairing file gave, many of them exact
    duplicates of another stored row (what the unpaired pool drew before)."""
    reader = open_store(zey_store)
    (row,) = reader.msas.to_pylist()
    pairing_src = {i for i, p in enumerate(row["sources"], 1) if _pairing_file(p)}
    assert pairing_src
    full = reader.msa(row["key"], None, None)
    counts = Counter(r.tobytes() for r in full.residues)
    dup = sum(c - 1 for c in counts.values())
    assert dup > 400  # 458 (E11's count)
    assert int(np.isin(full.source, list(pairing_src)).sum()) > dup


def test_a_monomer_draws_no_pairing_only_row_and_no_duplicate(
    zey_store: Path, zey_rows: tuple[set[tuple[int, ...]], set[tuple[int, ...]]]
) -> None:
    from featurecache.client import FeatureDataset

    unpaired, pairing = zey_rows
    only_pairing = pairing - unpaired
    assert len(only_pairing) > 100  # rows a draw over every stored row would meet
    reader = open_store(zey_store)
    (row,) = reader.msas.to_pylist()
    length, depth = int(row["length"]), int(row["depth"])
    # the rows a sample may hold: the stored rows from a non-pairing file (distinct, as built)
    n_eligible = len(unpaired)
    ds = FeatureDataset(zey_store, crop_size=4096, seed=0, samples_per_epoch=N_SAMPLES, workers=1,
                        augment_ref=False)  # fmt: skip
    drawn = 0
    most = 0
    for position in range(N_SAMPLES):
        s = ds.sample(position)
        rows = _whole_chain_rows(s, length)
        assert rows[0] == tuple(int(x) for x in s["restype"][s["asym_id"] == 0])  # row 0: the query
        assert all(r in unpaired for r in rows), position  # no row from the pairing file alone
        assert len(set(rows)) == len(rows), position  # no two rows alike
        assert len(rows) <= n_eligible  # the row count is drawn within the eligible rows
        drawn += len(rows) - 1
        most = max(most, len(rows))
    assert drawn > 20 * N_SAMPLES and most < depth
    assert most > 0.5 * min(n_eligible, 1024)  # the count rule: uniform in 1 … min(D, max rows)


class _Recording:
    """The real reader; records the rows each ``msa`` read of sample rows asked for."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.asked: dict[str, np.ndarray] = {}

    @property
    def msas(self) -> Any:
        return self.reader.msas

    def msa(self, key: str, rows: Any = None, cols: Any = None) -> Any:
        if rows is not None and (cols is None or len(cols)):
            self.asked[key] = np.asarray(rows).copy()
        return self.reader.msa(key, rows, cols)


def test_a_heteromer_pairs_as_before_and_draws_protenix_pairing_rows_unpaired(hety_store: Path) -> None:  # noqa: F811
    reader = open_store(hety_store)
    entry = reader.entry(reader.ids[0])
    msas = {r["key"]: r for r in reader.msas.to_pylist()}
    key_of = {int(c["asym_id"]): c["msa_key"] for c in reader.chains.to_pylist()}
    keys = [key_of[0], key_of[1]]
    full = {k: reader.msa(k, None, np.zeros(0, np.int64)) for k in keys}
    pairing_src = {
        k: [i for i, p in enumerate(msas[k]["sources"], 1) if _protenix_pairing_file(p)] for k in keys
    }
    assert all(pairing_src.values())  # Protenix pairing.a3m in both
    assert not any(_pairing_file(p) for k in keys for p in msas[k]["sources"])  # no UniProt search here
    from_pairing_a3m = {k: np.isin(full[k].source, pairing_src[k]) for k in keys}
    pairing_only = {k: np.zeros(len(full[k].source), bool) for k in keys}  # nothing excluded
    pairs = _reference_pairs([np.asarray(full[k].species) for k in keys])  # AF3's rule, written out there
    pair_set = set(pairs)
    paired_rows = [{p[a] for p in pairs} for a in (0, 1)]
    n_paired = len(pairs)
    n_unpaired = max(
        int((~pairing_only[k][1:]).sum()) - len({r for r in paired_rows[a] if not pairing_only[k][r]})
        for a, k in enumerate(keys)
    )
    keep = np.arange(len(entry.tokens["restype"]), dtype=np.int64)
    shape = {k: (int(m["depth"]), int(m["length"])) for k, m in msas.items()}
    rec = _Recording(reader)
    seen_unpaired = seen_paired = seen_pairing_a3m = 0
    for seed in range(30):
        s = assemble_sample(entry, keep, np.random.default_rng(seed), msa_fetch=rec.msa, msa_shape=shape.get,
                            augment_ref=False)  # fmt: skip
        m = s["msa"].shape[0]
        assert m <= 1 + n_paired + n_unpaired
        got = [rec.asked[k] for k in keys]
        at = [np.flatnonzero(s["msa_mask"][:, s["asym_id"] == a].any(axis=1)) for a in (0, 1)]
        plan = np.full((2, m), -1, np.int64)
        for a in (0, 1):
            plan[a, at[a]] = got[a]
        assert plan[0, 0] == plan[1, 0] == 0
        leading = True
        for r in range(1, m):
            pair = (int(plan[0, r]), int(plan[1, r]))
            if pair in pair_set:
                assert leading, (seed, r)  # the paired rows come first (stacked order)
                sp = [int(full[k].species[pair[a]]) for a, k in enumerate(keys)]
                assert sp[0] == sp[1] != 0, (seed, r)  # a paired row: one species in both chains
                seen_paired += 1
                continue
            leading = False
            for a, k in enumerate(keys):
                x = pair[a]
                if x < 0:
                    continue  # past this chain's unpaired rows
                assert x not in paired_rows[a], (seed, r, a)
                assert not pairing_only[k][x], (seed, r, a, x)  # unpaired: never a pairing-only row
                seen_unpaired += 1
                seen_pairing_a3m += int(from_pairing_a3m[k][x])
    assert seen_paired > 100 and seen_unpaired > 1000
    # Protenix's pairing.a3m rows are drawn as unpaired rows too (f52245a left them all out)
    assert seen_pairing_a3m > 100, seen_pairing_a3m


def _whole_entry(reader: Any) -> tuple[Any, np.ndarray, dict[str, tuple[int, int]]]:
    entry = reader.entry(reader.ids[0])
    shape = {r["key"]: (int(r["depth"]), int(r["length"])) for r in reader.msas.to_pylist()}
    return entry, np.arange(len(entry.tokens["restype"]), dtype=np.int64), shape


def test_the_service_gives_the_same_sources_and_samples(zey_store: Path, hety_store: Path) -> None:  # noqa: F811
    """Over a real lookup service the ``msas`` table's sources and the rows' sources are the
    store's, and the samples (monomer and heteromer) are the same."""
    from featurecache.client.http import LookupClient
    from services.lookup.server import background_server

    for store in (zey_store, hety_store):
        local = open_store(store)
        with background_server(store) as url:
            remote = LookupClient(url)
            try:
                assert remote.msas.column("sources").to_pylist() == local.msas.column("sources").to_pylist()
                for key in local.msas.column("key").to_pylist():
                    none = np.zeros(0, np.int64)
                    np.testing.assert_array_equal(
                        remote.msa(key, None, none).source, local.msa(key, None, none).source
                    )
                entry, keep, shape = _whole_entry(local)
                r_entry, _, r_shape = _whole_entry(remote)
                for seed in range(4):
                    here = assemble_sample(entry, keep, np.random.default_rng(seed), msa_fetch=local.msa,
                                           msa_shape=shape.get, augment_ref=False)  # fmt: skip
                    there = assemble_sample(r_entry, keep, np.random.default_rng(seed), msa_fetch=remote.msa,
                                            msa_shape=r_shape.get, augment_ref=False)  # fmt: skip
                    for name in ("msa", "msa_mask", "msa_deletions"):
                        np.testing.assert_array_equal(
                            here[name], there[name], err_msg=f"{store} {seed} {name}"
                        )
            finally:
                remote.close()


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_the_rows_are_the_same_with_one_or_two_workers(zey_store: Path, pool: str) -> None:
    from featurecache.client import FeatureDataset

    def run(workers: int) -> dict[int, dict[str, Any]]:
        ds = FeatureDataset(zey_store, crop_size=64, seed=5, samples_per_epoch=8, workers=workers, pool=pool)
        return {int(s["position"]): s for s in ds}

    one, two = run(1), run(2)
    assert sorted(one) == sorted(two) == list(range(8))
    for p in one:
        for name in ("msa", "msa_mask", "msa_deletions"):
            np.testing.assert_array_equal(one[p][name], two[p][name], err_msg=f"{p} {name}")
