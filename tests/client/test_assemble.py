"""What a sample says about its atoms, checked against the CCD and the structure files as gemmi
reads them: reference charges / elements (AF3 Table 5) and distogram representative atoms (§4.4)."""

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
from featurecache.const import RESTYPES, decode_atom_name, decode_res_name
from tests.conftest import CCD, STRUCTURES


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
        # (its sulfate, whose O3 the CCD gives -1, is a crystallization aid: removed since featurizer 0.8.0)
        assert charged[("HIS", "ND1", 1)] > 0


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


# ------------------------------------------------------------------------ representative atoms
def _rule(res_name: str) -> str:
    """AF3 supplement §4.4, written out here: Cβ (Cα for glycine), C4 purines, C2 pyrimidines."""
    if res_name == "GLY":
        return "CA"
    if res_name in ("A", "G", "DA", "DG"):
        return "C4"
    if res_name in ("C", "U", "DC", "DT"):
        return "C2"
    return "CB"


ResKey = tuple[str, str, str]  # gemmi chain name, seqid, residue name


def _gemmi_atoms(
    path: Path,
) -> tuple[dict[tuple[int, int, int], list[tuple[ResKey, str]]], dict[ResKey, set[str]]]:
    """gemmi's reading of the file, model 1: coordinates (mÅ) → [(residue, atom name)] over every
    atom (all altlocs), and residue → the names of its atoms."""
    st = gemmi.read_structure(str(path))
    by_xyz: dict[tuple[int, int, int], list[tuple[ResKey, str]]] = {}
    names: dict[ResKey, set[str]] = {}
    for chain in st[0]:
        for res in chain:
            key = (chain.name, str(res.seqid), res.name)
            for atom in res:
                by_xyz.setdefault(_mA(np.array([atom.pos.x, atom.pos.y, atom.pos.z])), []).append(
                    (key, atom.name)
                )
                names.setdefault(key, set()).add(atom.name)
    return by_xyz, names


def _mA(x: np.ndarray) -> tuple[int, int, int]:
    return (round(float(x[0]) * 1000), round(float(x[1]) * 1000), round(float(x[2]) * 1000))


def _check_representatives(s: dict[str, Any], entry: Any, path: Path, seen: Counter[str]) -> None:
    """Every kept standard token's ``rep_coords`` is, in gemmi's reading of ``path``, the atom the
    rule names in a residue of the token's type; a masked one (centre resolved) is a residue gemmi
    finds without that atom. Per-atom tokens: their own atom. Counts what it saw in ``seen``."""
    by_xyz, names = _gemmi_atoms(path)
    tok = entry.tokens
    for k, t in enumerate(s["token_index"].tolist()):
        if not tok["is_standard"][t]:
            assert s["rep_mask"][k] == s["atom_present"][s["atom_to_token"] == k][0]
            if s["rep_mask"][k]:
                np.testing.assert_array_equal(s["rep_coords"][k], s["centre_coords"][k])
            continue
        res = RESTYPES[int(tok["restype"][t])]
        want = _rule(res)
        if s["rep_mask"][k]:
            hits = by_xyz.get(_mA(s["rep_coords"][k]), [])
            assert any(key[2] == res and atom == want for key, atom in hits), (entry.id, t, res, want, hits)
            seen[f"{res}:{want}"] += 1
        elif s["centre_mask"][k]:
            owners = {key for key, _ in by_xyz.get(_mA(s["centre_coords"][k]), []) if key[2] == res}
            assert owners and all(want not in names[key] for key in owners), (entry.id, t, res, owners)
            seen["masked"] += 1


@pytest.mark.parametrize("entry_id", ["102m", "7pzb", "209d-assembly1", "2q2k"])
def test_representative_atoms_follow_af3_rule(client_store: Path, client_reader: Any, entry_id: str) -> None:
    s = _whole_entry(client_store, entry_id)
    entry = client_reader.entry(entry_id)
    path = next(p for p in STRUCTURES.iterdir() if p.name.split(".")[0] == entry_id)
    seen: Counter[str] = Counter()
    _check_representatives(s, entry, path, seen)
    # the representative atom is not the centre atom (Cα / C1′) for non-glycine residues
    std = entry.tokens["is_standard"][s["token_index"]].astype(bool)
    gly = entry.tokens["restype"][s["token_index"]] == RESTYPES.index("GLY")
    both = std & ~gly & s["rep_mask"] & s["centre_mask"]
    assert both.any() and not np.any(np.all(s["rep_coords"][both] == s["centre_coords"][both], axis=1))
    if entry_id == "102m":
        assert seen["GLY:CA"] > 0 and seen["LYS:CB"] > 0
    else:
        assert seen["DA:C4"] + seen["DG:C4"] > 0 and seen["DC:C2"] + seen["DT:C2"] > 0


def test_representative_atoms_of_rna_follow_af3_rule(budget_store: Path) -> None:
    import featurecache

    with featurecache.open_store(budget_store) as reader:
        entry = reader.entry("1ffk")
        ds = FeatureDataset(budget_store, crop_size=384, workers=1)
        seen: Counter[str] = Counter()
        try:
            for i in range(3):
                s = ds.job(SampleKey(i, 0, i, "1ffk"))
                _check_representatives(s, entry, STRUCTURES / "1ffk.cif.gz", seen)
        finally:
            ds.close()
    assert seen["A:C4"] + seen["G:C4"] > 0 and seen["C:C2"] + seen["U:C2"] > 0


def test_a_residue_without_its_representative_atom_is_masked(client_reader: Any) -> None:
    # Gemmi's own reading: the polymer residues of standard type whose rule atom is absent from the
    # file although their Cα / C1′ is there. Each must be masked; no other resolved token is.
    # 721p: ALA 122 of both chains has a Cα but no Cβ in the file
    n_masked = 0
    for entry_id, fname in (
        ("721p-assembly1", "721p-assembly1.cif"),
        ("102m", "102m.cif"),
        ("7pzb", "7pzb.pdb"),
    ):
        entry = client_reader.entry(entry_id)
        keep = np.arange(len(entry.tokens["restype"]), dtype=np.int64)
        s = assemble_sample(entry, keep, np.random.default_rng(0))
        _, names = _gemmi_atoms(STRUCTURES / fname)
        absent = [
            key for key, atoms in names.items()
            if key[2] in RESTYPES[:29] and key[2] != "UNK" and _rule(key[2]) not in atoms and atoms & {"CA", "C1'"}
        ]  # fmt: skip
        std = entry.tokens["is_standard"].astype(bool) & s["centre_mask"]
        assert int((std & ~s["rep_mask"]).sum()) == len(absent), (entry_id, absent)
        n_masked += len(absent)
    assert n_masked == 2
