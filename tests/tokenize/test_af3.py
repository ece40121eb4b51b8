"""AF3 tokenization checked against counts computed independently with gemmi."""

from __future__ import annotations

import gemmi
import numpy as np
import pytest

from featurecache.const import RESTYPE_INDEX, MolType, decode_atom_name, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.parse.structure import _parse_structure
from featurecache.types import Structure
from tests.conftest import STRUCTURES, removed_aids

WATERS = {"HOH", "DOD"}


def _featurize(name: str, keep_aids: bool = False) -> Structure:
    return featurize_bytes((STRUCTURES / name).read_bytes(), name, name, keep_crystallization_aids=keep_aids)


def _gemmi_counts(name: str) -> tuple[int, int]:
    """(polymer residues from the entity sequences, ligand heavy atoms of the first altloc) via gemmi;
    an X-ray structure's crystallization aids (AF3 SI Table 9) left out."""
    st = gemmi.read_structure(str(STRUCTURES / name))
    st.setup_entities()
    st.remove_hydrogens()
    st.remove_alternative_conformations()
    model = st[0]
    aids = removed_aids(st)
    polymer = 0
    ligand_atoms = 0
    for ch in model:
        for span in ch.subchains():
            ent = st.get_entity_of(span)
            if ent is not None and ent.entity_type == gemmi.EntityType.Polymer:
                polymer += len(ent.full_sequence)
            else:
                ligand_atoms += sum(len(r) for r in span if r.name not in WATERS and r.name not in aids)
    return polymer, ligand_atoms


@pytest.mark.parametrize("name", ["102m.cif", "1k1a.cif", "7zzx.cif", "3u8v.cif", "6s61.cif", "4CUP.cif"])
def test_token_counts_match_gemmi(name: str) -> None:
    """Standard residues only (+ ligands): tokens = polymer residues + ligand heavy atoms."""
    s = _featurize(name)
    polymer, ligand_atoms = _gemmi_counts(name)
    mt = s.tokens["mol_type"]
    assert int((mt != MolType.LIGAND).sum()) == polymer
    assert int((mt == MolType.LIGAND).sum()) == ligand_atoms
    assert len(s.tokens) == polymer + ligand_atoms


def test_102m_heme_and_sulfate() -> None:
    # the sulfate, a crystallization aid of this X-ray structure, is kept only when asked
    assert "SO4" not in {decode_res_name(t) for t in _featurize("102m.cif").tokens["res_name"]}
    s = _featurize("102m.cif", keep_aids=True)
    names = [decode_res_name(t) for t in s.tokens["res_name"]]
    assert names.count("HEM") == 43  # heme has 43 heavy atoms (C34 H32 Fe N4 O4 -> 34+1+4+4)
    assert names.count("SO4") == 5
    lig = s.tokens["mol_type"] == MolType.LIGAND
    assert (s.tokens["restype"][lig] == RESTYPE_INDEX["UNK"]).all()
    assert (s.tokens["atom_count"][lig] == 1).all()
    # per-atom tokens are their own centre
    assert (s.tokens["centre_atom"][lig] == s.tokens["atom_start"][lig]).all()


def test_centre_atoms_are_ca_and_c1prime() -> None:
    s = _featurize("2q2k.cif")  # protein + DNA
    for t in s.tokens[s.tokens["is_standard"]]:
        want = "CA" if t["mol_type"] == MolType.PROTEIN else "C1'"
        assert decode_atom_name(s.atoms["name"][t["centre_atom"]]) == want


def test_nmr_first_model_only_and_no_hydrogens() -> None:
    s = _featurize("2crb.cif.gz")  # 20 models, with H
    st = gemmi.read_structure(str(STRUCTURES / "2crb.cif.gz"))
    first = st[0]
    heavy = sum(1 for ch in first for r in ch for a in r if not a.is_hydrogen() and r.name not in WATERS)
    assert int(s.atoms["is_present"].sum()) == heavy
    assert s.meta.n_models == 20
    assert 1 not in set(s.atoms["element"].tolist())


def test_unresolved_residues_become_tokens_without_atoms() -> None:
    # 3JQH: entity sequence of 167 residues, ~23 resolved (+ microheterogeneity at A1 and A15)
    s = _featurize("3JQH.cif")
    st = gemmi.read_structure(str(STRUCTURES / "3JQH.cif"))
    st.setup_entities()
    ent = st.entities[0]
    assert len(s.tokens) == len(ent.full_sequence)
    positions = {r.label_seq for ch in st[0] for r in ch if r.label_seq is not None}
    assert int(s.tokens["is_resolved"].sum()) == len(positions)  # one token per position
    unresolved = ~s.tokens["is_resolved"]
    for t in s.tokens[unresolved][:5]:
        sl = slice(t["atom_start"], t["atom_start"] + t["atom_count"])
        assert not s.atoms["is_present"][sl].any()
        assert (s.atoms["coords"][sl] == 0).all()


def test_microheterogeneity_keeps_first_residue() -> None:
    s = _featurize("3JQH.cif")
    st = gemmi.read_structure(str(STRUCTURES / "3JQH.cif"))
    first_at: dict[int, str] = {}
    for r in st[0]["A"]:
        if r.label_seq is not None:
            first_at.setdefault(r.label_seq, r.name)
    chain = s.chains[0]
    toks = s.tokens[chain.token_start : chain.token_start + chain.token_count]
    for pos, name in first_at.items():
        assert decode_res_name(toks["res_name"][pos - 1]) == name


ALTLOC_CIF = """data_TEST
_entity.id 1
_entity.type polymer
_entity_poly.entity_id 1
_entity_poly.type 'polypeptide(L)'
loop_
_entity_poly_seq.entity_id
_entity_poly_seq.num
_entity_poly_seq.mon_id
1 1 GLY
loop_
_atom_site.group_PDB
_atom_site.id
_atom_site.type_symbol
_atom_site.label_atom_id
_atom_site.label_alt_id
_atom_site.label_comp_id
_atom_site.label_asym_id
_atom_site.label_entity_id
_atom_site.label_seq_id
_atom_site.Cartn_x
_atom_site.Cartn_y
_atom_site.Cartn_z
_atom_site.occupancy
_atom_site.B_iso_or_equiv
_atom_site.auth_seq_id
_atom_site.auth_asym_id
_atom_site.pdbx_PDB_model_num
ATOM 1 N N   . GLY A 1 1 0.0 0.0 0.0 1.0 10.0 1 A 1
ATOM 2 C CA  A GLY A 1 1 1.0 0.0 0.0 0.3 10.0 1 A 1
ATOM 3 C CA  B GLY A 1 1 9.0 0.0 0.0 0.7 10.0 1 A 1
ATOM 4 C C   A GLY A 1 1 2.0 0.0 0.0 0.3 10.0 1 A 1
ATOM 5 C C   B GLY A 1 1 8.0 0.0 0.0 0.7 10.0 1 A 1
ATOM 6 O O   . GLY A 1 1 3.0 0.0 0.0 1.0 10.0 1 A 1
ATOM 7 H H   . GLY A 1 1 3.0 1.0 0.0 1.0 10.0 1 A 1
"""


def test_highest_occupancy_altloc_wins() -> None:
    s = featurize_bytes(ALTLOC_CIF.encode(), "t.cif", "t")
    names = [decode_atom_name(n) for n in s.atoms["name"]]
    # GLY heavy atoms, CCD order; H dropped. The one residue ends the chain, so it keeps the
    # leaving OXT (AF3 get_link_drop_atoms), unresolved: the file has none.
    assert names == ["N", "CA", "C", "O", "OXT"]
    assert not s.atoms[names.index("OXT")]["is_present"]
    ca = s.atoms[names.index("CA")]
    assert ca["coords"][0] == pytest.approx(9.0)  # altloc B, occupancy 0.7
    assert s.atoms[names.index("C")]["coords"][0] == pytest.approx(8.0)


def test_multichar_and_numeric_chain_ids_kept() -> None:
    s = _featurize("1ffk.cif.gz")  # numeric chain ids 0, 1, 9
    auth = {c.auth_id for c in s.chains}
    assert {"0", "9"} <= auth
    assert len({c.label_id for c in s.chains}) == len(s.chains)


def test_ligands_inside_polymer_chains_become_own_chains() -> None:
    # 721p-assembly1 stores GNP and MG inside label_asym A/B with the protein
    s = _featurize("721p-assembly1.cif")
    lig = [c for c in s.chains if c.mol_type == MolType.LIGAND]
    assert sorted(c.sequence for c in lig) == ["GNP", "GNP", "MG", "MG"]
    mg = next(c for c in lig if c.sequence == "MG")
    atom = s.atoms[s.tokens["centre_atom"][mg.token_start]]
    assert atom["element"] == 12  # the file types it "M"; recovered from the atom name


def test_token_bonds_include_ligand_connectivity_not_peptide_links() -> None:
    s = _featurize("102m.cif")
    mt = s.tokens["mol_type"]
    both_polymer = (mt[s.bonds["token_i"]] != MolType.LIGAND) & (mt[s.bonds["token_j"]] != MolType.LIGAND)
    assert not both_polymer.any()
    assert len(s.bonds) >= 43  # heme alone has more bonds than atoms (rings)
    assert (s.bonds["atom_i"] < s.bonds["atom_j"]).all()


def test_interfaces_within_5A() -> None:
    s = _featurize("102m.cif")
    # recompute independently: brute-force min distance between chain 0 (protein) and the heme chain
    chain_of_atom = s.tokens["asym_id"][s.atoms["token_index"]]
    present = s.atoms["is_present"]
    for row in s.interfaces:
        a = s.atoms["coords"][present & (chain_of_atom == row["chain_i"])]
        b = s.atoms["coords"][present & (chain_of_atom == row["chain_j"])]
        d = np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1)).min()
        assert d == pytest.approx(row["min_distance"], abs=1e-3)
        assert d <= 5.0
    assert len(s.interfaces) >= 1


def test_sequence_hash_joins_identical_chains() -> None:
    s = _featurize("7pzb.pdb")  # chains A and B: the same protein
    a, b = s.chains[0], s.chains[1]
    assert a.sequence == b.sequence and a.sequence_hash == b.sequence_hash
    raw = _parse_structure((STRUCTURES / "7pzb.pdb").read_bytes(), "7pzb.pdb").structure
    raw.setup_entities()
    assert len(a.sequence) == len(raw.entities[0].full_sequence)
