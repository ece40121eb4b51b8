"""A residue the crop cuts is centred on its whole reference conformer (review R25d s43 #3).

AF3's ``random_augmentation`` centres each residue's conformer on the mean of all its atoms, then
rotates and translates it, before the crop: the atoms a crop keeps of a residue sit where they sit
when the residue is kept whole. featurecache looked the conformer up over the whole residue but
centred it on the kept atoms (R25d: shifts of median 1.04 Å, up to 7.28 Å for 721p's GNP with 5 of
its 32 atoms kept).

The oracle is the same sample with the residue kept whole: same entry, same generator seed, and the
same residues (so the same per-residue rotations and translations are drawn, which the unchanged
positions of every other residue confirm); the kept atoms of the cut residue must get the very
``ref_pos`` they get in it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from featurecache.chem.reference import reference_features
from featurecache.client.assemble import assemble_sample
from featurecache.const import MolType, decode_res_name


def _per_atom_residue_tokens(entry: Any, code: str) -> np.ndarray:
    """Token indices of the first residue named ``code`` (tokenized per atom)."""
    tok = entry.tokens
    hits = [t for t in range(len(tok["restype"])) if decode_res_name(tok["res_name"][t]) == code]
    assert hits and not tok["is_standard"][hits[0]]
    first = hits[0]
    same = (tok["asym_id"] == tok["asym_id"][first]) & (tok["residue_index"] == tok["residue_index"][first])
    return np.flatnonzero(same & ~tok["is_standard"])


def _atoms(entry: Any, tokens: np.ndarray) -> np.ndarray:
    start, count = entry.tokens["atom_start"][tokens], entry.tokens["atom_count"][tokens]
    return np.concatenate([np.arange(s, s + c) for s, c in zip(start, count, strict=True)])


@pytest.mark.parametrize(
    ("entry_id", "code", "mol_type"),
    [
        ("102m", "HEM", MolType.LIGAND),
        ("721p-assembly1", "GNP", MolType.LIGAND),
        ("2q2k", "5IU", MolType.DNA),  # a modified residue of a DNA chain
    ],
    ids=["102m-HEM", "721p-GNP", "2q2k-5IU"],
)
def test_a_cut_residue_gets_the_ref_pos_it_gets_whole(
    client_reader: Any, entry_id: str, code: str, mol_type: int
) -> None:
    entry = client_reader.entry(entry_id)
    table = client_reader.component_table()

    def ref_fn(atoms: Any, tokens: Any) -> Any:
        return reference_features(atoms, tokens, table)

    residue = _per_atom_residue_tokens(entry, code)
    assert int(entry.tokens["mol_type"][residue[0]]) == mol_type
    n_tokens = len(entry.tokens["restype"])
    whole = np.arange(n_tokens, dtype=np.int64)
    dropped = residue[: (2 * len(residue)) // 3]  # keep the last third: far from the residue's centroid
    cut = np.setdiff1d(whole, dropped)
    samples = [
        assemble_sample(entry, keep, np.random.default_rng(7), ref_features=ref_fn, augment_ref=True)
        for keep in (whole, cut)
    ]
    a_whole, a_cut = _atoms(entry, whole), _atoms(entry, cut)
    assert set(a_cut) < set(a_whole)
    rows = np.searchsorted(a_whole, a_cut)
    ref_whole, ref_cut = samples[0]["ref_pos"][rows], samples[1]["ref_pos"]
    mask = samples[1]["ref_mask"]
    assert mask.any() and (samples[0]["ref_mask"][rows] == mask).all()
    in_residue = np.isin(a_cut, _atoms(entry, residue))
    assert in_residue.any() and mask[in_residue].all()
    # every other residue: same draws, same positions
    np.testing.assert_array_equal(ref_cut[~in_residue], ref_whole[~in_residue])
    # the cut residue's kept atoms: where they are when it is kept whole (same arithmetic)
    np.testing.assert_allclose(ref_cut[in_residue], ref_whole[in_residue], rtol=0, atol=1e-5)


def test_the_centre_of_a_residue_kept_whole_is_the_centroid_of_its_masked_atoms(client_reader: Any) -> None:
    """Unchanged: an uncut residue is centred on its own masked atoms, so the augmented positions'
    centroid is the drawn translation (here recovered with the same generator: rotations first)."""
    from featurecache.client.assemble import REF_TRANSLATION_STD, random_rotations

    entry = client_reader.entry("102m")
    table = client_reader.component_table()
    keep = np.arange(len(entry.tokens["restype"]), dtype=np.int64)
    s = assemble_sample(
        entry, keep, np.random.default_rng(3), ref_features=lambda a, t: reference_features(a, t, table)
    )
    uid, mask = s["ref_space_uid"], s["ref_mask"]
    n_uid = int(uid.max()) + 1
    rng = np.random.default_rng(3)
    random_rotations(n_uid, rng)
    shift = rng.normal(scale=REF_TRANSLATION_STD, size=(n_uid, 3))
    for u in np.unique(uid[mask]):
        sel = (uid == u) & mask
        np.testing.assert_allclose(s["ref_pos"][sel].astype(np.float64).mean(axis=0), shift[u], atol=1e-4)
