"""Copies of one molecule are one entity even when one copy misses atoms (a review's finding).

AF3 (``features._compute_asym_entity_and_sym_id``) keys ``entity_id`` / ``sym_id`` on the residue
names of a chain's tokens, and a per-atom residue has one token per CCD heavy atom, resolved or
not (``atom_layout.make_flat_atom_layout``), so two copies with the same residue names get the same
key whatever atoms the file resolved. We keyed on the present atoms, so a copy that missed one atom
of a modified residue or of a ligand became an entity of its own.

The inputs are real files edited with gemmi and written into ``tmp_path``; the expected grouping
comes from gemmi's reading of the written file (each subchain's residue names, no atoms), not from
our tokenizer. The atom counts that differ are counted in the written file too.
"""

from __future__ import annotations

from pathlib import Path

import gemmi

from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import STRUCTURES


def _read(path: Path) -> gemmi.Structure:
    st = gemmi.read_structure(str(path))
    st.setup_entities()
    return st


def _residue_names(st: gemmi.Structure) -> dict[str, tuple[str, ...]]:
    """label_asym_id → the subchain's residue names as gemmi reads the file (a polymer's entity
    sequence where the file states one), waters left out."""
    out: dict[str, tuple[str, ...]] = {}
    for ch in st[0]:
        for span in ch.subchains():
            names = tuple(r.name for r in span if r.name != "HOH")
            if not names:
                continue
            ent = st.get_entity_of(span)
            if ent is not None and ent.entity_type == gemmi.EntityType.Polymer and ent.full_sequence:
                names = tuple(x.split(",")[0] for x in ent.full_sequence)
            out[span.subchain_id()] = names
    return out


def _atom_counts(st: gemmi.Structure, subchain: str) -> list[int]:
    """Heavy atoms of each residue of ``subchain`` as the file has them."""
    return [
        sum(1 for a in r if a.element.name not in ("H", "D"))
        for ch in st[0]
        for span in ch.subchains()
        if span.subchain_id() == subchain
        for r in span
    ]


def _featurize(path: Path) -> Structure:
    return featurize_bytes(path.read_bytes(), path.name, path.stem)


def _check_grouping(s: Structure, names: dict[str, tuple[str, ...]]) -> None:
    """entity_id: one per distinct residue-name sequence; sym_id: 0, 1, 2 … over the chains of one
    sequence in chain order; the token arrays agree with the chain rows."""
    ids = {c.label_id: (c.entity_id, c.sym_id) for c in s.chains}
    assert set(ids) == set(names)
    groups: dict[tuple[str, ...], list[str]] = {}
    for c in s.chains:  # chain order
        groups.setdefault(names[c.label_id], []).append(c.label_id)
    assert len({v[0] for v in ids.values()}) == len(groups)
    for members in groups.values():
        assert len({ids[k][0] for k in members}) == 1
        assert [ids[k][1] for k in members] == list(range(len(members)))
    for c in s.chains:
        sl = slice(c.token_start, c.token_start + c.token_count)
        assert (s.tokens["entity_id"][sl] == c.entity_id).all()
        assert (s.tokens["sym_id"][sl] == c.sym_id).all()


def test_modified_residue_missing_an_atom_in_one_copy(tmp_path: Path) -> None:
    """3u8v (two copies of one protein chain): SER 1 → SEP in both chains, OG deleted in chain B.
    A and B have the same residue names → one entity, sym 0 and 1 (before: entities 0 and 1)."""
    st = _read(STRUCTURES / "3u8v.cif")
    for ch in st[0]:
        first = ch[0]
        if first.name != "SER":
            continue
        first.name = "SEP"
        first.het_flag = "H"
        if ch.name == "B":
            og = next(i for i, a in enumerate(first) if a.name == "OG")
            del first[og]
    poly = next(e for e in st.entities if e.entity_type == gemmi.EntityType.Polymer)
    assert poly.full_sequence[0] == "SER"
    poly.full_sequence = ["SEP", *poly.full_sequence[1:]]
    path = tmp_path / "3u8v_sep.cif"
    st.make_mmcif_document().write_file(str(path))

    written = _read(path)
    names = _residue_names(written)
    assert names["A"] == names["B"] and names["A"][0] == "SEP"
    assert _atom_counts(written, "A")[0] == _atom_counts(written, "B")[0] + 1  # OG gone from B only
    s = _featurize(path)
    by_label = {c.label_id: c for c in s.chains}
    assert by_label["A"].token_count == by_label["B"].token_count + 1  # the edit reached the tokens
    assert by_label["A"].entity_id == by_label["B"].entity_id
    assert sorted([by_label["A"].sym_id, by_label["B"].sym_id]) == [0, 1]
    _check_grouping(s, names)


def test_ligand_copy_missing_an_atom(tmp_path: Path) -> None:
    """1pfe: two QUI copies (subchains D and E, one mmCIF entity); atom O1 deleted from E's.
    D and E have the same residue names → one entity, sym 0 and 1 (before: two entities)."""
    st = _read(STRUCTURES / "1pfe.cif.gz")
    edited = 0
    for ch in st[0]:
        for span in ch.subchains():
            if span.subchain_id() != "E":
                continue
            res = span[0]
            assert res.name == "QUI"
            del res[next(i for i, a in enumerate(res) if a.name == "O1")]
            edited += 1
    assert edited == 1
    path = tmp_path / "1pfe_qui.cif"
    st.make_mmcif_document().write_file(str(path))

    written = _read(path)
    names = _residue_names(written)
    assert names["D"] == names["E"] == ("QUI",)
    assert _atom_counts(written, "D") == [n + 1 for n in _atom_counts(written, "E")]
    s = _featurize(path)
    by_label = {c.label_id: c for c in s.chains}
    assert by_label["D"].token_count == by_label["E"].token_count + 1
    assert by_label["D"].entity_id == by_label["E"].entity_id
    assert [by_label["D"].sym_id, by_label["E"].sym_id] == [0, 1]
    _check_grouping(s, names)
