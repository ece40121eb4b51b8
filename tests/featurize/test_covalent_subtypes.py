"""``covale_base`` / ``covale_phosphate`` / ``covale_sugar`` connections are token bonds like ``covale``.

The PDBx dictionary (``_struct_conn_type.id``) lists these covalent subtypes besides ``covale``;
gemmi 0.7.5 reads them as ``ConnectionType.Unknown``. No file of the real corpus uses them (grep of
every structure file), so the inputs are real files with one ``conn_type_id`` edited:

* 1GBT: ``covale1`` is the trypsin SER 195 OG – GBS 704 CD acyl-enzyme bond (polymer–ligand);
* 7a4d-assembly1: an auth-only ``_struct_conn`` loop (read by our fallback, not by gemmi) whose
  ``covale`` rows link the ACE / NH2 caps to the end residues of chains E and F. The caps are
  residues of their peptide (label_asym_id E / F, as AF3 keeps them), so these are polymer–polymer
  links; with chain E's ACE moved into a non-polymer subchain of its own
  (``tests.tokenize.test_polymer_caps.ace_as_own_subchain``) its row is a polymer–ligand bond.
  209d's THR–PXA rows do not serve either: PXA lies inside its peptide (polymer–polymer);
* 2q2k: ``covale`` rows link DA/5IU residues inside a DNA chain (polymer–polymer: never token bonds).

Expected atoms come from gemmi's own reading of the edited text (partner coordinates), not from
our parser.
"""

from __future__ import annotations

import gemmi
import numpy as np
import pytest

from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import STRUCTURES
from tests.tokenize.test_polymer_caps import ace_as_own_subchain

SUBTYPES = ("covale_base", "covale_phosphate", "covale_sugar")
CUT = 2.4  # Å, AF3 Table 5


def _edited(name: str, kind: str, rows: set[str] | None = None) -> str:
    """The file's text with ``conn_type_id`` set to ``kind`` on the ``covale`` rows (or ids ``rows``)."""
    doc = gemmi.cif.read(str(STRUCTURES / name))
    changed = 0
    for row in doc.sole_block().find("_struct_conn.", ["conn_type_id", "?id"]):
        if row.str(0) == "covale" and (rows is None or (row.has(1) and row.str(1) in rows)):
            row[0] = kind
            changed += 1
    assert changed > 0
    return doc.as_string()


def _shift_residue(text: str, comp: str, dx: float) -> str:
    doc = gemmi.cif.read_string(text)
    for row in doc.sole_block().find("_atom_site.", ["label_comp_id", "Cartn_x"]):
        if row.str(0) == comp:
            row[1] = f"{float(row[1]) + dx:.3f}"
    return doc.as_string()


def _gemmi_partner_pairs(text: str, kind: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Row index → coordinates of both partners, for every ``kind`` row, as gemmi finds them.

    gemmi reads the rows of a labelled loop (as ``Unknown``); for an auth-only loop it reads none,
    and the partners are looked up by auth chain / number / residue / atom in gemmi's model.
    """
    block = gemmi.cif.read_string(text).sole_block()
    st = gemmi.make_structure_from_block(block)
    table = block.get_mmcif_category("_struct_conn.")
    n = len(table["conn_type_id"])
    pairs = {}
    for i in range(n):
        if table["conn_type_id"][i] != kind:
            continue
        ends = []
        for k in (1, 2):
            chain, num, comp = (table[f"ptnr{k}_auth_{t}"][i] for t in ("asym_id", "seq_id", "comp_id"))
            atom_name = (table.get(f"ptnr{k}_auth_atom_id") or table[f"ptnr{k}_label_atom_id"])[i]
            found = [
                a
                for ch in st[0]
                if ch.name == chain
                for res in ch
                if str(res.seqid.num) == num and res.name == comp
                for a in res
                if a.name == atom_name
            ]
            assert found, f"partner {k} of row {i} not in gemmi's model"
            ends.append(np.array([found[0].pos.x, found[0].pos.y, found[0].pos.z]))
        pairs[i] = (ends[0], ends[1])
    return pairs


def _bonded(s: Structure, p1: np.ndarray, p2: np.ndarray) -> bool:
    xyz = s.atoms["coords"].astype(np.float64)
    want = {tuple(np.round(p1, 3)), tuple(np.round(p2, 3))}
    return any(
        {tuple(np.round(xyz[b["atom_i"]], 3)), tuple(np.round(xyz[b["atom_j"]], 3))} == want for b in s.bonds
    )


def _bond_rows(s: Structure) -> list[tuple[int, ...]]:
    return sorted(tuple(int(v) for v in b) for b in s.bonds)


@pytest.mark.parametrize("kind", SUBTYPES)
def test_subtype_polymer_ligand_bond_is_a_token_bond(kind: str) -> None:
    text = _edited("1GBT.cif", kind, {"covale1"})
    st = gemmi.make_structure_from_block(gemmi.cif.read_string(text).sole_block())
    assert [c.type for c in st.connections if c.name == "covale1"] == [gemmi.ConnectionType.Unknown]
    ((og, cd),) = _gemmi_partner_pairs(text, kind).values()
    assert np.linalg.norm(og - cd) < CUT
    s = featurize_bytes(text.encode(), "1GBT.cif", "1GBT")
    assert _bonded(s, og, cd)
    # counted exactly like the covale row it replaced
    original = featurize_bytes((STRUCTURES / "1GBT.cif").read_bytes(), "1GBT.cif", "1GBT")
    assert _bond_rows(s) == _bond_rows(original)


@pytest.mark.parametrize("kind", SUBTYPES)
def test_subtype_bond_longer_than_the_cut_is_dropped(kind: str) -> None:
    text = _shift_residue(_edited("1GBT.cif", kind, {"covale1"}), "GBS", 2.0)
    ((og, cd),) = _gemmi_partner_pairs(text, kind).values()
    assert np.linalg.norm(og - cd) > CUT  # the premise, measured on gemmi's reading
    s = featurize_bytes(text.encode(), "1GBT.cif", "1GBT")
    assert not _bonded(s, og, cd)
    assert len(s.bonds) > 0  # GBS's own bonds are still there


@pytest.mark.parametrize("kind", SUBTYPES)
def test_subtype_rows_of_an_auth_only_loop_are_token_bonds(kind: str) -> None:
    text = ace_as_own_subchain(_edited("7a4d-assembly1.cif", kind))
    assert len(gemmi.make_structure_from_block(gemmi.cif.read_string(text).sole_block()).connections) == 0
    block = gemmi.cif.read_string(text).sole_block()
    table = block.get_mmcif_category("_struct_conn.")
    cap_rows = [
        i
        for i, t in enumerate(table["conn_type_id"])
        if t == kind and {"ACE", "NH2"} & {table["ptnr1_auth_comp_id"][i], table["ptnr2_auth_comp_id"][i]}
    ]
    assert len(cap_rows) == 3  # ACE1 C–LEU2 N (E, F), LEU41 C–NH2 42 N (E)
    ligand_row = [
        i
        for i in cap_rows
        if table["ptnr1_auth_comp_id"][i] == "ACE" and table["ptnr1_auth_asym_id"][i] == "E"
    ]
    assert len(ligand_row) == 1
    s = featurize_bytes(text.encode(), "7a4d-assembly1.cif", "7a4d")
    pairs = _gemmi_partner_pairs(text, kind)
    for i in cap_rows:  # E's ACE (a ligand now) is bonded to LEU 2; the caps inside a chain are not
        assert _bonded(s, *pairs[i]) == (i in ligand_row)
    as_covale = ace_as_own_subchain((STRUCTURES / "7a4d-assembly1.cif").read_text())
    original = featurize_bytes(as_covale.encode(), "7a4d-assembly1.cif", "7a4d")
    assert _bond_rows(s) == _bond_rows(original)


@pytest.mark.parametrize("kind", SUBTYPES)
def test_subtype_polymer_polymer_links_are_not_token_bonds(kind: str) -> None:
    text = _edited("2q2k.cif", kind)
    pairs = _gemmi_partner_pairs(text, kind)
    assert len(pairs) == 4  # DA/5IU O3'–P links inside the DNA chains
    s = featurize_bytes(text.encode(), "2q2k.cif", "2q2k")
    for p1, p2 in pairs.values():
        assert not _bonded(s, p1, p2)
    original = featurize_bytes((STRUCTURES / "2q2k.cif").read_bytes(), "2q2k.cif", "2q2k")
    assert _bond_rows(s) == _bond_rows(original)
