"""``_struct_conn`` loops with only auth columns (no ``id``/``label_comp_id``) are read, not lost.

gemmi 0.7.5 skips such loops entirely (``st.connections`` is empty), so covalent polymer–ligand
bonds of assembly files went missing: 209d-assembly1 (actinomycin's THR–PXA links) and
7a4d-assembly1 (ACE/NH2 caps). Expected rows are counted with ``gemmi.cif`` from the files, and
expected bonded atoms are located with gemmi's own structure, not with our code.
"""

from __future__ import annotations

import gemmi
import numpy as np
import pytest

from featurecache.featurize.entry import featurize_bytes
from featurecache.parse.structure import _parse_structure
from tests.conftest import STRUCTURES
from tests.tokenize.test_polymer_caps import ace_as_own_subchain

#: file -> residue names the file's covale rows link to a polymer residue. In both files these are
#: residues of the peptide itself (their label_asym_id is the peptide's): 209d's PXA between THR 1
#: and THR 7, 7a4d's ACE / NH2 caps at its ends. AF3 keeps them in the chain (per-atom tokens), so
#: their links are polymer–polymer, not token bonds (SI Table 5; AF3's ``clean_structure(
#: remove_polymer_polymer_bonds=True)``). A polymer–ligand row comes from 7a4d with chain E's ACE
#: moved into a non-polymer subchain of its own (``ace_as_own_subchain``).
AUTH_ONLY = {"209d-assembly1.cif": {"PXA"}, "7a4d-assembly1.cif": {"ACE", "NH2"}}


def _rows(name: str) -> list[dict[str, str | None]]:
    block = gemmi.cif.read(str(STRUCTURES / name)).sole_block()
    table = block.get_mmcif_category("_struct_conn.")
    n = len(next(iter(table.values())))
    return [{tag: values[i] for tag, values in table.items()} for i in range(n)]


def _partner_xyz(st: gemmi.Structure, row: dict[str, str | None], k: int) -> np.ndarray:
    """Coordinates of partner ``k`` of a row, found by walking gemmi's first model."""
    for ch in st[0]:
        if ch.name != row[f"ptnr{k}_auth_asym_id"]:
            continue
        for res in ch:
            if str(res.seqid.num) == row[f"ptnr{k}_auth_seq_id"] and res.name == row[f"ptnr{k}_auth_comp_id"]:
                a = res.find_atom(str(row[f"ptnr{k}_label_atom_id"]), "*")
                assert a is not None
                return np.array([a.pos.x, a.pos.y, a.pos.z])
    raise AssertionError(f"partner {k} of {row} not in the file")


@pytest.mark.parametrize("name", sorted(AUTH_ONLY))
def test_every_row_becomes_a_connection(name: str) -> None:
    rows = _rows(name)
    assert "id" not in rows[0]  # the premise: no label/id columns …
    assert len(gemmi.read_structure(str(STRUCTURES / name)).connections) == 0  # … so gemmi reads none
    raw = _parse_structure((STRUCTURES / name).read_bytes(), name)
    conns = raw.structure.connections
    assert len(conns) == len(rows)
    covale = [c for c in conns if c.type == gemmi.ConnectionType.Covale]
    assert len(covale) == sum(1 for r in rows if r["conn_type_id"] == "covale")
    for c in conns:  # each partner resolves to an atom of the model
        assert raw.structure[0].find_cra(c.partner1).atom is not None
        assert raw.structure[0].find_cra(c.partner2).atom is not None
    assert raw.warnings == ()


def test_a_covalent_polymer_ligand_row_becomes_a_token_bond() -> None:
    name = "7a4d-assembly1.cif"
    st = gemmi.read_structure(str(STRUCTURES / name))  # coordinates and auth ids as in the edit
    linked = [
        r
        for r in _rows(name)
        if r["conn_type_id"] == "covale"
        and r["ptnr1_auth_comp_id"] == "ACE"
        and r["ptnr1_auth_asym_id"] == "E"
    ]
    assert len(linked) == 1  # ACE 1 C–LEU 2 N of chain E
    text = ace_as_own_subchain((STRUCTURES / name).read_text())
    s = featurize_bytes(text.encode(), name, name)
    asym = s.tokens["asym_id"]
    xyz = s.atoms["coords"].astype(np.float64)
    inter = s.bonds[asym[s.bonds["token_i"]] != asym[s.bonds["token_j"]]]
    for row in linked:
        p1, p2 = _partner_xyz(st, row, 1), _partner_xyz(st, row, 2)
        hits = [
            b
            for b in inter
            if {tuple(np.round(xyz[b["atom_i"]], 3)), tuple(np.round(xyz[b["atom_j"]], 3))}
            == {tuple(np.round(p1, 3)), tuple(np.round(p2, 3))}
        ]
        assert len(hits) == 1, row


@pytest.mark.parametrize(("name", "n_rows"), [("209d-assembly1.cif", 2), ("7a4d-assembly1.cif", 3)])
def test_a_residue_linked_inside_its_peptide_is_in_the_chain_and_no_token_bond(
    name: str, n_rows: int
) -> None:
    """209d's THR1 N–PXA6 C0 and PXA6 C0'–THR7 N rows link residues of one peptide (the file's
    label_asym_id C for all three), and so do 7a4d's ACE1 C–LEU2 N (E, F) and LEU41 C–NH2 42 N (E)
    (label_asym_id E / F for cap and LEU alike): the linked residue's tokens are in that chain, and
    no token bond joins it to its neighbour (polymer–polymer bonds are not token bonds, SI Table 5)."""
    st = gemmi.read_structure(str(STRUCTURES / name))
    rows = [r for r in _rows(name) if r["conn_type_id"] == "covale"
            and {r["ptnr1_auth_comp_id"], r["ptnr2_auth_comp_id"]} & AUTH_ONLY[name]]  # fmt: skip
    assert len(rows) == n_rows
    s = featurize_bytes((STRUCTURES / name).read_bytes(), name, name)
    xyz = s.atoms["coords"].astype(np.float64)
    token_of_atom = s.atoms["token_index"]
    asym = s.tokens["asym_id"]
    bonded = {frozenset((tuple(np.round(xyz[b["atom_i"]], 3)), tuple(np.round(xyz[b["atom_j"]], 3))))
              for b in s.bonds}  # fmt: skip
    for row in rows:
        p1, p2 = _partner_xyz(st, row, 1), _partner_xyz(st, row, 2)
        atoms = [int(np.flatnonzero(np.abs(xyz - p).sum(1) < 1e-3)[0]) for p in (p1, p2)]
        assert asym[token_of_atom[atoms[0]]] == asym[token_of_atom[atoms[1]]], row  # one chain
        assert frozenset((tuple(np.round(p1, 3)), tuple(np.round(p2, 3)))) not in bonded, row


def _edit_209d(old: str, new: str) -> bytes:
    text = (STRUCTURES / "209d-assembly1.cif").read_text()
    assert text.count(old) == 1
    return text.replace(old, new).encode()


def test_unresolvable_rows_are_warnings_not_errors() -> None:
    # row 7: PXA 6 C0' -> an atom name PXA does not have; row 3 loses its residue number
    data = _edit_209d("6  PXA C 'C0'' ? 7  THR C N", "6  PXA C ZZ9 ? 7  THR C N")
    data = data.replace(b"1  THR C N     ? 6  PXA C C0 ", b"?  THR C N     ? 6  PXA C C0 ")
    s = featurize_bytes(data, "209d-assembly1.cif", "209d")
    problems = [w for w in s.parse_warnings if w.startswith("_struct_conn")]  # the parser's (stage parse)
    assert len(problems) == 2
    assert any("row 7" in w and "ZZ9" in w for w in problems)
    assert any("row 3" in w for w in problems)
    asym = s.tokens["asym_id"]
    assert not (asym[s.bonds["token_i"]] != asym[s.bonds["token_j"]]).any()  # both THR–PXA links gone
    raw = _parse_structure(data, "209d-assembly1.cif")
    assert len(raw.structure.connections) == len(_rows("209d-assembly1.cif")) - 2


def test_labelled_loops_are_left_to_gemmi() -> None:
    name = "1GBT.cif"  # a full _struct_conn loop: gemmi reads every row, nothing is added twice
    rows = _rows(name)
    raw = _parse_structure((STRUCTURES / name).read_bytes(), name)
    assert len(gemmi.read_structure(str(STRUCTURES / name)).connections) == len(rows)
    assert len(raw.structure.connections) == len(rows)
