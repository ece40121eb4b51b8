"""A crop that cuts a residue keeps its reference conformer (review RF1 s25 #1): AF3 computes the
reference features of each whole residue and crops afterwards, so every kept atom of a cut residue
has exactly the ``ref_*`` it has when the residue is kept whole. Per-token crops (the default since
5a0b339) cut ligands and modified residues; for one whose reference is a *perceived* component
(``code#hash``: the CCD entry lacks some of its atom names) the hash of the kept atoms alone
matched nothing stored, and they got ``ref_mask`` False or the plain CCD conformer.

Real store: 1GBT (GBS, a perceived component) and 4oz7 (22W, likewise), real build with the CCD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.chem.keys import perceived_key
from featurecache.client.dataset import FeatureDataset
from featurecache.const import decode_atom_name, decode_res_name
from tests.client.conftest import _real_store

FILES = ("1GBT.cif", "4oz7.pdb")
REF_KEYS = ("ref_pos", "ref_mask", "ref_element", "ref_charge", "ref_atom_name_chars")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _real_store(tmp_path_factory, "e8_refs", FILES)


@pytest.fixture(scope="module")
def entries(store: Path) -> dict[str, Any]:
    import featurecache

    reader = featurecache.open_store(store)
    try:
        table = reader.component_table()
        out = {}
        for eid in reader.ids:
            e = reader.entry(eid)
            out[eid] = (e, table)
        return out
    finally:
        reader.close()


def _entry_atoms(e: Any, token_index: np.ndarray) -> np.ndarray:
    start = np.asarray(e.tokens["atom_start"], np.int64)[token_index]
    count = np.asarray(e.tokens["atom_count"], np.int64)[token_index]
    return np.concatenate([np.arange(s, s + c) for s, c in zip(start, count, strict=True)])


def _whole_references(store: Path, entries: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """Each entry's reference features from a sample whose crop holds the whole entry."""
    out: dict[str, dict[str, np.ndarray]] = {}
    ds = FeatureDataset(store, crop_size=100_000, max_atoms=None, seed=0, samples_per_epoch=16, workers=1,
                        augment_ref=False, use_msa=False)  # fmt: skip
    for p in range(16):
        s = ds.sample(p)
        e = entries[s["entry_id"]][0]
        assert s["token_index"].size == len(e.tokens["restype"])  # the whole entry
        aidx = _entry_atoms(e, s["token_index"])
        out[s["entry_id"]] = {k: _scatter(np.asarray(s[k]), aidx, len(e.atoms["name"])) for k in REF_KEYS}
    assert sorted(out) == sorted(entries)
    return out


def _scatter(values: np.ndarray, aidx: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, *values.shape[1:]), values.dtype)
    out[aidx] = values
    return out


def test_perceived_components_are_used(entries: dict[str, Any]) -> None:
    """The entries hold residues whose component is perceived (what the crops below must keep)."""
    seen = set()
    for e, table in entries.values():
        uid = np.asarray(e.atoms["ref_space_uid"])
        codes = [decode_res_name(r) for r in np.asarray(e.tokens["res_name"])]
        tok = np.asarray(e.atoms["token_index"])
        for u in np.unique(uid):
            members = np.flatnonzero(uid == u)
            key = perceived_key(codes[tok[members[0]]], [(decode_atom_name(e.atoms["name"][k]),
                                                         int(e.atoms["element"][k])) for k in members])  # fmt: skip
            if key in table:
                seen.add(key.split("#")[0])
    assert {"GBS", "22W"} <= seen


def test_cut_residues_keep_their_whole_residue_reference(store: Path, entries: dict[str, Any]) -> None:
    whole = _whole_references(store, entries)
    cut_residues = {"GBS": 0, "22W": 0}
    checked = 0
    for crop in (8, 16, 32, 48):
        for seed in range(3):
            ds = FeatureDataset(store, crop_size=crop, seed=seed, samples_per_epoch=40, workers=1,
                                augment_ref=False, use_msa=False)  # fmt: skip
            for p in range(40):
                s = ds.sample(p)
                e = entries[s["entry_id"]][0]
                aidx = _entry_atoms(e, s["token_index"])
                ref = whole[s["entry_id"]]
                for k in REF_KEYS:
                    np.testing.assert_array_equal(
                        np.asarray(s[k]),
                        ref[k][aidx],
                        err_msg=f"{k} of {s['entry_id']} crop {crop} seed {seed} "
                        f"position {p} ({s['crop_method']})",
                    )
                checked += 1
                uid = np.asarray(e.atoms["ref_space_uid"])
                codes = [decode_res_name(r) for r in np.asarray(e.tokens["res_name"])]
                tok = np.asarray(e.atoms["token_index"])
                kept_uid, n_kept = np.unique(uid[aidx], return_counts=True)
                for u, nk in zip(kept_uid, n_kept, strict=True):
                    members = np.flatnonzero(uid == u)
                    code = codes[tok[members[0]]]
                    if nk < members.size and code in cut_residues:
                        cut_residues[code] += 1
    assert checked == 4 * 3 * 40
    # the crops did cut the perceived residues (else this test would check nothing)
    assert all(n >= 5 for n in cut_residues.values()), cut_residues


def test_whole_residue_reference_is_the_perceived_conformer(store: Path, entries: dict[str, Any]) -> None:
    """The reference the cut atoms must keep is the stored perceived component's, by atom name
    (read from the component table, not through the client)."""
    whole = _whole_references(store, entries)
    for eid, (e, table) in entries.items():
        uid = np.asarray(e.atoms["ref_space_uid"])
        codes = [decode_res_name(r) for r in np.asarray(e.tokens["res_name"])]
        tok = np.asarray(e.atoms["token_index"])
        for u in np.unique(uid):
            members = np.flatnonzero(uid == u)
            names = [decode_atom_name(e.atoms["name"][k]) for k in members]
            key = perceived_key(codes[tok[members[0]]], [(n, int(e.atoms["element"][k]))
                                                         for n, k in zip(names, members, strict=True)])  # fmt: skip
            if key not in table:
                continue
            comp = table.component(key)
            at = {n: i for i, n in enumerate(comp["atom_names"])}
            rows = np.array([at[n] for n in names])
            np.testing.assert_array_equal(whole[eid]["ref_mask"][members], comp["mask"][rows], err_msg=key)
            np.testing.assert_array_equal(whole[eid]["ref_pos"][members],
                                          np.where(comp["mask"][rows, None], comp["ref_pos"][rows], 0), err_msg=key)  # fmt: skip
            assert whole[eid]["ref_mask"][members].any(), key


def test_whole_residue_atoms_sorted_or_not(entries: dict[str, Any]) -> None:
    """The residues' atoms, whether the entry numbers residues in atom order or not; None when
    the crop cut no residue (the kept atoms alone are then looked up, as before)."""
    from featurecache.client.assemble import whole_residue_atoms

    e = entries[next(eid for eid in entries if eid.upper().startswith("1GBT"))][0]
    uid = np.asarray(e.atoms["ref_space_uid"], np.int64)
    relabelled = np.random.default_rng(0).permutation(int(uid.max()) + 1)[uid]  # same residues, unsorted
    assert np.any(np.diff(relabelled) < 0)
    rng = np.random.default_rng(1)
    n_cut = 0
    for _ in range(50):
        lo = int(rng.integers(0, uid.size - 40))
        aidx = np.arange(lo, lo + int(rng.integers(1, 40)), dtype=np.int64)
        expect = [k for k in range(uid.size) if uid[k] in set(uid[aidx].tolist())]
        for u in (uid, relabelled):
            got = whole_residue_atoms(u, aidx)
            if len(expect) == aidx.size:
                assert got is None
            else:
                assert got is not None and got.tolist() == expect
        n_cut += len(expect) > aidx.size
    assert n_cut > 10
