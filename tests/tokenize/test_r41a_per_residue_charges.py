"""A residue's formal charges are the file's where it states a charge for any of its atoms, else its
definition's: decided per residue, not per atom (review R41a s51 #1).

Most writers, gemmi's ``write_pdb`` / ``make_mmcif_document`` among them, write a formal charge only
on the charged atoms and leave the others blank (PDB columns 79-80) or ``?`` (mmCIF). Per atom
(featurizer 0.11.0 before this fix) those blanks were "unstated" and took the CCD's charge, even where
the file had put the residue's charge on another atom: a gemmi-written 7DDO with ARG NH2 +1 stored +2
for every arginine the NH1/NH2 swap flipped (the stated +1 moved to NH1, NH2 took the CCD's +1), 102m
with HIS NE2 +1 stored ND1 +1 beside it. A residue whose file states nothing still takes the
definition's charges, resolved atoms and absent ones alike.

Real files of the corpus, charged and written by gemmi (the writer the review names); expected
charges from the file as written (its text read back) and from gemmi's reading of the CCD's files
(``_chem_comp_atom.charge``), never from the package's own definitions.
"""

from __future__ import annotations

from collections import defaultdict

import gemmi
import numpy as np
import pytest

from featurecache.const import decode_atom_name, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import STRUCTURES
from tests.tokenize.test_r40a_unstated_charges import _ccd_charges, _component_atoms


def _featurize(data: bytes, name: str) -> Structure:
    return featurize_bytes(data, name, name.split(".")[0], component_atoms=_component_atoms())


def _residues(s: Structure, res_name: str) -> dict[tuple[int, int], dict[str, tuple[bool, int]]]:
    """(asym_id, residue_index) -> atom name -> (is_present, charge) of every residue ``res_name``."""
    out: dict[tuple[int, int], dict[str, tuple[bool, int]]] = defaultdict(dict)
    for a in s.atoms:
        t = s.tokens[int(a["token_index"])]
        if decode_res_name(t["res_name"]) == res_name:
            key = (int(t["asym_id"]), int(t["residue_index"]))
            out[key][decode_atom_name(a["name"])] = (bool(a["is_present"]), int(a["charge"]))
    return dict(out)


def _charge_at(s: Structure, pos: gemmi.Position) -> int:
    """The stored charge of the one resolved atom at ``pos`` (an atom's position in the file)."""
    xyz = np.asarray([pos.x, pos.y, pos.z])
    hit = np.flatnonzero(s.atoms["is_present"] & (np.abs(s.atoms["coords"] - xyz).max(axis=1) < 1e-3))
    assert len(hit) == 1, (pos, hit)
    return int(s.atoms["charge"][hit[0]])


def _written(st: gemmi.Structure, fmt: str) -> bytes:
    """``st`` as gemmi writes it; the premise checked on the text: no charge is written as 0 (a
    blank / ``?`` for every uncharged atom), as the review's files."""
    if fmt == "pdb":
        text = st.make_pdb_string()
        columns = {line[78:80].strip() for line in text.splitlines() if line.startswith(("ATOM", "HETATM"))}
        assert "" in columns and not any(c.startswith("0") for c in columns), columns
    else:
        text = st.make_mmcif_document().as_string()
        block = gemmi.cif.read_string(text).sole_block()
        values = set(block.find_values("_atom_site.pdbx_formal_charge"))
        assert "?" in values and "0" not in values, values
    return text.encode()


def _stated(st: gemmi.Structure) -> dict[tuple[str, str, str], int]:
    """(chain, residue number, atom name) -> charge of every non-zero charge of ``st``'s first model."""
    return {(ch.name, str(r.seqid), a.name): int(a.charge) for ch in st[0] for r in ch for a in r if a.charge}


@pytest.mark.parametrize("fmt", ["pdb", "cif"])
def test_gemmi_written_7ddo_with_arg_nh2_charged_has_one_plus_one_per_arginine(fmt: str) -> None:
    st = gemmi.read_structure(str(STRUCTURES / "7DDO.pdb"))
    file_nh2: list[gemmi.Position] = []
    swapped = 0
    for ch in st[0]:
        for r in ch:
            for a in r:
                if (r.name, a.name) in (("ARG", "NH2"), ("LYS", "NZ")):
                    a.charge = 1
                if (r.name, a.name) == ("ZN", "ZN"):
                    a.charge = 2
            if r.name == "ARG":
                pos = {a.name: a.pos for a in r}
                if {"CD", "NH1", "NH2"} <= set(pos):
                    file_nh2.append(pos["NH2"])
                    swapped += pos["NH1"].dist(pos["CD"]) > pos["NH2"].dist(pos["CD"])
    assert swapped > 3 and len(file_nh2) > 20  # the premise: arginines the NH1/NH2 swap flips
    s = _featurize(_written(st, fmt), f"7DDO.{fmt}")
    args = _residues(s, "ARG")
    assert len(args) >= len(file_nh2)
    for key, atoms in args.items():
        charged = sorted(q for _, q in atoms.values() if q)
        assert charged == [1], (key, atoms)  # one +1, where the file put it: not +2 after the swap
    for pos in file_nh2:  # the +1 stays on the atom the file charged (named NH1 where swapped)
        assert _charge_at(s, pos) == 1
    flipped = [k for k, atoms in args.items() if atoms["NH1"] == (True, 1)]
    assert len(flipped) == swapped
    for key, atoms in _residues(s, "LYS").items():
        assert {n: q for n, (_, q) in atoms.items() if q} == {"NZ": 1}, key
    assert [q for atoms in _residues(s, "ZN").values() for _, q in atoms.values()] == [2]
    # HIS: the file states nothing for any of them, so each takes the CCD's charges (ND1 +1)
    his = _residues(s, "HIS")
    assert his and _ccd_charges("HIS")["ND1"] == 1
    for atoms in his.values():
        assert {n: q for n, (_, q) in atoms.items()} == {n: _ccd_charges("HIS")[n] for n in atoms}


def test_gemmi_written_102m_with_his_ne2_charged_keeps_nd1_zero() -> None:
    """HIS NE2 +1 on every histidine (one with its ND1 taken out), one ARG charged on NH1 with its
    NH2 taken out; LYS and the other ARGs state nothing, one LYS lacks its NZ."""
    st = gemmi.read_structure(str(STRUCTURES / "102m.cif"))
    his_without_nd1 = arg_without_nh2 = lys_without_nz = None
    for ch in st[0]:
        for r in ch:
            if r.name == "HIS":
                r["NE2"][0].charge = 1
                if his_without_nd1 is None:
                    his_without_nd1 = str(r.seqid)
                    r.remove_atom("ND1", "\0")
            elif r.name == "ARG" and arg_without_nh2 is None:
                arg_without_nh2 = str(r.seqid)
                r["NH1"][0].charge = 1
                r.remove_atom("NH2", "\0")
            elif r.name == "LYS" and lys_without_nz is None:
                lys_without_nz = str(r.seqid)
                r.remove_atom("NZ", "\0")
    stated = _stated(st)
    assert {(k[2], q) for k, q in stated.items()} == {("NE2", 1), ("NH1", 1)}
    s = _featurize(_written(st, "cif"), "102m.cif")

    his = _residues(s, "HIS")
    assert len(his) == 11
    for key, atoms in his.items():
        assert atoms["NE2"] == (True, 1), key
        # not the CCD's +1 where the file states NE2 +1 (per atom it was: the HIS +2)
        assert atoms["ND1"][1] == 0, key
        assert sum(q for _, q in atoms.values()) == 1, key
    assert sorted(atoms["ND1"][0] for atoms in his.values()) == [False] + [True] * 10  # absent too: 0

    args = _residues(s, "ARG")
    assert len(args) == 4
    ours = [key for key, atoms in args.items() if atoms["NH1"] == (True, 1)]
    assert len(ours) == 1
    assert args[ours[0]]["NH2"] == (False, 0)  # the file's +1 on NH1 is the residue's: not +2
    assert sum(q for _, q in args[ours[0]].values()) == 1
    # the ARGs and LYSs whose file states nothing: the CCD's charges, resolved atoms and absent alike
    for res in ("ARG", "LYS"):
        for key, atoms in _residues(s, res).items():
            if res == "ARG" and key == ours[0]:
                continue
            assert {n: q for n, (_, q) in atoms.items()} == {n: _ccd_charges(res)[n] for n in atoms}, key
    nz = [atoms["NZ"] for atoms in _residues(s, "LYS").values()]
    assert sorted(nz) == [(False, 1)] + [(True, 1)] * (len(nz) - 1) and len(nz) > 10


def test_a_ligand_instance_that_states_charges_keeps_them_and_the_others_take_the_ccds() -> None:
    """5kc1's 18 NO3 (CCD: N +1, O2 -1, O3 -1): one instance written by gemmi with N +1 and O1 -1
    (the file's choice of oxygen) and nothing else; the other 17 state nothing."""
    st = gemmi.read_structure(str(STRUCTURES / "5kc1.cif"))
    first = None
    for ch in st[0]:
        for r in ch:
            if r.name == "NO3" and first is None:
                first = r["N"][0].pos
                r["N"][0].charge = 1
                r["O1"][0].charge = -1
    assert first is not None
    ccd = _ccd_charges("NO3")
    assert ccd == {"N": 1, "O1": 0, "O2": -1, "O3": -1}
    s = _featurize(_written(st, "cif"), "5kc1.cif")
    no3 = _residues(s, "NO3")
    assert len(no3) == 18
    ours = [atoms for atoms in no3.values() if atoms["O1"][1] == -1]
    assert len(ours) == 1
    assert {n: q for n, (_, q) in ours[0].items()} == {"N": 1, "O1": -1, "O2": 0, "O3": 0}
    assert _charge_at(s, first) == 1
    for atoms in no3.values():
        if atoms is not ours[0]:
            assert {n: q for n, (_, q) in atoms.items()} == ccd
