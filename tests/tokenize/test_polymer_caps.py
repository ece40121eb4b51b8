"""Polymer caps (ACE / NH2) stay in their chain; a residue that is not bonded into it stays a ligand.

7a4d-assembly1 (a rewritten assembly with no entity sequence) puts ACE at label_seq_id 1 of its
peptide chains E and F and NH2 at label_seq_id 42 of chain E, with label_asym_id and
label_entity_id of the peptide, and ``covale`` ``_struct_conn`` rows ACE C–LEU N and LEU C–NH2 N.
AF3 keeps such residues in their polymer chain: the chain is the label_asym_id, ``residue_index``
the residue's ``res_id`` (label_seq_id), one token per atom because they are not standard residues
(``features.tokenizer``: ``flatten_non_standard_residues``), ``aatype`` UNK (``mmcif_names.
fix_non_standard_polymer_res``: the CCD one-letter code of ACE and NH2 is ``?``, so ``UNK``), and
a bond between two residues of polymer chains is not a token bond (``structure_cleaning.
clean_structure(remove_polymer_polymer_bonds=True)``), while a cap's own CCD bonds are
(``RefStructure.compute_features``). Before, the caps became ligand chains
``E_ACE1`` / ``E_NH242`` / ``F_ACE1``, residue_index 1, joined to the peptide by token bonds.

Expected values come from the file itself (``_atom_site`` read with ``gemmi.cif``), the CCD files
and the MSA files, not from the featurizer.
"""

from __future__ import annotations

import gzip
from collections import defaultdict

import gemmi
import numpy as np
import pytest

from featurecache.build.components import component_resolvers
from featurecache.build.msa_stage import omitted_unknowns
from featurecache.const import PROTEIN_RESIDUES, UNK_PROTEIN, MolType
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import CCD, MSAS, STRUCTURES

NAME = "7a4d-assembly1.cif"
CAPS = ("ACE", "NH2")


def _atom_site(text: str) -> dict[tuple[str, int], tuple[str, list[tuple[str, tuple[float, float, float]]]]]:
    """(label_asym_id, label_seq_id) -> (comp, [(atom name, xyz) of heavy atoms]) of model 1."""
    block = gemmi.cif.read_string(text).sole_block()
    cols = ["label_asym_id", "label_seq_id", "label_comp_id", "label_atom_id", "type_symbol",
            "Cartn_x", "Cartn_y", "Cartn_z", "pdbx_PDB_model_num"]  # fmt: skip
    out: dict[tuple[str, int], tuple[str, list[tuple[str, tuple[float, float, float]]]]] = {}
    for row in block.find("_atom_site.", cols):
        if row.str(8) != "1" or row.str(4) in ("H", "D") or row.str(1) in (".", "?"):
            continue
        key = (row.str(0), int(row.str(1)))
        xyz = (float(row.str(5)), float(row.str(6)), float(row.str(7)))
        out.setdefault(key, (row.str(2), []))[1].append((row.str(3), xyz))
    return out


def _chain_residues(text: str, asym: str) -> list[tuple[int, str, int]]:
    """(label_seq_id, comp, heavy atoms) of every residue of ``asym``, in sequence order."""
    return sorted(
        (seq, comp, len(atoms)) for (a, seq), (comp, atoms) in _atom_site(text).items() if a == asym
    )


def _ccd_heavy_atoms(code: str) -> int:
    block = gemmi.cif.read(str(CCD / f"{code}.cif")).sole_block()
    return sum(1 for el in block.find_values("_chem_comp_atom.type_symbol") if el not in ("H", "D"))


def _ccd_one_letter(code: str) -> str:
    return gemmi.cif.read(str(CCD / f"{code}.cif")).sole_block().find_value("_chem_comp.one_letter_code")


def _featurize(text: str, ccd: bool = False) -> Structure:
    kw = {}
    if ccd:
        atoms, bonds = component_resolvers(str(CCD))
        kw = {"component_atoms": atoms, "component_bonds": bonds}
    return featurize_bytes(text.encode(), NAME, "7a4d", **kw)  # type: ignore[arg-type]


def _chain(s: Structure, label: str):  # type: ignore[no-untyped-def]
    (c,) = [c for c in s.chains if c.label_id == label]
    return c, s.tokens[c.token_start : c.token_start + c.token_count]


def _text() -> str:
    return (STRUCTURES / NAME).read_text()


def ace_as_own_subchain(text: str, asym: str = "E") -> str:
    """``text`` with chain ``asym``'s ACE moved into a subchain of its own (label_asym_id G) of a
    new non-polymer entity 7: a ligand bonded to the peptide, as a file would state one."""
    doc = gemmi.cif.read_string(text)
    block = doc.sole_block()
    moved = 0
    for row in block.find(
        "_atom_site.", ["label_comp_id", "label_asym_id", "label_entity_id", "label_seq_id"]
    ):
        if row.str(0) == "ACE" and row.str(1) == asym:
            row[1], row[2], row[3] = "G", "7", "."
            moved += 1
    assert moved == 3
    block.find_mmcif_category("_entity.").append_row(["7", "non-polymer"])
    block.find_mmcif_category("_struct_asym.").append_row(["G", "7"])
    return doc.as_string()


def test_the_premise_read_from_the_file() -> None:
    text = _text()
    block = gemmi.cif.read_string(text).sole_block()
    assert set(block.find_values("_entity.type")) == {"polymer"}  # the file declares no ligand
    assert not list(block.find_values("_entity_poly_seq.mon_id"))  # and no entity sequence
    e, f = _chain_residues(text, "E"), _chain_residues(text, "F")
    assert (e[0][:2], e[-1][:2], f[0][:2], f[-1][:2]) == ((1, "ACE"), (42, "NH2"), (1, "ACE"), (41, "LEU"))
    assert _ccd_one_letter("ACE") == _ccd_one_letter("NH2") == "?"  # AF3: no parent → UNK


@pytest.mark.parametrize("ccd", [False, True], ids=["file-atoms", "ccd"])
def test_caps_stay_in_their_peptide_chain(ccd: bool) -> None:
    text = _text()
    s = _featurize(text, ccd)
    # every chain is one of the file's label_asym_ids: no ligand chain split off
    assert sorted(c.label_id for c in s.chains) == sorted({a for a, _ in _atom_site(text)})
    assert not (s.tokens["mol_type"] == MolType.LIGAND).any()
    for asym in ("E", "F"):
        residues = _chain_residues(text, asym)
        c, tok = _chain(s, asym)
        assert len(c.sequence) == len(residues)
        per_residue = [
            1 if comp in PROTEIN_RESIDUES else (_ccd_heavy_atoms(comp) if ccd else n)
            for _, comp, n in residues
        ]
        expected = np.concatenate(
            [np.full(k, seq) for (seq, _, _), k in zip(residues, per_residue, strict=True)]
        )
        np.testing.assert_array_equal(tok["residue_index"], expected)  # label_seq_id, gaps and all
        assert (tok["mol_type"] == MolType.PROTEIN).all()
        assert (tok["asym_id"] == c.asym_id).all() and (tok["entity_id"] == c.entity_id).all()
        assert (tok["sym_id"] == c.sym_id).all()
        caps = np.isin(tok["residue_index"], [seq for seq, comp, _ in residues if comp in CAPS])
        assert int(caps.sum()) == sum(
            k for (_, comp, _), k in zip(residues, per_residue, strict=True) if comp in CAPS
        )
        assert not tok["is_standard"][caps].any() and tok["is_standard"][~caps].all()
        assert (tok["restype"][caps] == UNK_PROTEIN).all()
        assert [c.sequence[i] for i, (_, comp, _) in enumerate(residues) if comp in CAPS] == ["X"] * int(
            sum(comp in CAPS for _, comp, _ in residues)
        )
    # E has NH2 and F has not: different residue names, so different entities (AF3 keys on them)
    (e, _), (f, _) = _chain(s, "E"), _chain(s, "F")
    assert [r[1] for r in _chain_residues(text, "E")] != [r[1] for r in _chain_residues(text, "F")]
    assert e.entity_id != f.entity_id


def _cap_rows(text: str) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
    """Partner coordinates of the ``covale`` rows that name a cap, located in ``_atom_site``."""
    block = gemmi.cif.read_string(text).sole_block()
    table = block.get_mmcif_category("_struct_conn.")
    by_auth: dict[tuple[str, str, str, str], tuple[float, ...]] = {}
    cols = ["auth_asym_id", "auth_seq_id", "auth_comp_id", "auth_atom_id", "Cartn_x", "Cartn_y", "Cartn_z"]
    for row in block.find("_atom_site.", cols):
        by_auth[(row.str(0), row.str(1), row.str(2), row.str(3))] = tuple(
            float(row.str(i)) for i in (4, 5, 6)
        )
    out = []
    for i, kind in enumerate(table["conn_type_id"]):
        comps = {table["ptnr1_auth_comp_id"][i], table["ptnr2_auth_comp_id"][i]}
        if kind != "covale" or not comps & set(CAPS):
            continue
        ends = [
            by_auth[tuple(table[f"ptnr{k}_{t}"][i] for t in ("auth_asym_id", "auth_seq_id", "auth_comp_id",
                                                            "label_atom_id"))]  # type: ignore[index]
            for k in (1, 2)
        ]  # fmt: skip
        out.append((ends[0], ends[1]))
    return out


def _atom_at(s: Structure, xyz: tuple[float, ...]) -> int:
    (hit,) = np.flatnonzero(np.abs(s.atoms["coords"].astype(np.float64) - np.asarray(xyz)).max(axis=1) < 1e-3)
    return int(hit)


def _bonded_atoms(s: Structure) -> set[frozenset[int]]:
    return {frozenset((int(b["atom_i"]), int(b["atom_j"]))) for b in s.bonds}


@pytest.mark.parametrize("ccd", [False, True], ids=["file-atoms", "ccd"])
def test_cap_links_are_not_token_bonds_but_a_caps_own_bonds_are(ccd: bool) -> None:
    text = _text()
    rows = _cap_rows(text)
    assert len(rows) == 3  # ACE1 C–LEU2 N (E, F), LEU41 C–NH2 42 N (E)
    s = _featurize(text, ccd)
    bonded = _bonded_atoms(s)
    for p1, p2 in rows:
        i, j = _atom_at(s, p1), _atom_at(s, p2)
        ti, tj = s.atoms["token_index"][i], s.atoms["token_index"][j]
        assert s.tokens["asym_id"][ti] == s.tokens["asym_id"][tj]  # one chain
        assert frozenset((i, j)) not in bonded
    # but the ACE caps' own bonds (C–O and C–CH3 of each) are: the caps are per-atom tokens, and
    # AF3's featuriser adds the CCD bond graph of every non-standard residue, a polymer's cap too
    # (``RefStructure.compute_features``, ``intra_ligand_ptm_bonds=True``; review R25d s43 #1 reversed
    # review R11 s39 #3, which had left them out). Without --ccd they are perceived from distances.
    for asym in ("E", "F"):
        atoms = dict(_atom_site(text)[(asym, 1)][1])
        c = _atom_at(s, atoms["C"])
        own = {frozenset((c, _atom_at(s, atoms["O"]))), frozenset((c, _atom_at(s, atoms["CH3"])))}
        assert own <= bonded
        ace = {_atom_at(s, xyz) for xyz in atoms.values()}
        assert len(ace) == 3 and {b for b in bonded if b <= ace} == own  # ACE's CCD: C–O, C–CH3


def _without_struct_conn(text: str) -> str:
    doc = gemmi.cif.read_string(text)
    block = doc.sole_block()
    block.find_mmcif_category("_struct_conn.").erase()
    out = doc.as_string()
    assert "_struct_conn." not in out
    return out


def test_caps_without_struct_conn_stay_by_their_peptide_bond() -> None:
    """A file that states no bond (no ``_struct_conn``): the caps' C–N peptide bonds (1.34 Å, read
    from the coordinates) put them in the chain just the same."""
    text = _text()
    s = _featurize(_without_struct_conn(text))
    assert not any(c.mol_type == MolType.LIGAND for c in s.chains)
    ref = _featurize(text)
    assert [(c.label_id, c.sequence) for c in s.chains] == [(c.label_id, c.sequence) for c in ref.chains]
    for key in ("residue_index", "asym_id", "entity_id", "sym_id", "restype", "is_standard", "mol_type"):
        np.testing.assert_array_equal(s.tokens[key], ref.tokens[key])


def _shift(text: str, comp: str, asym: str, dx: float) -> str:
    doc = gemmi.cif.read_string(text)
    for row in doc.sole_block().find("_atom_site.", ["label_comp_id", "label_asym_id", "Cartn_x"]):
        if row.str(0) == comp and row.str(1) == asym:
            row[2] = f"{float(row[2]) + dx:.3f}"
    return doc.as_string()


def test_a_residue_not_bonded_to_the_chain_end_is_a_ligand() -> None:
    """ACE of chain E moved 6 Å away: its C is no longer within bonding distance of LEU 2's N
    (measured here), so the covale row is longer than AF3's 2.4 Å and no peptide bond joins it:
    ACE becomes a ligand chain, and the peptide starts at LEU 2."""
    text = _shift(_text(), "ACE", "E", 6.0)
    site = _atom_site(text)
    ace_c = np.array(dict(site[("E", 1)][1])["C"])
    leu_n = np.array(dict(site[("E", 2)][1])["N"])
    assert np.linalg.norm(ace_c - leu_n) > 2.4
    s = _featurize(text)
    ligands = [c for c in s.chains if c.mol_type == MolType.LIGAND]
    assert [(c.auth_id, c.sequence, c.token_count) for c in ligands] == [("E", "ACE", 3)]
    e, tok = _chain(s, "E")
    assert int(tok["residue_index"][0]) == 2 and e.sequence.startswith("L")
    _, f_tok = _chain(s, "F")
    assert int(f_tok["residue_index"][0]) == 1  # chain F keeps its bonded cap


def test_a_bonded_cap_in_its_own_non_polymer_subchain_is_a_ligand_with_a_token_bond() -> None:
    """A file that puts the cap in a subchain of a non-polymer entity declares it a ligand: it stays
    one, and its ACE C–LEU N bond is a polymer–ligand token bond."""
    text = ace_as_own_subchain(_text())
    s = _featurize(text)
    (lig,) = [c for c in s.chains if c.mol_type == MolType.LIGAND]
    assert (lig.label_id, lig.auth_id, lig.sequence) == ("G", "E", "ACE")
    _, tok = _chain(s, "E")
    assert int(tok["residue_index"][0]) == 2
    site = _atom_site(_text())
    ace_c, leu_n = dict(site[("E", 1)][1])["C"], dict(site[("E", 2)][1])["N"]
    assert frozenset((_atom_at(s, ace_c), _atom_at(s, leu_n))) in _bonded_atoms(s)


def _a3m_query(path: str) -> str:
    p = MSAS / path
    data = p.read_bytes()
    text = (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    assert lines[0].startswith(">")
    return lines[1]


def test_the_chains_msas_still_join_with_a_gap_column_per_cap() -> None:
    """alphafold3-pytorch's MSAs for chains E and F have the 40 standard residues as query; the
    chain sequences now carry an X per cap, and the query leaves out exactly those (one way)."""
    text = _text()
    s = _featurize(text)
    want: dict[str, list[int]] = defaultdict(list)
    for asym in ("E", "F"):
        for i, (_, comp, _) in enumerate(_chain_residues(text, asym)):
            if comp in CAPS:
                want[asym].append(i)
    for asym in ("E", "F"):
        c, _ = _chain(s, asym)
        query = _a3m_query(f"alphafold3-pytorch/7a4d-assembly1{asym}_protein.a3m")
        assert len(query) == len(c.sequence) - len(want[asym])
        assert omitted_unknowns(query, c.sequence, MolType.PROTEIN) == tuple(want[asym])


def test_2n0n_nonstandard_residues_keep_their_seqres_positions() -> None:
    """2n0n_M1.pdb (PDB format, SEQRES HIS AIB … PH8 NH2): AIB, PH8 and the NH2 cap are in chain A
    at their SEQRES positions (a guard: this held before the cap change too)."""
    name = "2n0n_M1.pdb"
    seqres = [w for ln in (STRUCTURES / name).read_text().splitlines() if ln.startswith("SEQRES")
              for w in ln[19:].split()]  # fmt: skip
    s = featurize_bytes((STRUCTURES / name).read_bytes(), name, "2n0n")
    (c,) = s.chains
    assert c.mol_type == MolType.PROTEIN and len(c.sequence) == len(seqres) == 12
    tok = s.tokens
    for code in ("AIB", "PH8", "NH2"):
        pos = seqres.index(code) + 1
        at = tok["residue_index"] == pos
        assert at.any() and not tok["is_standard"][at].any()
        assert (tok["asym_id"][at] == c.asym_id).all()
