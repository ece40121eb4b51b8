"""The per-reader memo of the species pairing (``assemble._memo_pairs``): a heteromer drawn again
reuses its pairs, with samples identical to those paired afresh."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import featurecache
from featurecache.client import assemble
from featurecache.client.assemble import assemble_sample, species_pairs
from tests.client.test_msa_pairing import _heteromer

MSA_FIELDS = ("msa", "msa_mask", "msa_deletions", "profile", "deletion_mean")


def _sample(reader: Any, seed: int) -> dict[str, Any]:
    entry, chains, msas = _heteromer(reader)
    keep = np.arange(len(entry.tokens["restype"]), dtype=np.int64)
    return assemble_sample(entry, keep, np.random.default_rng(seed), chains=chains, msa_fetch=reader.msa,
                           msa_shape=msas.get, augment_ref=False)  # fmt: skip


def test_a_heteromer_drawn_again_is_paired_from_the_memo_with_identical_samples(client_store: Path) -> None:
    seeds = range(6)
    # without the memo: each sample from a reader of its own (nothing of an earlier sample cached)
    fresh = []
    for seed in seeds:
        own = featurecache.open_store(client_store)
        try:
            fresh.append(_sample(own, seed))
        finally:
            own.close()
    reader = featurecache.open_store(client_store)
    try:
        _, chains, _ = _heteromer(reader)
        keys = tuple(sorted({str(ch["msa_key"]) for ch in chains if ch["msa_key"]}))
        for seed, want in zip(seeds, fresh, strict=True):
            got = _sample(reader, seed)  # the first pairs and fills the memo, the others read it
            for name in MSA_FIELDS:
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"seed {seed}: {name}")
        memo = assemble._pairs_memo[reader]
        assert list(memo) == [keys]
        arrays, pairs = memo[keys]
        # the memo's pairs are those of the stored species ids, paired here again
        none = np.zeros(0, np.int64)
        stored = [np.asarray(reader.msa(k, None, none).species) for k in keys]
        for a, b in zip(arrays, stored, strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(pairs, species_pairs(stored))
        assert pairs.shape[0] > 100
    finally:
        reader.close()


def test_the_memo_serves_only_the_arrays_it_was_computed_from(client_reader: Any) -> None:
    def frozen(*ids: int) -> np.ndarray:
        a = np.asarray((0, *ids), dtype=np.int32)
        a.flags.writeable = False
        return a

    first = {"x": frozen(5, 6, 5), "y": frozen(6, 5, 7)}
    np.testing.assert_array_equal(assemble._memo_pairs(client_reader.msa, first), [[1, 2], [2, 1]])
    # the same keys, other species (an MSA read again, e.g. a rebuilt store): paired again
    again = {"x": frozen(5, 6, 5), "y": frozen(7, 7, 5)}
    np.testing.assert_array_equal(assemble._memo_pairs(client_reader.msa, again), [[1, 3]])
    # writable arrays (not the reader's cached ones) are never memoized
    loose = {"p": np.asarray([0, 9]), "q": np.asarray([0, 9])}
    np.testing.assert_array_equal(assemble._memo_pairs(client_reader.msa, loose), [[1, 1]])
    assert ("p", "q") not in assemble._pairs_memo[client_reader]
    # bounded: the oldest key sets leave
    for i in range(assemble._PAIRS_MEMO_SIZE + 3):
        assemble._memo_pairs(client_reader.msa, {f"k{i}": frozen(1), "z": frozen(1)})
    memo = assemble._pairs_memo[client_reader]
    assert len(memo) == assemble._PAIRS_MEMO_SIZE
    assert (f"k{assemble._PAIRS_MEMO_SIZE + 2}", "z") in memo and ("x", "y") not in memo
