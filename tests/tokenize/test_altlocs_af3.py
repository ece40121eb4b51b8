"""Altlocs and microheterogeneity resolved as AF3's ``ResolveMmcifAltLocs`` (a review's findings R20 #2, #3).

AF3's rule, applied by hand below to the numbers of each edited file:

- two residue types at one position (microheterogeneity): the one whose altlocs have the higher
  occupancy (per altloc the mean over its atoms, summed); before, the first listed was kept;
- a residue whose atoms all have an altloc: the letter with the highest mean occupancy, and a name
  that letter lacks keeps the atom the file has under another letter; before, one letter was chosen
  for the residue and an atom modelled only under another letter was lost (``is_present`` False);
- a residue with atoms both with and without altlocs: each atom name keeps its altloc of highest
  occupancy (ties: the alphabetically first letter).

Inputs are real files with occupancies, altloc letters or lines edited in the test (``tmp_path``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gemmi
import numpy as np

from featurecache.const import PROTEIN_ONE_LETTER, PROTEIN_RESIDUES, decode_atom_name, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import STRUCTURES

_COLS = ["label_asym_id", "label_seq_id", "label_comp_id", "label_atom_id", "label_alt_id", "occupancy"]


def _edit_atoms(
    src: Path, out: Path, chain: str, seq: str, edit: Callable[[str, str, str], tuple[str, str] | None]
) -> None:
    """Write ``src`` to ``out`` with ``edit(comp, atom, altloc)`` applied to each ``_atom_site`` row of
    residue ``seq`` of label chain ``chain``: it returns ``(altloc, occupancy)`` to write, or None
    to remove the row."""
    doc = gemmi.cif.read(str(src))
    table = doc.sole_block().find("_atom_site.", _COLS)
    for i in reversed(range(len(table))):
        row = table[i]
        if row[0] != chain or row[1] != seq:
            continue
        new = edit(row[2], row[3], row[4])
        if new is None:
            table.remove_row(i)
        else:
            row[4], row[5] = new
    doc.write_file(str(out))


def _file_atoms(path: Path, chain: str, seq: str) -> dict[tuple[str, str, str], tuple[float, float, float]]:
    """(comp, atom, altloc) -> coordinates of the residue's atoms, read from the file's table."""
    block = gemmi.cif.read(str(path)).sole_block()
    table = block.find("_atom_site.", [*_COLS, "Cartn_x", "Cartn_y", "Cartn_z"])
    return {
        (r[2], r[3], r[4]): (float(r[6]), float(r[7]), float(r[8]))
        for r in table
        if r[0] == chain and r[1] == seq
    }


def _residue_atoms(
    s: Structure, chain: str, residue_index: int
) -> tuple[str, dict[str, tuple[bool, np.ndarray]]]:
    """(residue name, atom name -> (is_present, coordinates)) of one standard residue's token."""
    (c,) = [c for c in s.chains if c.label_id == chain]
    tok = s.tokens[c.token_start : c.token_start + c.token_count]
    (t,) = tok[tok["residue_index"] == residue_index]
    atoms = s.atoms[int(t["atom_start"]) : int(t["atom_start"]) + int(t["atom_count"])]
    out = {decode_atom_name(a["name"]): (bool(a["is_present"]), a["coords"]) for a in atoms}
    assert len(out) == len(atoms)  # one atom per name
    return decode_res_name(t["res_name"]), out


def test_microheterogeneity_keeps_the_residue_of_highest_occupancy(tmp_path: Path) -> None:
    """3JQH A4: PRO (altloc A) and SER (altloc B), 0.83 / 0.17 in the file; swapped here. SER's
    altloc B now has mean occupancy 0.83 > PRO's 0.17: the residue is SER, its atoms the file's
    SER atoms, and the chain's sequence (the MSA query) reads S at position 4."""
    src = STRUCTURES / "3JQH.cif"
    file_atoms = _file_atoms(src, "A", "4")
    assert {(c, alt) for c, _, alt in file_atoms} == {("PRO", "A"), ("SER", "B")}
    out = tmp_path / "3JQH_micro.cif"
    _edit_atoms(src, out, "A", "4", lambda comp, atom, alt: (alt, "0.17" if comp == "PRO" else "0.83"))
    s = featurize_bytes(out.read_bytes(), out.name, "3jqh")
    name, atoms = _residue_atoms(s, "A", 4)
    assert name == "SER"
    for (comp, atom, _), xyz in file_atoms.items():
        if comp == "SER":
            present, coords = atoms[atom]
            assert present
            np.testing.assert_allclose(coords, xyz, atol=1e-3)
    (chain,) = [c for c in s.chains if c.label_id == "A"]
    assert chain.sequence[3] == PROTEIN_ONE_LETTER[PROTEIN_RESIDUES.index("SER")]
    # the file as deposited: PRO has the higher occupancy and stays
    s = featurize_bytes(src.read_bytes(), src.name, "3jqh")
    assert _residue_atoms(s, "A", 4)[0] == "PRO"
    assert next(c for c in s.chains if c.label_id == "A").sequence[3] == "P"


def test_an_atom_only_under_other_altlocs_is_kept_in_a_partly_split_residue(tmp_path: Path) -> None:
    """4zey A64 LYS: N, C, O without altloc; CA..NZ under A and B at 0.50 each. Edited: A 0.60 /
    B 0.40, CD only under B, CE and NZ under C (0.60) / D (0.40). Per atom name the highest
    occupancy: CA, CB, CG from A; CD from B (its only copy); CE, NZ from C."""
    src = STRUCTURES / "4zey.cif"
    out = tmp_path / "4zey_alt.cif"

    def edit(comp: str, atom: str, alt: str) -> tuple[str, str] | None:
        if alt not in ("A", "B"):
            return (alt, "1.00")
        if atom == "CD" and alt == "A":
            return None
        letter = {"A": "C", "B": "D"}[alt] if atom in ("CE", "NZ") else alt
        return (letter, "0.60" if alt == "A" else "0.40")

    _edit_atoms(src, out, "A", "64", edit)
    file_atoms = _file_atoms(out, "A", "64")
    expected = {
        "N": ".",
        "C": ".",
        "O": ".",
        "CA": "A",
        "CB": "A",
        "CG": "A",
        "CD": "B",
        "CE": "C",
        "NZ": "C",
    }
    assert {(atom, alt) for _, atom, alt in file_atoms} >= set(expected.items())
    s = featurize_bytes(out.read_bytes(), out.name, "4zey")
    name, atoms = _residue_atoms(s, "A", 64)
    assert name == "LYS"
    for atom, alt in expected.items():
        present, coords = atoms[atom]
        assert present, atom
        np.testing.assert_allclose(coords, file_atoms[("LYS", atom, alt)], atol=1e-3, err_msg=atom)


def test_a_wholly_split_residue_takes_its_best_altloc_and_keeps_atoms_it_lacks(tmp_path: Path) -> None:
    """5i55 A12 LYS: every atom under A and B at 0.50. Edited: A 0.40 / B 0.60, NZ only under A.
    B has the higher mean occupancy: every atom from B, NZ (which B lacks) from A."""
    src = STRUCTURES / "5i55.cif"
    out = tmp_path / "5i55_alt.cif"

    def edit(comp: str, atom: str, alt: str) -> tuple[str, str] | None:
        if atom == "NZ" and alt == "B":
            return None
        return (alt, "0.40" if alt == "A" else "0.60")

    _edit_atoms(src, out, "A", "12", edit)
    file_atoms = _file_atoms(out, "A", "12")
    assert {alt for _, _, alt in file_atoms} == {"A", "B"}
    s = featurize_bytes(out.read_bytes(), out.name, "5i55")
    name, atoms = _residue_atoms(s, "A", 12)
    assert name == "LYS"
    for atom in ("N", "CA", "C", "O", "CB", "CG", "CD", "CE", "NZ"):
        present, coords = atoms[atom]
        assert present, atom
        alt = "A" if atom == "NZ" else "B"
        np.testing.assert_allclose(coords, file_atoms[("LYS", atom, alt)], atol=1e-3, err_msg=atom)
