"""A per-atom residue has one token per heavy atom of its CCD component, resolved or not (AF3).

AF3 lays every residue out from its CCD definition (``atom_layout.make_flat_atom_layout``: the
component's atoms in CCD order, hydrogens dropped, leaving atoms dropped by
``get_link_drop_atoms``) and tokenizes that layout, so a ligand or modified residue that misses
atoms in the file still has a token for each; the missing ones are masked. We gave such residues
tokens only for the atoms the file has.

Inputs are real files of the dev corpus, one of them copied into ``tmp_path`` with one atom line
of a ligand deleted. Expected atom lists come from gemmi's reading of the CCD files
(``_chem_comp_atom``: ids and type symbols in file order, hydrogens left out) and expected
coordinates / presence from gemmi's reading of the structure file, never from our tokenizer.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import gemmi
import numpy as np
import pytest

from featurecache.build.components import component_resolvers
from featurecache.chem.conformer import conformer_for_component
from featurecache.chem.reference import ComponentTable, reference_features
from featurecache.client.crop import CropInput, crop_spatial, interface_tokens, spatial_ranking
from featurecache.const import decode_atom_name, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.parse.ccd import parse_component_file
from featurecache.types import BondSource, Structure
from tests.conftest import CCD, STRUCTURES

#: the second QUI of 1pfe (auth chain B, residue 9) loses this atom in the edited copy
DELETED = ("QUI", "9", "C7")


def _ccd_heavy(code: str) -> list[str]:
    """Heavy atom ids of a CCD component, in the order of its ``_chem_comp_atom`` loop (gemmi)."""
    block = gemmi.cif.read(str(CCD / f"{code}.cif")).sole_block()
    table = block.find("_chem_comp_atom.", ["atom_id", "type_symbol"])
    return [gemmi.cif.as_string(r[0]) for r in table if gemmi.cif.as_string(r[1]).upper() not in ("H", "D")]


def _ccd_bonds(code: str) -> set[frozenset[str]]:
    """Bonds between heavy atoms of a CCD component (``_chem_comp_bond``, gemmi)."""
    block = gemmi.cif.read(str(CCD / f"{code}.cif")).sole_block()
    table = block.find("_chem_comp_bond.", ["atom_id_1", "atom_id_2"])
    heavy = set(_ccd_heavy(code))
    pairs = {frozenset((gemmi.cif.as_string(r[0]), gemmi.cif.as_string(r[1]))) for r in table}
    return {p for p in pairs if p <= heavy}


def _without_atom_line(src: Path, dest: Path, comp: str, auth_seq: str, atom: str) -> Path:
    """Copy of the mmCIF ``src`` with the one ``_atom_site`` line of that atom deleted."""
    text = gzip.decompress(src.read_bytes()).decode() if src.suffix == ".gz" else src.read_text()
    lines = text.splitlines(keepends=True)
    header = [ln.split()[0] for ln in lines if ln.startswith("_atom_site.")]
    col = {name.split(".", 1)[1]: k for k, name in enumerate(header)}
    hits = []
    for k, ln in enumerate(lines):
        if not ln.startswith(("ATOM", "HETATM")):
            continue
        f = ln.split()
        if (f[col["label_comp_id"]], f[col["auth_seq_id"]], f[col["label_atom_id"]]) == (
            comp,
            auth_seq,
            atom,
        ):
            hits.append(k)
    assert len(hits) == 1, hits
    del lines[hits[0]]
    dest.write_text("".join(lines))
    return dest


def _featurize(path: Path, *, bonds: bool = True, keep_aids: bool = False) -> Structure:
    atoms_fn, bonds_fn = component_resolvers(str(CCD))
    return featurize_bytes(
        path.read_bytes(),
        path.name,
        path.name,
        component_atoms=atoms_fn,
        component_bonds=bonds_fn if bonds else None,
        keep_crystallization_aids=keep_aids,
    )


def _residue_tokens(s: Structure, code: str) -> dict[tuple[int, int], np.ndarray]:
    """(asym id, residue index) → token indices of every residue named ``code``."""
    names = [decode_res_name(r) for r in s.tokens["res_name"]]
    out: dict[tuple[int, int], list[int]] = {}
    for i, n in enumerate(names):
        if n == code:
            out.setdefault((int(s.tokens["asym_id"][i]), int(s.tokens["residue_index"][i])), []).append(i)
    return {k: np.array(v) for k, v in out.items()}


def _atom_names(s: Structure, tokens: np.ndarray) -> list[str]:
    return [decode_atom_name(s.atoms["name"][s.tokens["centre_atom"][t]]) for t in tokens]


@pytest.fixture(scope="module")
def edited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Structure]:
    path = _without_atom_line(
        STRUCTURES / "1pfe.cif.gz", tmp_path_factory.mktemp("lig") / "1pfe_noC7.cif", *DELETED
    )
    return path, _featurize(path)


def _file_atoms(path: Path, code: str, auth_seq: int) -> dict[str, gemmi.Atom]:
    st = gemmi.read_structure(str(path))
    for ch in st[0]:
        for res in ch:
            if res.name == code and res.seqid.num == auth_seq:
                return {a.name: a for a in res}
    raise AssertionError(f"{code} {auth_seq} not in {path}")


def test_incomplete_ligand_has_a_token_per_ccd_heavy_atom(edited: tuple[Path, Structure]) -> None:
    path, s = edited
    expected = _ccd_heavy("QUI")
    copies = _residue_tokens(s, "QUI")
    assert len(copies) == 2
    # both copies: every CCD heavy atom, in CCD order (the deleted one too)
    for tokens in copies.values():
        assert _atom_names(s, tokens) == expected
    first, second = (copies[k] for k in sorted(copies))
    assert len(first) == len(second) == len(expected)
    # entity / sym ids: the two copies are one entity
    assert s.tokens["entity_id"][first[0]] == s.tokens["entity_id"][second[0]]
    assert {int(s.tokens["sym_id"][first[0]]), int(s.tokens["sym_id"][second[0]])} == {0, 1}
    # presence and coordinates: as gemmi reads the edited file
    file_atoms = _file_atoms(path, "QUI", int(DELETED[1]))
    assert DELETED[2] not in file_atoms
    for t, name in zip(second, expected, strict=True):
        a = s.tokens["centre_atom"][t]
        if name in file_atoms:
            assert s.atoms["is_present"][a] and s.tokens["is_resolved"][t]
            want = file_atoms[name].pos
            np.testing.assert_allclose(s.atoms["coords"][a], [want.x, want.y, want.z], atol=1e-3)
        else:
            assert not s.atoms["is_present"][a] and not s.tokens["is_resolved"][t]
            assert np.all(s.atoms["coords"][a] == 0)
    missing = [name for name in expected if name not in file_atoms]
    assert DELETED[2] in missing
    chain = next(c for c in s.chains if c.asym_id == int(s.tokens["asym_id"][second[0]]))
    assert chain.token_count == len(expected)
    assert chain.n_resolved == len(expected) - len(missing)


def test_missing_ligand_atom_gets_reference_features(edited: tuple[Path, Structure]) -> None:
    _, s = edited
    comp = parse_component_file(CCD / "QUI.cif")
    conf = conformer_for_component(comp)
    table = ComponentTable.from_conformers([conf])
    ref = reference_features(s.atoms, s.tokens, table)
    copies = _residue_tokens(s, "QUI")
    second = copies[max(copies)]
    atom = next(
        int(s.tokens["centre_atom"][t]) for t in second if _atom_names(s, np.array([t]))[0] == DELETED[2]
    )
    k = conf.atom_names.index(DELETED[2])
    assert conf.mask[k]
    assert ref["ref_mask"][atom]
    np.testing.assert_array_equal(ref["ref_pos"][atom], conf.positions[k])
    assert ref["ref_element"][atom] == 6  # carbon, from the CCD's type symbol


def test_missing_atom_makes_no_distance_bond(edited: tuple[Path, Structure]) -> None:
    path, with_ccd = edited
    perceived = _featurize(path, bonds=False)  # no component bonds: bonds perceived from distances
    for s in (with_ccd, perceived):
        assert len(s.atoms) == len(with_ccd.atoms)
        absent = ~s.atoms["is_present"]
        assert absent.any()
        touching = absent[s.bonds["atom_i"]] | absent[s.bonds["atom_j"]]
        assert not np.any(touching & (s.bonds["source"] == BondSource.PERCEIVED))
    assert not np.any(~perceived.atoms["is_present"][perceived.bonds["atom_i"]])
    assert not np.any(~perceived.atoms["is_present"][perceived.bonds["atom_j"]])
    # with the CCD: a bond of a QUI that has the missing atom is a bond of the definition
    ccd = _ccd_bonds("QUI")
    s = with_ccd
    qui = np.zeros(len(s.atoms), dtype=bool)
    for tokens in _residue_tokens(s, "QUI").values():
        qui[s.tokens["centre_atom"][tokens]] = True
    for i, j, src in zip(s.bonds["atom_i"], s.bonds["atom_j"], s.bonds["source"], strict=True):
        if (s.atoms["is_present"][i] and s.atoms["is_present"][j]) or not (qui[i] and qui[j]):
            continue
        assert src == BondSource.COMPONENT
        pair = frozenset((decode_atom_name(s.atoms["name"][i]), decode_atom_name(s.atoms["name"][j])))
        assert pair in ccd
    deleted_bonds = [
        (i, j)
        for i, j in zip(s.bonds["atom_i"], s.bonds["atom_j"], strict=True)
        if DELETED[2] in (decode_atom_name(s.atoms["name"][i]), decode_atom_name(s.atoms["name"][j]))
        and not (s.atoms["is_present"][i] and s.atoms["is_present"][j])
    ]
    assert len(deleted_bonds) == sum(1 for p in ccd if DELETED[2] in p)


def test_unresolved_ligand_token_is_never_a_crop_anchor(edited: tuple[Path, Structure]) -> None:
    _, s = edited
    tokens = {k: s.tokens[k] for k in s.tokens.dtype.names or ()}
    atoms = {k: s.atoms[k] for k in s.atoms.dtype.names or ()}
    inp = CropInput.from_arrays(tokens, atoms)
    unresolved = np.flatnonzero(~s.tokens["is_resolved"] & ~s.tokens["is_standard"])
    assert unresolved.size
    qui_chain = int(s.tokens["asym_id"][unresolved[0]])
    rng = np.random.default_rng(0)
    for _ in range(200):
        res = crop_spatial(inp, rng, max_tokens=8, reference_chains=[qui_chain])
        assert res.method == "spatial" and s.tokens["is_resolved"][res.centre_token]
    near = interface_tokens(inp, [qui_chain])
    assert not np.isin(unresolved, near).any()
    ranked = spatial_ranking(inp, int(np.flatnonzero(s.tokens["is_resolved"])[0]))
    n_res = int(s.tokens["is_resolved"].sum())
    assert not np.isin(unresolved, ranked[:n_res]).any()


def test_modified_residue_missing_an_atom(tmp_path: Path) -> None:
    """1pfe's N2C 3 misses CD in the file; MVA 4 sits inside the peptide, MVA 8 ends it."""
    s = _featurize(STRUCTURES / "1pfe.cif.gz")
    file_n2c = _file_atoms(STRUCTURES / "1pfe.cif.gz", "N2C", 3)
    n2c = _residue_tokens(s, "N2C")
    (tokens,) = n2c.values()
    # not the chain's last residue: OXT left (AF3 get_link_drop_atoms), every other CCD atom kept
    expected = [n for n in _ccd_heavy("N2C") if n != "OXT"]
    assert _atom_names(s, tokens) == expected
    for t, name in zip(tokens, expected, strict=True):
        assert bool(s.atoms["is_present"][s.tokens["centre_atom"][t]]) == (name in file_n2c)
    assert "CD" not in file_n2c and "CD" in expected
    mva = _residue_tokens(s, "MVA")
    inner, last = (mva[k] for k in sorted(mva))
    assert _atom_names(s, inner) == [n for n in _ccd_heavy("MVA") if n != "OXT"]
    # the chain's last residue keeps OXT (AF3: the end terminus), unresolved here
    assert _atom_names(s, last) == _ccd_heavy("MVA")
    assert "OXT" not in _file_atoms(STRUCTURES / "1pfe.cif.gz", "MVA", 8)
    assert not s.atoms["is_present"][s.tokens["centre_atom"][last[-1]]]


def test_ion_with_missing_atoms_and_bonded_glycan() -> None:
    """1GBT's sulfates are modelled as S alone: five tokens each (crystallization aids of this X-ray
    structure, kept here with ``keep_crystallization_aids``). 7DDO's NAGs are bonded to Asn through C1
    (LINK records): O1 left, as AF3 drops a bonded glycan's O1."""
    assert not _residue_tokens(_featurize(STRUCTURES / "1GBT.cif"), "SO4")  # removed by default
    s = _featurize(STRUCTURES / "1GBT.cif", keep_aids=True)
    so4 = _residue_tokens(s, "SO4")
    assert so4
    for tokens in so4.values():
        assert _atom_names(s, tokens) == _ccd_heavy("SO4")
        present = s.atoms["is_present"][s.tokens["centre_atom"][tokens]]
        assert present.tolist() == [n == "S" for n in _ccd_heavy("SO4")]
    s = _featurize(STRUCTURES / "7DDO.pdb")
    nag = _residue_tokens(s, "NAG")
    links = [
        line.split() for line in (STRUCTURES / "7DDO.pdb").read_text().splitlines() if line.startswith("LINK")
    ]
    # LINK  atom1 res1 chain1 seq1  atom2 res2 chain2 seq2 ...: NAG's C1 to an Asn's ND2
    linked = {(f[7], f[8]) for f in links if f[2] == "ASN" and f[6] == "NAG" and f[5] == "C1"}
    assert linked
    assert len(nag) == len(linked)
    expected = [n for n in _ccd_heavy("NAG") if n != "O1"]
    for tokens in nag.values():
        assert _atom_names(s, tokens) == expected
