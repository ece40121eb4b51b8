"""Crops token by token by default, as AF3 crops (supplement §2.7; review R1 s25 #3): a spatial
crop is the ``crop_size`` tokens nearest its reference (centre-atom distance + 1e-3 × index), a
ligand's atom tokens ranked like any token; ``crop_whole_groups=True`` keeps each ligand, glycan
and modified residue whole (the rule before; tests/client/test_crop.py holds it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from featurecache.client.crop import CropInput, Cropper
from tests.client.test_crop import _centres_from_atoms, _per_atom_residues

LIGAND_ENTRIES = ("102m", "721p", "7pzb")  # HEM (43 atom tokens), GNP + MG, PCG


def _nearest_k(centres: np.ndarray, resolved: np.ndarray, ref: int, k: int) -> set[int]:
    """The k tokens nearest ``ref``: centre distance + 1e-3 × token index, unresolved tokens last
    in entry order, the reference first (written out here, not the cropper's ranking)."""
    d = np.sqrt(((centres.astype(np.float64) - centres[ref]) ** 2).sum(1)) + 1e-3 * np.arange(len(centres))
    d[~resolved] = np.inf
    d[ref] = -1.0
    return set(np.argsort(d, kind="stable")[:k].tolist())


@pytest.fixture(scope="module")
def ligand_entries(client_reader: Any) -> dict[str, tuple[Any, CropInput, np.ndarray, np.ndarray]]:
    out = {}
    for eid in client_reader.ids:
        if not any(eid.lower().startswith(x) for x in LIGAND_ENTRIES):
            continue
        e = client_reader.entry(eid)
        resolved = np.asarray(e.atoms["is_present"], bool)[np.asarray(e.tokens["centre_atom"], np.int64)]
        out[eid] = (e, CropInput.from_arrays(e.tokens, e.atoms, e.bonds, e.interfaces), _centres_from_atoms(e),
                    resolved)  # fmt: skip
    assert len(out) == 3, sorted(client_reader.ids)
    return out


def test_spatial_crops_are_the_nearest_tokens(ligand_entries: dict) -> None:
    differs = cut = 0
    for eid, (e, inp, centres, resolved) in ligand_entries.items():
        molecules = [m for m in _per_atom_residues(e) if m.size > 1]
        assert molecules, eid  # multi-atom ligands
        for crop in (32, 64, 128):
            if crop >= inp.n_tokens:
                continue
            for weights in ((0, 1, 0), (0, 0, 1)):
                default, whole = Cropper(crop, None, weights), Cropper(crop, None, weights, whole_groups=True)
                for seed in range(25):
                    res = default(inp, np.random.default_rng([seed, crop]))
                    assert res.method in ("spatial", "spatial_interface")
                    got = set(res.indices.tolist())
                    assert got == _nearest_k(centres, resolved, res.centre_token, crop), (eid, crop, seed)
                    kept = np.isin(np.arange(inp.n_tokens), res.indices)
                    cut += sum(0 < kept[m].sum() < m.size for m in molecules)
                    snapped = whole(inp, np.random.default_rng([seed, crop]))
                    assert snapped.centre_token == res.centre_token  # the same draws
                    differs += int(set(snapped.indices.tolist()) != got)
    assert cut > 0  # per token, ligands are cut at the crop's edge
    assert differs > 0  # and snapping gives other crops (R1: 10–90 % of them on these entries)


def test_contiguous_crops_cut_ligands_as_algorithm_1(ligand_entries: dict) -> None:
    cut = 0
    for eid, (e, inp, _, _) in ligand_entries.items():
        molecules = [m for m in _per_atom_residues(e) if m.size > 1]
        for crop in (32, 64):
            cropper = Cropper(crop, None, (1, 0, 0))
            for seed in range(30):
                res = cropper(inp, np.random.default_rng(seed))
                assert res.indices.size == min(crop, inp.n_tokens), (eid, crop, seed)
                asym = inp.asym_id[res.indices]
                for c in np.unique(asym):
                    assert np.all(np.diff(res.indices[asym == c]) == 1), (eid, crop, seed)
                kept = np.isin(np.arange(inp.n_tokens), res.indices)
                # molecules that fit the crop (whole-group mode would keep these whole)
                cut += sum(0 < kept[m].sum() < m.size for m in molecules if m.size <= crop)
    assert cut > 0


def test_the_dataset_crops_per_token_by_default_and_whole_on_request(
    client_store: Path, client_reader: Any
) -> None:
    from featurecache.client import FeatureDataset

    entries = {eid: client_reader.entry(eid) for eid in client_reader.ids}
    centres = {eid: _centres_from_atoms(e) for eid, e in entries.items()}
    resolved = {
        eid: np.asarray(e.atoms["is_present"], bool)[np.asarray(e.tokens["centre_atom"], np.int64)]
        for eid, e in entries.items()
    }
    kw: dict[str, Any] = dict(crop_size=48, crop_weights=(0, 1, 0), samples_per_epoch=40, seed=5, workers=1,
                              augment_ref=False, use_msa=False)  # fmt: skip
    checked = differ = 0
    per_token = FeatureDataset(client_store, **kw)
    assert per_token.cropper.whole_groups is False
    whole = FeatureDataset(client_store, crop_whole_groups=True, **kw)
    assert whole.cropper.whole_groups is True
    for position in range(40):
        s, w = per_token.sample(position), whole.sample(position)
        eid = s["entry_id"]
        if s["crop_method"] == "none":
            continue
        want = _nearest_k(centres[eid], resolved[eid], int(s["crop_centre"]), 48)
        assert set(s["token_index"].tolist()) == want, (position, eid)
        checked += 1
        kept = np.isin(np.arange(len(entries[eid].tokens["restype"])), w["token_index"])
        for m in _per_atom_residues(entries[eid]):
            assert kept[m].all() or not kept[m].any(), (position, eid, m)  # whole groups on request
        differ += int(set(w["token_index"].tolist()) != want)
    assert checked > 15 and differ > 0
