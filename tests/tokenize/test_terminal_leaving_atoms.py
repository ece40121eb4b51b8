"""A standard residue at a chain terminus keeps its leaving atom, as AF3 lays it out.

AF3 builds every residue's atoms from its CCD definition (``atom_layout.make_flat_atom_layout``)
and drops the leaving atoms with ``get_link_drop_atoms``: a protein chain's residue loses OXT
unless it is the end terminus, an RNA / DNA chain's residue loses OP3 unless it is the start
terminus. ``residues_from_structure(include_missing_residues=True)`` makes the first and the last
residue of the chain's full sequence (the entity sequence, resolved or not) the termini, and any
residue whose OXT is in the file an end terminus too. Standard residues always lost OXT / OP3 in
featurecache, also at a terminus.

Inputs are real files of the dev corpus; two are copied into ``tmp_path`` with atom lines
deleted or added. Expected atom lists come from gemmi's reading of the CCD files, the termini
from the files' ``_pdbx_poly_seq_scheme`` rows and the leaving atoms' presence and coordinates
from the ``_atom_site`` lines of the file text, never from our tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import gemmi
import numpy as np

from featurecache.build.components import component_resolvers
from featurecache.chem.conformer import conformer_for_component
from featurecache.chem.reference import ComponentTable, reference_features
from featurecache.chem.standard import standard_component
from featurecache.const import MolType, decode_atom_name, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import CCD, STRUCTURES


def _ccd_heavy(code: str) -> list[str]:
    """Heavy atom ids of a CCD component, in the order of its ``_chem_comp_atom`` loop (gemmi)."""
    block = gemmi.cif.read(str(CCD / f"{code}.cif")).sole_block()
    table = block.find("_chem_comp_atom.", ["atom_id", "type_symbol"])
    return [gemmi.cif.as_string(r[0]) for r in table if gemmi.cif.as_string(r[1]).upper() not in ("H", "D")]


def _featurize(path: Path) -> Structure:
    atoms_fn, bonds_fn = component_resolvers(str(CCD))
    return featurize_bytes(
        path.read_bytes(), path.name, path.name, component_atoms=atoms_fn, component_bonds=bonds_fn
    )


def _site_rows(text: str) -> tuple[dict[str, int], list[tuple[int, list[str]]]]:
    """``_atom_site`` column positions and (line number, fields) of every atom line of model 1."""
    lines = text.splitlines()
    header = [ln.split()[0].split(".", 1)[1] for ln in lines if ln.startswith("_atom_site.")]
    col = {name: k for k, name in enumerate(header)}
    rows = []
    for k, ln in enumerate(lines):
        if ln.startswith(("ATOM", "HETATM")):
            f = ln.split()  # no quoted value of these files holds a space
            if "pdbx_PDB_model_num" not in col or f[col["pdbx_PDB_model_num"]] == "1":
                rows.append((k, f))
    return col, rows


def _chain_sequences(text: str) -> dict[str, list[str]]:
    """label asym id -> its full sequence, resolved or not (``_pdbx_poly_seq_scheme`` rows, by
    ``seq_id``; the first of a microheterogeneous position)."""
    block = gemmi.cif.read_string(text).sole_block()
    out: dict[str, dict[int, str]] = {}
    for row in block.find("_pdbx_poly_seq_scheme.", ["asym_id", "seq_id", "mon_id"]):
        out.setdefault(row.str(0), {}).setdefault(int(row.str(1)), row.str(2))
    return {asym: [seq[n] for n in sorted(seq)] for asym, seq in out.items()}


def _chain_tokens(s: Structure, asym: int) -> np.ndarray:
    return np.flatnonzero(s.tokens["asym_id"] == asym)


def _token_atom_names(s: Structure, t: int) -> list[str]:
    a0, n = int(s.tokens["atom_start"][t]), int(s.tokens["atom_count"][t])
    return [decode_atom_name(x) for x in s.atoms["name"][a0 : a0 + n]]


def _atom_of(s: Structure, t: int, name: str) -> int:
    a0 = int(s.tokens["atom_start"][t])
    return a0 + _token_atom_names(s, t).index(name)


def _chains_of(s: Structure, mol_types: tuple[MolType, ...]) -> list[int]:
    return [c.asym_id for c in s.chains if c.mol_type in {int(m) for m in mol_types}]


def _count_named(s: Structure, name: str) -> int:
    return sum(decode_atom_name(x) == name for x in s.atoms["name"])


def _check_protein_chain(s: Structure, asym: int, entity_seq: list[str]) -> int:
    """Every standard residue has its CCD heavy atoms, OXT only on the last one of the entity
    sequence; returns the OXT atom's index."""
    tokens = _chain_tokens(s, asym)
    assert len(tokens) == len(entity_seq)
    for k, t in enumerate(tokens):
        code = decode_res_name(s.tokens["res_name"][t])
        assert code == entity_seq[k]
        heavy = _ccd_heavy(code)
        want = heavy if k == len(tokens) - 1 else [n for n in heavy if n != "OXT"]
        assert _token_atom_names(s, t) == want, (k, code)
    return _atom_of(s, int(tokens[-1]), "OXT")


def test_protein_chain_end_keeps_the_files_oxt() -> None:
    """102m: one OXT line, on GLY 154, the last residue of the 154-residue entity sequence."""
    path = STRUCTURES / "102m.cif"
    text = path.read_text()
    col, rows = _site_rows(text)
    oxt = [f for _, f in rows if f[col["label_atom_id"]] == "OXT"]
    assert len(oxt) == 1
    (f,) = oxt
    seq = _chain_sequences(text)[f[col["label_asym_id"]]]
    assert int(f[col["label_seq_id"]]) == len(seq)
    s = _featurize(path)
    (asym,) = _chains_of(s, (MolType.PROTEIN,))
    a = _check_protein_chain(s, asym, seq)
    assert s.atoms["is_present"][a]
    want = [float(f[col[c]]) for c in ("Cartn_x", "Cartn_y", "Cartn_z")]
    np.testing.assert_allclose(s.atoms["coords"][a], want, atol=1e-3)
    assert _count_named(s, "OXT") == 1


def test_protein_chain_end_without_oxt_in_the_file() -> None:
    """4i6p has no OXT line: each protein chain's last residue has an unresolved OXT."""
    path = STRUCTURES / "4i6p.cif"
    text = path.read_text()
    col, rows = _site_rows(text)
    assert not [f for _, f in rows if f[col["label_atom_id"]] == "OXT"]
    seqs = _chain_sequences(text)
    s = _featurize(path)
    chains = _chains_of(s, (MolType.PROTEIN,))
    assert len(chains) == 2
    for asym in chains:
        chain = next(c for c in s.chains if c.asym_id == asym)
        a = _check_protein_chain(s, asym, seqs[chain.label_id])
        assert not s.atoms["is_present"][a]
        assert np.all(s.atoms["coords"][a] == 0)
    assert _count_named(s, "OXT") == 2


def test_the_entity_sequence_decides_the_end_terminus(tmp_path: Path) -> None:
    """102m with GLY 154's atom lines deleted: the entity sequence still ends at 154, so the
    unresolved GLY 154 has the (unresolved) OXT and the last resolved residue, 153, has none."""
    text = (STRUCTURES / "102m.cif").read_text()
    col, rows = _site_rows(text)
    seq = _chain_sequences(text)["A"]
    drop = {k for k, f in rows if f[col["label_asym_id"]] == "A" and f[col["label_seq_id"]] == str(len(seq))}
    assert drop
    lines = text.splitlines(keepends=True)
    edited = tmp_path / "102m_no154.cif"
    edited.write_text("".join(ln for k, ln in enumerate(lines) if k not in drop))
    s = _featurize(edited)
    (asym,) = _chains_of(s, (MolType.PROTEIN,))
    a = _check_protein_chain(s, asym, seq)
    tokens = _chain_tokens(s, asym)
    last = int(tokens[-1])
    assert not s.tokens["is_resolved"][last]
    assert not s.atoms["is_present"][a] and np.all(s.atoms["coords"][a] == 0)
    assert s.tokens["is_resolved"][tokens[-2]]
    assert _count_named(s, "OXT") == 1


def _with_op3_lines(src: Path, dest: Path, adds: list[tuple[str, str, tuple[float, float, float]]]) -> Path:
    """Copy of ``src`` with an OP3 ``_atom_site`` line added to each (label asym, label seq) of
    ``adds``, at the given coordinates (other columns from that residue's first line)."""
    text = src.read_text()
    col, rows = _site_rows(text)
    lines = text.splitlines(keepends=True)
    inserts: dict[int, str] = {}
    for n, (asym, seq, xyz) in enumerate(adds):
        k, f = next(
            (k, f) for k, f in rows if f[col["label_asym_id"]] == asym and f[col["label_seq_id"]] == seq
        )
        f = list(f)
        f[col["id"]] = str(90000 + n)
        f[col["type_symbol"]] = "O"
        f[col["label_atom_id"]] = f[col["auth_atom_id"]] = "OP3"
        for c, v in zip(("Cartn_x", "Cartn_y", "Cartn_z"), xyz, strict=True):
            f[col[c]] = f"{v:.3f}"
        inserts[k] = " ".join(f) + "\n"
    dest.write_text("".join((inserts.get(k, "") + ln) for k, ln in enumerate(lines)))
    return dest


def test_nucleic_chain_start_keeps_op3(tmp_path: Path) -> None:
    """209d's DNA strands have no OP3 line; the copy gets one on chain A's first residue (DG 1:
    kept, resolved) and one on its second (DA 2: dropped, as AF3 drops OP3 inside a chain)."""
    src = STRUCTURES / "209d-assembly1.cif"
    text = src.read_text()
    col, rows = _site_rows(text)
    assert not [f for _, f in rows if f[col["label_atom_id"]] == "OP3"]
    xyz = (13.5, 36.25, 19.75)
    path = _with_op3_lines(src, tmp_path / "209d_op3.cif", [("A", "1", xyz), ("A", "2", (1.0, 2.0, 3.0))])
    seqs = _chain_sequences(text)
    for s, added in ((_featurize(src), False), (_featurize(path), True)):
        dna = _chains_of(s, (MolType.DNA, MolType.RNA))
        assert len(dna) == 2
        for asym in dna:
            chain = next(c for c in s.chains if c.asym_id == asym)
            seq = seqs[chain.label_id]
            tokens = _chain_tokens(s, asym)
            assert len(tokens) == len(seq)
            for k, t in enumerate(tokens):
                heavy = _ccd_heavy(seq[k])
                want = heavy if k == 0 else [n for n in heavy if n != "OP3"]
                assert _token_atom_names(s, int(t)) == want, (k, seq[k])
            a = _atom_of(s, int(tokens[0]), "OP3")
            if added and chain.label_id == "A":
                assert s.atoms["is_present"][a]
                np.testing.assert_allclose(s.atoms["coords"][a], xyz, atol=1e-3)
            else:
                assert not s.atoms["is_present"][a] and np.all(s.atoms["coords"][a] == 0)
        assert _count_named(s, "OP3") == 2


def test_terminal_oxt_gets_reference_features() -> None:
    """4i6p's chains end in ASP: the unresolved OXT takes its reference position from the
    residue's conformer, like any other atom of the residue (AF3: the CCD conformer)."""
    code = "ASP"
    definition = standard_component(code)
    assert definition is not None
    s = _featurize(STRUCTURES / "4i6p.cif")
    conf = conformer_for_component(definition)
    table = ComponentTable.from_conformers([conf])
    ref = reference_features(s.atoms, s.tokens, table)
    k = conf.atom_names.index("OXT")
    assert conf.mask[k]
    for asym in _chains_of(s, (MolType.PROTEIN,)):
        last = int(_chain_tokens(s, asym)[-1])
        assert decode_res_name(s.tokens["res_name"][last]) == code
        a = _atom_of(s, last, "OXT")
        assert ref["ref_mask"][a]
        np.testing.assert_array_equal(ref["ref_pos"][a], conf.positions[k])
        assert ref["ref_element"][a] == 8
