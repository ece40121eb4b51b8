"""What a sample says about its atoms, checked against the CCD as gemmi reads it: reference
charges / elements (AF3 Table 5)."""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import gemmi
import numpy as np
import pytest

from featurecache.client import FeatureDataset
from featurecache.client.assemble import assemble_sample
from featurecache.client.sampler import SampleKey
from featurecache.const import decode_atom_name, decode_res_name
from tests.conftest import CCD


@cache
def _ccd_atoms(code: str) -> dict[str, tuple[int, int]] | None:
    """atom name → (formal charge, atomic number) from the CCD file's ``_chem_comp_atom`` loop."""
    path = CCD / f"{code}.cif"
    if not path.is_file():
        return None
    block = gemmi.cif.read(str(path)).sole_block()
    table = block.find("_chem_comp_atom.", ["atom_id", "type_symbol", "charge"])
    out = {}
    for row in table:
        name = gemmi.cif.as_string(row[0])
        charge = gemmi.cif.as_string(row[2])
        out[name] = (int(charge) if charge not in ("?", ".") else 0, gemmi.Element(row[1]).atomic_number)
    return out


def _whole_entry(store: Path, entry_id: str, **kw: Any) -> dict[str, Any]:
    """The sample of ``entry_id`` with every token kept (a crop bigger than the entry, no atom budget)."""
    ds = FeatureDataset(store, crop_size=100_000, max_atoms=None, workers=1, **kw)
    try:
        return ds.job(SampleKey(0, 0, 0, entry_id))
    finally:
        ds.close()


def _atom_labels(sample: dict[str, Any], entry: Any) -> list[tuple[str, str]]:
    """(component code, atom name) of every atom of the sample."""
    res = [decode_res_name(r) for r in entry.tokens["res_name"][sample["token_index"]]]
    names = [decode_atom_name(n) for n in sample["ref_atom_name_chars"]]
    return [(res[t], name) for t, name in zip(sample["atom_to_token"].tolist(), names, strict=True)]


# ----------------------------------------------------------------------------- ref_charge / element
@pytest.mark.parametrize("entry_id", ["721p-assembly1", "102m"])
def test_ref_charge_and_element_are_the_reference_conformers(
    client_store: Path, client_reader: Any, entry_id: str
) -> None:
    # Reviewer's repro: LYS NZ, ARG NH2, HIS ND1, Mg2+ (721p), a sulfate O (102m) had ref_charge 0,
    # the file's pdbx_formal_charge, where the CCD says +1, +1, +1, +2, -1.
    s = _whole_entry(client_store, entry_id)
    entry = client_reader.entry(entry_id)
    checked = 0
    charged: Counter[tuple[str, str, int]] = Counter()
    for a, (code, name) in enumerate(_atom_labels(s, entry)):
        ccd = _ccd_atoms(code)
        if ccd is None or name not in ccd:
            continue
        charge, element = ccd[name]
        assert int(s["ref_charge"][a]) == charge, (code, name)
        assert int(s["ref_element"][a]) == element, (code, name)
        checked += 1
        if charge:
            charged[(code, name, charge)] += 1
    assert checked == s["atom_to_token"].size  # every atom of these entries has a CCD definition
    assert charged[("LYS", "NZ", 1)] > 0 and charged[("ARG", "NH2", 1)] > 0
    if entry_id == "721p-assembly1":
        assert charged[("MG", "MG", 2)] == 2  # one Mg2+ per chain of the dimer
    else:
        assert charged[("HIS", "ND1", 1)] > 0 and charged[("SO4", "O3", -1)] > 0


def test_an_ion_in_a_second_store_gets_its_ccd_charge(budget_store: Path) -> None:
    # 1GBT: thrombin with Ca2+; the file gives no formal charge for it
    import featurecache

    s = _whole_entry(budget_store, "1GBT")
    with featurecache.open_store(budget_store) as reader:
        entry = reader.entry("1GBT")
    labels = _atom_labels(s, entry)
    ca = [a for a, (code, name) in enumerate(labels) if code == "CA" and name == "CA"]
    ccd = _ccd_atoms("CA")
    assert ccd is not None and ca
    assert [int(s["ref_charge"][a]) for a in ca] == [ccd["CA"][0]] * len(ca) == [2] * len(ca)
    assert [int(s["ref_element"][a]) for a in ca] == [20] * len(ca)


def test_atoms_without_a_reference_keep_the_entrys_element_and_charge(client_reader: Any) -> None:
    # Without reference features (a source without a component table) the entry's own values stay.
    entry = client_reader.entry("102m")
    keep = np.arange(len(entry.tokens["restype"]), dtype=np.int64)
    rng = np.random.default_rng(0)
    bare = assemble_sample(entry, keep, rng, ref_features=None)
    rows = np.concatenate(
        [
            np.arange(s, s + c)
            for s, c in zip(entry.tokens["atom_start"], entry.tokens["atom_count"], strict=True)
        ]
    )
    np.testing.assert_array_equal(bare["ref_charge"], entry.atoms["charge"][rows])
    np.testing.assert_array_equal(bare["ref_element"], entry.atoms["element"][rows])
    assert not bare["ref_mask"].any()

    # a reference function that knows positions but not charges (the older contract): entry values
    def positions_only(atoms: Any, tokens: Any) -> dict[str, np.ndarray]:
        n = len(atoms["element"])
        return {"ref_pos": np.ones((n, 3), np.float32), "ref_mask": np.ones(n, bool)}

    partial = assemble_sample(entry, keep, rng, ref_features=positions_only, augment_ref=False)
    np.testing.assert_array_equal(partial["ref_charge"], entry.atoms["charge"][rows])
    assert partial["ref_mask"].all()
