"""MSA features of samples: cropped columns, AF3 row subsampling, against the real a3m and the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.client import FeatureDataset, collate
from featurecache.client.assemble import msa_features
from featurecache.const import GAP, MSA_PROTEIN_LETTERS, MolType
from tests.conftest import MSAS

A3M_4ZEY = MSAS / "openfold" / "4zey_A" / "bfd_uniclust_hits.a3m"


def _a3m_query(path: Path) -> str:
    """The first sequence of an a3m file, upper case letters only (insertions are lower case)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(">"))
    seq = []
    for line in lines[start + 1 :]:
        if line.startswith(">"):
            break
        seq.append(line.strip())
    return "".join(c for c in "".join(seq) if c.isupper() or c == "-")


def _chain(reader: Any, entry_id: str, asym_id: int) -> dict[str, Any]:
    return next(c for c in reader.entry_chains(entry_id) if c["asym_id"] == asym_id)


def test_store_has_the_msas_of_4zey_and_102m(client_reader: Any) -> None:
    for eid in ("4zey", "102m"):
        ch = _chain(client_reader, eid, 0)
        assert ch["msa_key"] and ch["msa_depth"] > 100, ch


def test_query_row_and_columns_follow_the_crop(client_reader: Any) -> None:
    e = client_reader.entry("4zey")
    ch = _chain(client_reader, "4zey", 0)
    query = _a3m_query(A3M_4ZEY)
    assert len(query) == len(ch["sequence"])
    tok = e.tokens
    keep = np.flatnonzero(tok["asym_id"] == 0)[10:70]  # a contiguous crop of chain 0 (MSE included)
    rng = np.random.default_rng(0)
    chains = [{**c, "msa_key": c["msa_key"] if c["msa_depth"] > 1 else None} for c in e.chains]
    out = msa_features(tok, keep, chains, client_reader.msa, rng, max_msa_rows=4096)
    cols = tok["residue_index"][keep] - 1
    expected = np.array([MSA_PROTEIN_LETTERS.get(query[c], -1) for c in cols])
    std = expected >= 0
    np.testing.assert_array_equal(out["msa"][0][std], expected[std])
    # every sampled row is a row of the stored MSA, restricted to the crop's columns
    full = client_reader.msa(ch["msa_key"])
    stored_res, stored_del = full.residues[:, cols], full.deletions[:, cols]
    m = out["msa"].shape[0]
    assert 1 <= m <= ch["msa_depth"]
    for r in range(m):
        same = np.flatnonzero((stored_res == out["msa"][r]).all(1))
        assert same.size, r  # a row of the stored MSA …
        assert (stored_del[same] == out["msa_deletions"][r]).all(1).any(), r  # … with its deletions
        if r == 0:
            assert 0 in same  # the query comes first
    np.testing.assert_allclose(out["profile"], full.profile[cols])
    np.testing.assert_allclose(out["deletion_mean"], full.deletion_mean[cols])


def test_row_count_is_drawn_uniformly_and_capped(client_reader: Any) -> None:
    e = client_reader.entry("102m")
    tok = e.tokens
    keep = np.arange(len(tok["restype"]))
    ch = _chain(client_reader, "102m", 0)
    # the rows a monomer draws from: the query and the rows not from the pairing-only file
    # (Protenix pairing.a3m: AF3 keeps its UniProt MSA for pairing alone; E13); 97 + 1 of 838
    (sources,) = [m["sources"] for m in client_reader.msas.to_pylist() if m["key"] == ch["msa_key"]]
    pairing = [i for i, p in enumerate(sources, 1) if Path(p).name.removesuffix(".gz") == "pairing.a3m"]
    row_source = client_reader.msa(ch["msa_key"], None, np.zeros(0, np.int64)).source
    depth = int((~np.isin(row_source, pairing)).sum())
    cap = 64
    counts = []
    for seed in range(60):
        out = msa_features(
            tok, keep, e.chains, client_reader.msa, np.random.default_rng(seed), max_msa_rows=cap
        )
        counts.append(out["msa"].shape[0])
        lig = tok["mol_type"][keep] == MolType.LIGAND
        assert (out["msa"][:, lig] == GAP).all() and out["msa_mask"][:, lig].all()  # AF3: all-gap MSA
        assert out["msa_mask"][:, ~lig].all()  # one chain with an MSA: all its rows are real
    assert max(counts) <= cap and min(counts) >= 1 and depth > cap and pairing
    assert len(set(counts)) > 30  # uniform over 1..64, not a constant
    assert np.mean(counts) == pytest.approx(32.5, abs=8)  # 3.3 sd of the mean (cap 200: 25 of 100.5)


def test_batch_msa_features_from_the_dataset(client_store: Path) -> None:
    ds = FeatureDataset(client_store, crop_size=64, samples_per_epoch=16, seed=2, max_msa_rows=128)
    samples = [s for s in ds if s["entry_id"] in ("4zey", "102m")]
    ds.close()
    assert samples
    batch = collate(samples)
    m = batch["msa"].shape[1]
    assert 1 < m <= 128
    assert ((batch["has_deletion"] > 0) == (batch["deletion_value"] > 0)).all()
    assert float(batch["deletion_value"].max()) < 1.0
    assert batch["msa_mask"][:, 0][batch["token_mask"]].all()
