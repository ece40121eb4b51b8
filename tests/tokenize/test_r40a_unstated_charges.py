"""An atom whose file states no formal charge takes its residue definition's, as an atom the file
lacks does (review R40a s51 #1).

``types.Atom.charge`` is "from the file, else the CCD, else 0". gemmi reads an mmCIF
``pdbx_formal_charge`` of ``?`` (what every wwPDB file writes), BinaryCIF's masked value and PDB's
blank columns 79-80 as 0, and the store kept that 0: a resolved LYS NZ was 0 where an unresolved
one was +1, 1GBT's Ca²⁺ was 0. A charge the file does state (an explicit 0 too) is kept, found per
atom (rows paired with gemmi's atoms in order, else by id; else per file); a residue that states
one has the file's charges, 0 where it states none (per residue: review R41a s51 #1,
tests/tokenize/test_r41a_per_residue_charges.py).

Real files of the corpus, edited as text where a test needs a stated charge or a missing atom;
expected charges from gemmi's reading of the CCD's files (``_chem_comp_atom.charge``), never from
the package's own definitions; premises (what the file writes) read from the file's text.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from functools import cache
from pathlib import Path

import gemmi
import numpy as np
import pytest

from featurecache.build.components import component_resolvers
from featurecache.const import decode_atom_name, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import CCD, STRUCTURES, build_store

#: atoms the CCD charges in standard residues
CHARGED = (("LYS", "NZ"), ("ARG", "NH2"), ("HIS", "ND1"))


@cache
def _ccd_charges(code: str) -> dict[str, int]:
    block = gemmi.cif.read(str(CCD / f"{code}.cif")).sole_block()
    table = block.find("_chem_comp_atom.", ["atom_id", "charge"])
    return {gemmi.cif.as_string(r[0]): int(gemmi.cif.as_string(r[1])) for r in table}


@cache
def _component_atoms() -> Callable:  # type: ignore[type-arg]
    return component_resolvers(str(CCD))[0]


def _featurize(data: bytes, name: str) -> Structure:
    return featurize_bytes(data, name, name, component_atoms=_component_atoms())


def _labelled(s: Structure) -> list[tuple[str, int, str, bool, int]]:
    """(residue name, residue_index, atom name, is_present, charge) of every atom of chain asym 0 and
    the other chains, in store order."""
    out = []
    for a in s.atoms:
        t = s.tokens[int(a["token_index"])]
        out.append((decode_res_name(t["res_name"]), int(t["residue_index"]), decode_atom_name(a["name"]),
                    bool(a["is_present"]), int(a["charge"])))  # fmt: skip
    return out


def _charges_of(s: Structure, res: str, atom: str) -> list[tuple[int, bool, int]]:
    """(residue_index, is_present, charge) of every atom ``atom`` of residues ``res``."""
    return [(i, p, q) for r, i, n, p, q in _labelled(s) if r == res and n == atom]


def _charge_at(s: Structure, xyz: tuple[float, float, float]) -> int:
    """The stored charge of the one resolved atom at ``xyz`` (the file's coordinates of an atom)."""
    hit = np.flatnonzero(
        s.atoms["is_present"] & (np.abs(s.atoms["coords"] - np.asarray(xyz)).max(axis=1) < 1e-3)
    )
    assert len(hit) == 1, (xyz, hit)
    return int(s.atoms["charge"][hit[0]])


def _mmcif_rows(text: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The ``_atom_site`` header (column names) and (line index, fields) of each atom row of a
    wwPDB-style mmCIF ``text`` (one row a line)."""
    lines = text.splitlines()
    header = [line.split()[0].removeprefix("_atom_site.") for line in lines if line.startswith("_atom_site.")]
    rows = [(k, line.split()) for k, line in enumerate(lines) if line.startswith(("ATOM ", "HETATM "))]
    return header, rows


def _edit_mmcif(
    text: str,
    edits: dict[tuple[str, str, str], str],
    *,
    delete: tuple[str, str, str] | None = None,
    move: tuple[str, str, str] | None = None,
    dup_id: bool = False,
) -> tuple[str, dict[tuple[str, str, str], tuple[float, ...]]]:
    """``text`` with the ``pdbx_formal_charge`` of the rows (label_comp_id, label_atom_id,
    auth_seq_id) in ``edits`` set, the row ``delete`` removed, the row ``move`` moved after the last
    ATOM row and, with ``dup_id``, the second row's ``id`` made the first's; and the coordinates of
    the edited rows, by key."""
    lines = text.splitlines()
    header, rows = _mmcif_rows(text)
    col = {
        c: header.index(c)
        for c in ("label_comp_id", "label_atom_id", "auth_seq_id", "pdbx_formal_charge", "id")
    }
    xyz = [header.index(f"Cartn_{c}") for c in "xyz"]
    done, picked = {}, {}
    for k, fields in rows:
        key = (fields[col["label_comp_id"]], fields[col["label_atom_id"]], fields[col["auth_seq_id"]])
        if key in edits:
            fields[col["pdbx_formal_charge"]] = edits[key]
            lines[k] = " ".join(fields)
            done[key] = tuple(float(fields[c]) for c in xyz)
        if key in (delete, move):
            picked[key] = k
    assert set(done) == set(edits) and set(picked) == {delete, move} - {None}
    if dup_id:
        (_, f0), (k1, f1) = rows[0], rows[1]
        f1[col["id"]] = f0[col["id"]]
        lines[k1] = " ".join(f1)
    after: dict[int, str] = {}
    if move is not None:
        after[max(k for k, fields in rows if fields[0] == "ATOM")] = lines[picked[move]]
    gone = {picked[key] for key in (delete, move) if key is not None}
    out = []
    for k, line in enumerate(lines):
        if k not in gone:
            out.append(line)
        if k in after:
            out.append(after[k])
    return "\n".join(out) + "\n", done


# ----------------------------------------------------------------------------- files that state none
def test_present_and_absent_atoms_of_102m_take_the_ccd_charge() -> None:
    text = (STRUCTURES / "102m.cif").read_text()
    header, rows = _mmcif_rows(text)
    assert {f[header.index("pdbx_formal_charge")] for _, f in rows} == {"?"}  # the premise: no charge stated
    # LYS 16's NZ taken out: an unresolved NZ beside the resolved ones
    s = _featurize(_edit_mmcif(text, {}, delete=("LYS", "NZ", "16"))[0].encode(), "102m.cif")
    for res, atom in CHARGED:
        want = _ccd_charges(res)[atom]
        assert want == 1
        got = _charges_of(s, res, atom)
        assert got and all(q == want for _, _, q in got), (res, atom, got)
    nz = _charges_of(s, "LYS", "NZ")
    assert {p for _, p, _ in nz} == {True, False}  # both kinds, one charge
    # every other atom of those residues: the CCD's 0
    for r, _, n, _, q in _labelled(s):
        if r in ("LYS", "ARG", "HIS"):
            assert q == _ccd_charges(r)[n], (r, n, q)


@pytest.mark.parametrize("name", ["1A8O.pdb", "7pzb.pdb"])
def test_a_pdb_files_blank_charge_columns_take_the_ccd_charge(name: str) -> None:
    text = (STRUCTURES / name).read_text()
    atom_lines = [line for line in text.splitlines() if line.startswith(("ATOM", "HETATM"))]
    assert all(not line[78:80].strip() for line in atom_lines)  # the premise: columns 79-80 blank
    s = _featurize(text.encode(), name)
    seen = 0
    for res, atom in CHARGED:
        got = _charges_of(s, res, atom)
        assert all(q == _ccd_charges(res)[atom] == 1 for _, _, q in got), (res, atom, got)
        seen += sum(p for _, p, _ in got)
    assert seen > 0
    if name == "7pzb.pdb":  # resolved and unresolved ARG NH2 alike
        assert {p for _, p, _ in _charges_of(s, "ARG", "NH2")} == {True, False}


def test_1gbt_calcium_ion_takes_the_ccd_charge() -> None:
    text = (STRUCTURES / "1GBT.cif").read_text()
    header, rows = _mmcif_rows(text)
    ca_rows = [f for _, f in rows if f[header.index("label_comp_id")] == "CA"]
    assert [f[header.index("pdbx_formal_charge")] for f in ca_rows] == ["?"]
    s = _featurize(text.encode(), "1GBT.cif")
    assert (
        [(p, q) for _, p, q in _charges_of(s, "CA", "CA")]
        == [(True, _ccd_charges("CA")["CA"])]
        == [(True, 2)]
    )


# ----------------------------------------------------------------------------- stated charges are kept
def test_a_stated_charge_is_kept_and_an_unstated_one_in_the_same_file_is_the_ccds() -> None:
    # per atom: LYS 16 NZ stated 0, ASP 20 OD2 stated -1; every other row '?'
    edits = {("LYS", "NZ", "16"): "0", ("ASP", "OD2", "20"): "-1"}
    text, at = _edit_mmcif((STRUCTURES / "102m.cif").read_text(), edits)
    s = _featurize(text.encode(), "102m.cif")
    assert _charge_at(s, at[("LYS", "NZ", "16")]) == 0
    assert _charge_at(s, at[("ASP", "OD2", "20")]) == -1
    nz, od2 = _charges_of(s, "LYS", "NZ"), _charges_of(s, "ASP", "OD2")
    assert sorted(q for _, _, q in nz) == [0] + [1] * (len(nz) - 1) and len(nz) > 5  # the others say '?'
    assert sorted(q for _, _, q in od2) == [-1] + [0] * (len(od2) - 1) and len(od2) > 3


def test_a_file_that_states_every_charge_keeps_them_all() -> None:
    # every row states 0 but LYS 16's NZ (+1); LYS 34's NZ taken out: unresolved, in a residue whose
    # file states charges (0 on its other atoms) it is the file's, 0 (decided per residue, review R41a
    # s51 #1; per atom it took the CCD's +1: the rule that gave a HIS charged on NE2 ND1 +1 as well)
    text = (STRUCTURES / "102m.cif").read_text()
    header, rows = _mmcif_rows(text)
    key = [header.index(c) for c in ("label_comp_id", "label_atom_id", "auth_seq_id")]
    edits = {tuple(f[k] for k in key): "0" for _, f in rows} | {("LYS", "NZ", "16"): "1"}
    text, at = _edit_mmcif(text, edits, delete=("LYS", "NZ", "34"))
    s = _featurize(text.encode(), "102m.cif")
    assert _charge_at(s, at[("LYS", "NZ", "16")]) == 1
    nz = _charges_of(s, "LYS", "NZ")
    assert sorted((p, q) for _, p, q in nz) == [(False, 0)] + [(True, 0)] * (len(nz) - 2) + [(True, 1)]
    for res, atom in CHARGED[1:]:
        assert {q for _, _, q in _charges_of(s, res, atom)} == {0}  # stated 0, kept


def test_rows_apart_from_their_residue_are_matched_by_id() -> None:
    # LYS 16's NZ row moved after the chain's last ATOM row: gemmi adds it to LYS 16 (its atoms are not
    # in the file's order), the row is found by its _atom_site.id
    edits = {("LYS", "NZ", "16"): "0", ("ASP", "OD2", "20"): "-1"}
    text, at = _edit_mmcif((STRUCTURES / "102m.cif").read_text(), edits, move=("LYS", "NZ", "16"))
    s = _featurize(text.encode(), "102m.cif")
    assert _charge_at(s, at[("LYS", "NZ", "16")]) == 0
    assert _charge_at(s, at[("ASP", "OD2", "20")]) == -1
    nz = _charges_of(s, "LYS", "NZ")
    assert sorted(q for _, _, q in nz) == [0] + [1] * (len(nz) - 1)


def test_rows_that_cannot_be_matched_to_atoms_decide_per_file() -> None:
    # the same, and two rows of one id: neither the order nor the ids pair rows with gemmi's atoms, so
    # an atom read as 0 is taken as stating none (the stated 0 too); a non-zero charge was stated
    edits = {("LYS", "NZ", "16"): "0", ("ASP", "OD2", "20"): "-1"}
    text, at = _edit_mmcif(
        (STRUCTURES / "102m.cif").read_text(), edits, move=("LYS", "NZ", "16"), dup_id=True
    )
    s = _featurize(text.encode(), "102m.cif")
    assert _charge_at(s, at[("LYS", "NZ", "16")]) == 1
    assert _charge_at(s, at[("ASP", "OD2", "20")]) == -1
    assert {q for _, _, q in _charges_of(s, "LYS", "NZ")} == {1}


def _pdb_with_charges(
    text: str, charges: dict[tuple[str, str, str], str]
) -> tuple[str, dict[tuple[str, str, str], tuple[float, ...]]]:
    """A PDB ``text`` with columns 79-80 of the atom (residue name, atom name, residue number) of
    ``charges`` set in the first model; and the coordinates of those atoms, by key."""
    out, done, model = [], {}, 0
    for line in text.splitlines():
        if line.startswith("MODEL"):
            model += 1
        key = (line[17:20].strip(), line[12:16].strip(), line[22:26].strip())
        if line.startswith("ATOM") and key in charges and model <= 1:
            line = line.ljust(78)[:78] + charges[key]
            done[key] = tuple(float(line[a:b]) for a, b in ((30, 38), (38, 46), (46, 54)))
        out.append(line)
    assert set(done) == set(charges)
    return "\n".join(out) + "\n", done


def test_a_pdb_files_stated_charges_are_kept() -> None:
    edits = {("LYS", "NZ", "158"): "0+", ("ASP", "OD2", "152"): "1-"}
    text, at = _pdb_with_charges((STRUCTURES / "1A8O.pdb").read_text(), edits)
    s = _featurize(text.encode(), "1A8O.pdb")
    assert _charge_at(s, at[("LYS", "NZ", "158")]) == 0
    assert _charge_at(s, at[("ASP", "OD2", "152")]) == -1
    nz, od2 = _charges_of(s, "LYS", "NZ"), _charges_of(s, "ASP", "OD2")
    assert sorted(q for _, _, q in nz) == [0] + [1] * (len(nz) - 1) and len(nz) > 2
    assert sorted(q for _, _, q in od2) == [-1] + [0] * (len(od2) - 1) and len(od2) > 2


def test_an_nmr_pdb_file_is_matched_on_its_first_model() -> None:
    # 1LCD.pdb: 3 models whose serial numbers start again in each; the first model is tokenized
    text = (STRUCTURES / "1LCD.pdb").read_text()
    serials = [line[6:11] for line in text.splitlines() if line.startswith("ATOM")]
    assert len(set(serials)) < len(serials)  # the premise
    text, at = _pdb_with_charges(text, {("LYS", "NZ", "2"): "0+", ("LYS", "NZ", "33"): "1-"})
    s = _featurize(text.encode(), "1LCD.pdb")
    assert _charge_at(s, at[("LYS", "NZ", "2")]) == 0
    assert _charge_at(s, at[("LYS", "NZ", "33")]) == -1
    nz = _charges_of(s, "LYS", "NZ")
    assert sorted(q for _, _, q in nz) == [-1, 0] + [1] * (len(nz) - 2) and len(nz) > 2


def test_a_binarycif_files_stated_charges_are_kept_and_the_masked_ones_are_the_ccds() -> None:
    # 6wg6 states -1 for 35 ASP OD2 / GLU OE2 atoms and masks (unknown) every other atom's charge
    s = _featurize((STRUCTURES / "6wg6.bcif.gz").read_bytes(), "6wg6.bcif.gz")
    assert gzip.decompress((STRUCTURES / "6wg6.bcif.gz").read_bytes())[:1] in (b"\x80", b"\x81", b"\x82", b"\x83",
                                                                                 b"\xde", b"\xdf")  # fmt: skip
    nz = _charges_of(s, "LYS", "NZ")
    assert sum(p for _, p, _ in nz) > 100 and {q for _, _, q in nz} == {1}
    stated = [q for _, p, q in _charges_of(s, "ASP", "OD2") + _charges_of(s, "GLU", "OE2") if p and q]
    assert stated == [-1] * 35


# ----------------------------------------------------------------------------- what a sample serves
def test_served_ref_charge_is_unchanged_and_equals_the_stored_charge(tmp_path: Path) -> None:
    """``ref_charge`` comes from the reference conformer (the CCD's charges), as it did; the stored
    ``atoms.charge`` of the atoms the CCD defines now equals it (it was 0 for resolved LYS NZ ...)."""
    from featurecache.client import FeatureDataset
    from featurecache.client.sampler import SampleKey
    from featurecache.store.reader import open_store

    pdb = tmp_path / "pdb"
    pdb.mkdir()
    for name in ("1GBT.cif", "102m.cif"):
        (pdb / name).write_bytes((STRUCTURES / name).read_bytes())
    summary = build_store(tmp_path / "store", pdb, workers=1, ccd=CCD)
    assert summary.n_failed == 0
    reader = open_store(tmp_path / "store")
    ds = FeatureDataset(tmp_path / "store", crop_size=100_000, max_atoms=None, workers=1)
    try:
        for eid in ("1GBT", "102m"):
            sample = ds.job(SampleKey(0, 0, 0, eid))
            entry = reader.entry(eid)
            res = [decode_res_name(r) for r in entry.tokens["res_name"][sample["token_index"]]]
            names = [decode_atom_name(n) for n in sample["ref_atom_name_chars"]]
            rows = np.concatenate([np.arange(s, s + c) for s, c in zip(entry.tokens["atom_start"][sample["token_index"]],
                                   entry.tokens["atom_count"][sample["token_index"]], strict=True)])  # fmt: skip
            assert [decode_atom_name(n) for n in entry.atoms["name"][rows]] == names
            stored = entry.atoms["charge"][rows]
            checked = charged = 0
            for k, (code, name) in enumerate(
                zip([res[t] for t in sample["atom_to_token"]], names, strict=True)
            ):
                if not (CCD / f"{code}.cif").is_file() or name not in _ccd_charges(code) or code == "GBS":
                    continue  # 1GBT's GBS follows another naming of its component (perceived)
                want = _ccd_charges(code)[name]
                assert int(sample["ref_charge"][k]) == want, (eid, code, name)
                assert int(stored[k]) == want, (eid, code, name)
                checked += 1
                charged += want != 0
            assert checked > 1000 and charged > 10
    finally:
        ds.close()
        reader.close()
