"""A heteromer's MSA rows are a uniform subset of its stacked MSA [query; paired; unpaired]
(review R1 s25 #1): AF3 shuffles the whole stacked MSA and truncates it (``shuffle_msa``,
``truncate_msa_batch``), so the paired block is not filled first.

The heteromer is made here of two real chains (1k1a chain A and 7zzx's first chain, set 35 Å
apart in one mmCIF) and built with their real Protenix MSAs (mmcif_msa/1 and /2, UniRef100
``<accession>_<taxid>/`` headers, joined to the chains by query sequence): a real build, a real
store, samples from ``FeatureDataset``.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache import open_store
from tests.client.test_msa_pairing import _reference_pairs
from tests.conftest import CCD, MSAS, STRUCTURES, build_store

N_SAMPLES = 150


def _load(path: Path) -> Any:
    import gemmi

    st = gemmi.read_structure(str(path))
    st.remove_ligands_and_waters()
    st.remove_hydrogens()
    st.setup_entities()
    return st


def _write_heteromer(out: Path) -> None:
    """1k1a chain A + 7zzx's first chain (moved 35 Å off) in one mmCIF, two polymer entities."""
    import gemmi

    a, b = _load(STRUCTURES / "1k1a.cif"), _load(STRUCTURES / "7zzx.cif")
    eb = next(e for e in b.entities if e.entity_type == gemmi.EntityType.Polymer)
    st = a.clone()
    for i in reversed(range(len(st.entities))):
        if st.entities[i].entity_type != gemmi.EntityType.Polymer:
            del st.entities[i]
    while len(st[0]) > 1:
        st[0].remove_chain(st[0][1].name)
    cb = b[0][0].clone()
    cb.name = "Z"
    ctr_a = np.mean([at.pos.tolist() for r in st[0][0] for at in r], 0)
    ctr_b = np.mean([at.pos.tolist() for r in cb for at in r], 0)
    shift = gemmi.Position(*(ctr_a - ctr_b + np.array([35.0, 0.0, 0.0])))
    for r in cb:
        r.subchain, r.entity_id = "ZX", "9"
        for at in r:
            at.pos = at.pos + shift
    st[0].add_chain(cb)
    e2 = gemmi.Entity("9")
    e2.entity_type, e2.polymer_type = gemmi.EntityType.Polymer, gemmi.PolymerType.PeptideL
    e2.full_sequence, e2.subchains = list(eb.full_sequence), ["ZX"]
    st.entities.append(e2)
    st.name = "HETY"
    st.make_mmcif_document().write_file(str(out))


@pytest.fixture(scope="module")
def hety_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hety")
    (root / "pdb").mkdir()
    _write_heteromer(root / "pdb" / "hety.cif")
    for name, src in (("m1", "1"), ("m2", "2")):
        shutil.copytree(MSAS / "Protenix" / "mmcif_msa" / src, root / "msa" / name)
    summary = build_store(root / "store", root / "pdb", workers=1, msa_dir=root / "msa", ccd=CCD)
    assert summary.n_failed == 0
    return root / "store"


def test_unpaired_rows_take_their_share_of_the_stacked_msa(hety_store: Path) -> None:
    from featurecache.client import FeatureDataset

    reader = open_store(hety_store)
    chains = reader.chains.to_pylist()
    key_of = {int(c["asym_id"]): c["msa_key"] for c in chains}
    assert sorted(key_of) == [0, 1] and key_of[0] and key_of[1] and key_of[0] != key_of[1]
    full = {a: reader.msa(key_of[a], None, None) for a in (0, 1)}
    # no row is pairing-only here: the store's MSAs are Protenix's, and a sample's unpaired rows
    # leave out only UniProt search rows (AF3), not Protenix's pairing.a3m rows, which Protenix
    # uses as unpaired MSA too (E13, then RF5 s25)
    sources = {m["key"]: m["sources"] for m in reader.msas.to_pylist()}
    assert not any("uniprot" in Path(p).name for a in (0, 1) for p in sources[key_of[a]])
    assert all(
        any(Path(p).name.removesuffix(".gz") == "pairing.a3m" for p in sources[key_of[a]]) for a in (0, 1)
    )
    pairing_only = [np.zeros(full[a].depth, bool) for a in (0, 1)]
    # since 3c6dcf7 a pairing.a3m row may repeat another row's residues once per further species:
    # a sample row over a whole chain names the stored rows it can be
    lut: list[dict[bytes, set[int]]] = [{}, {}]
    for a in (0, 1):
        for i in range(full[a].depth):
            lut[a].setdefault(full[a].residues[i].tobytes(), set()).add(i)

    # the stacked MSA, counted here: P paired rows (AF3's rule, written out in test_msa_pairing),
    # U merged unpaired rows (the most unpaired rows of a chain: not the query, not paired)
    pairs = _reference_pairs([np.asarray(full[0].species), np.asarray(full[1].species)])
    pair_set = set(pairs)
    paired_rows = [{p[a] for p in pairs} for a in (0, 1)]
    pool = [set(np.flatnonzero(~pairing_only[a]).tolist()) - paired_rows[a] - {0} for a in (0, 1)]
    n_paired = len(pairs)
    n_unpaired = max(len(pool[a]) for a in (0, 1))
    depth = 1 + n_paired + n_unpaired
    q = n_unpaired / (depth - 1)  # share of unpaired rows among the stacked MSA's non-query rows
    assert n_paired > 300 and 0.8 < q < 0.97  # a heteromer with many paired rows (R1: 548 of 7966)

    ds = FeatureDataset(hety_store, crop_size=512, seed=0, samples_per_epoch=N_SAMPLES, workers=1,
                        augment_ref=False)  # fmt: skip
    total = unpaired = without_unpaired = 0
    for position in range(N_SAMPLES):
        s = ds.sample(position)
        assert s["crop_method"] == "none"  # the whole entry: every column of both chains
        msa, mask = s["msa"], s["msa_mask"]
        u = 0
        for r in range(1, msa.shape[0]):
            can: list[set[int]] = []
            for a in (0, 1):
                cols = np.flatnonzero(s["asym_id"] == a)
                if not mask[r, cols].any():
                    can.append({-1})  # a gap row of this chain (past its unpaired rows)
                    continue
                can.append(lut[a][msa[r, cols].tobytes()])
            if any((x, y) in pair_set for x in can[0] for y in can[1]):
                continue  # a paired row: a pair of rows in both chains
            # else an unpaired row in every chain that has it (a paired row is paired in both)
            for a in (0, 1):
                assert can[a] == {-1} or can[a] & pool[a], (position, r, a)
            u += 1
        unpaired += u
        total += msa.shape[0] - 1
        without_unpaired += int(msa.shape[0] > 1 and u == 0)
    # Given a sample's row count, its unpaired rows are hypergeometric (n - 1 draws from D - 1
    # rows, U of them unpaired): mean q·(n - 1), variance at most the binomial q(1 - q)(n - 1).
    # Over the samples (independent): |X - qT| within 5 binomial standard deviations.
    sd = math.sqrt(total * q * (1 - q))
    assert total > 20 * N_SAMPLES
    assert abs(unpaired - q * total) < 5 * sd, (unpaired, total, q, sd)
    # R1 saw 57 % of the samples without an unpaired row; a uniform draw leaves one without only
    # when all of its n - 1 rows are paired (below 1 - q for n = 2, far less for more rows)
    assert without_unpaired < 0.2 * N_SAMPLES, without_unpaired


def test_the_rows_are_the_same_with_two_workers(hety_store: Path) -> None:
    from featurecache.client import FeatureDataset

    def run(workers: int) -> dict[int, dict[str, Any]]:
        ds = FeatureDataset(hety_store, crop_size=512, seed=3, samples_per_epoch=12, workers=workers)
        return {int(s["position"]): s for s in ds}

    one, two = run(1), run(2)
    assert sorted(one) == sorted(two) == list(range(12))
    for p in one:
        for name in ("msa", "msa_mask", "msa_deletions", "ref_pos"):
            np.testing.assert_array_equal(one[p][name], two[p][name], err_msg=f"{p} {name}")
