"""AF3 supplement §2.1 clean-ups on real files: MSE becomes MET, arginine NH1/NH2 made unambiguous.

Expectations come from gemmi's reading of the same files (residue counts, atom positions) and
from the CCD's MET definition, never from our own output.
"""

from __future__ import annotations

import gemmi
import numpy as np
import pytest

from featurecache.const import RESTYPE_INDEX, MolType, decode_atom_name, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import CCD, STRUCTURES, removed_aids

#: Corpus files with selenomethionine (1A8O: 4 MSE, 4zey: 3, 5i55: 1) — counted below with gemmi.
MSE_FILES = ["1A8O.cif", "1A8O.pdb", "4zey.cif", "5i55.cif"]
#: Corpus files where the reviewer found NH1 farther from CD than NH2 in some arginines.
ARG_FILES = ["1k1a.cif", "3u8v.cif", "5kc1.cif", "7CFN.cif"]
WATERS = {"HOH", "DOD"}


def _featurize(name: str) -> Structure:
    return featurize_bytes((STRUCTURES / name).read_bytes(), name, name)


def _gemmi(name: str) -> gemmi.Structure:
    st = gemmi.read_structure(str(STRUCTURES / name))
    st.setup_entities()
    return st


def _met_heavy_atoms_from_ccd() -> list[str]:
    """MET heavy atoms minus the leaving OXT, in CCD order, read from the CCD file with gemmi."""
    block = gemmi.cif.read(str(CCD / "MET.cif")).sole_block()
    table = block.find("_chem_comp_atom.", ["atom_id", "type_symbol"])
    return [row.str(0) for row in table if row.str(1) != "H" and row.str(0) != "OXT"]


def _polymer_sequence_count(st: gemmi.Structure, names: set[str]) -> tuple[int, int]:
    """(residues of the polymer entity sequences whose name is in ``names``, all of them)."""
    hits = total = 0
    for ch in st[0]:
        for span in ch.subchains():
            ent = st.get_entity_of(span)
            if ent is not None and ent.entity_type == gemmi.EntityType.Polymer:
                seq = [s.split(",")[0] for s in ent.full_sequence]
                hits += sum(1 for s in seq if s in names)
                total += len(seq)
    return hits, total


def _ligand_heavy_atoms(st: gemmi.Structure) -> int:
    st = st.clone()
    st.remove_hydrogens()
    st.remove_alternative_conformations()
    aids = removed_aids(st)  # an X-ray structure's crystallization aids (AF3 SI Table 9)
    n = 0
    for ch in st[0]:
        for span in ch.subchains():
            ent = st.get_entity_of(span)
            if ent is None or ent.entity_type != gemmi.EntityType.Polymer:
                n += sum(len(r) for r in span if r.name not in WATERS and r.name not in aids)
    return n


@pytest.mark.parametrize("name", MSE_FILES)
def test_mse_is_one_standard_met_token(name: str) -> None:
    st = _gemmi(name)
    n_mse = sum(1 for ch in st[0] for r in ch if r.name == "MSE")
    assert n_mse > 0  # the file really has selenomethionine
    met_or_mse, polymer = _polymer_sequence_count(st, {"MET", "MSE"})
    s = _featurize(name)
    names = [decode_res_name(r) for r in s.tokens["res_name"]]
    assert "MSE" not in names
    met = (s.tokens["restype"] == RESTYPE_INDEX["MET"]) & (s.tokens["mol_type"] == MolType.PROTEIN)
    assert int(met.sum()) == met_or_mse  # every MSE and MET position: one token
    assert s.tokens["is_standard"][met].all()
    assert (s.tokens["atom_count"][met] == 8).all()
    # one token per polymer residue of the entity sequence, one per ligand heavy atom
    assert len(s.tokens) == polymer + _ligand_heavy_atoms(st)
    assert 34 not in set(s.atoms["element"].tolist())  # no selenium left


def test_mse_atoms_keep_the_file_data_under_met_names() -> None:
    name = "1A8O.cif"
    st = _gemmi(name)
    s = _featurize(name)
    want_names = _met_heavy_atoms_from_ccd()
    chain_of = {c.label_id: c for c in s.chains}
    checked = 0
    for ch in st[0]:
        for res in ch:
            if res.name != "MSE":
                continue
            chain = chain_of[res.subchain]
            toks = s.tokens[chain.token_start : chain.token_start + chain.token_count]
            (tok,) = toks[toks["residue_index"] == res.label_seq]
            assert decode_res_name(tok["res_name"]) == "MET"
            atoms = s.atoms[tok["atom_start"] : tok["atom_start"] + tok["atom_count"]]
            names = [decode_atom_name(n) for n in atoms["name"]]
            assert names == want_names
            for a in res:
                stored = atoms[names.index("SD" if a.name == "SE" else a.name)]
                assert stored["is_present"]
                np.testing.assert_allclose(stored["coords"], [a.pos.x, a.pos.y, a.pos.z], atol=1e-3)
                assert stored["occupancy"] == pytest.approx(a.occ)
                assert stored["b_factor"] == pytest.approx(a.b_iso)
                if a.name == "SE":
                    assert stored["element"] == 16  # sulfur, not selenium (34)
            checked += 1
    assert checked == 4  # 1A8O: L151MSE, M185MSE, M214MSE, M215MSE (its entity description)


def _arginines(st: gemmi.Structure) -> list[tuple[gemmi.Residue, str]]:
    """(residue, subchain) of every ARG of the first model with CD, NH1, NH2 and no altlocs on them."""
    out = []
    for ch in st[0]:
        for res in ch:
            if res.name != "ARG" or res.label_seq is None:
                continue
            atoms = [a for a in res if a.name in ("CD", "NH1", "NH2")]
            if len(atoms) == 3 and all(a.altloc == "\0" for a in atoms):
                out.append((res, res.subchain))
    return out


def _pos(res: gemmi.Residue, name: str) -> np.ndarray:
    a = res.find_atom(name, "*")
    return np.array([a.pos.x, a.pos.y, a.pos.z])


@pytest.mark.parametrize("name", ARG_FILES)
def test_arginine_nh1_is_the_nitrogen_closer_to_cd(name: str) -> None:
    st = _gemmi(name)
    s = _featurize(name)
    chain_of = {c.label_id: c for c in s.chains}
    swapped = 0
    args = _arginines(st)
    assert args
    for res, subchain in args:
        cd, nh1, nh2 = _pos(res, "CD"), _pos(res, "NH1"), _pos(res, "NH2")
        file_order = np.linalg.norm(nh1 - cd) <= np.linalg.norm(nh2 - cd)
        near, far = (nh1, nh2) if file_order else (nh2, nh1)
        near_name, far_name = ("NH1", "NH2") if file_order else ("NH2", "NH1")
        swapped += int(not file_order)
        chain = chain_of[subchain]
        toks = s.tokens[chain.token_start : chain.token_start + chain.token_count]
        (tok,) = toks[toks["residue_index"] == res.label_seq]
        atoms = s.atoms[tok["atom_start"] : tok["atom_start"] + tok["atom_count"]]
        names = [decode_atom_name(n) for n in atoms["name"]]
        stored1, stored2 = atoms[names.index("NH1")], atoms[names.index("NH2")]
        np.testing.assert_allclose(stored1["coords"], near, atol=1e-3)
        np.testing.assert_allclose(stored2["coords"], far, atol=1e-3)
        # the B-factor travels with the position
        assert stored1["b_factor"] == pytest.approx(res.find_atom(near_name, "*").b_iso)
        assert stored2["b_factor"] == pytest.approx(res.find_atom(far_name, "*").b_iso)
    assert swapped > 0  # the file has at least one arginine named the other way round
