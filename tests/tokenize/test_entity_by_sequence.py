"""``entity_id`` / ``sym_id`` follow the sequence, not the mmCIF entity (a review's finding 2).

SI Table 5: "entity_id: Unique integer for each distinct sequence"; "sym_id: Unique integer within
chains of this sequence. E.g. if chains A, B and C share a sequence but D does not, their sym_ids
would be [0, 1, 2, 0]". AF3 (``features._compute_asym_entity_and_sym_id``) keys both on the residue
names of a chain's tokens, ligands included. The inputs are real files with one chain moved to an
mmCIF entity of its own (gemmi writes the edited file); the expected grouping comes from gemmi's
reading of the written file (each subchain's residue names), not from our tokenizer.
"""

from __future__ import annotations

import gemmi
import numpy as np

from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import STRUCTURES


def _split(name: str, subchain: str, new_entity: str) -> str:
    """``name`` rewritten by gemmi with ``subchain`` moved to a new entity ``new_entity`` (same type,
    same sequence)."""
    st = gemmi.read_structure(str(STRUCTURES / name))
    st.setup_entities()
    old = next(e for e in st.entities if subchain in e.subchains)
    assert len(old.subchains) > 1, "the chain must share its entity to be moved out"
    ent = gemmi.Entity(new_entity)
    ent.entity_type = old.entity_type
    ent.polymer_type = old.polymer_type
    ent.full_sequence = list(old.full_sequence)
    ent.subchains = [subchain]
    old.subchains = [s for s in old.subchains if s != subchain]
    st.entities.append(ent)
    for ch in st[0]:
        for res in ch:
            if res.subchain == subchain:
                res.entity_id = new_entity
    return st.make_mmcif_document().as_string()


def _gemmi_sequences(text: str) -> dict[str, tuple[str, ...]]:
    """label_asym_id → (mmCIF entity, the subchain's sequence), as gemmi reads the file: a polymer's
    entity sequence (``_entity_poly_seq``, unresolved residues included, as AF3 and our tokens have
    them), else the residue names of the subchain; waters left out."""
    st = gemmi.make_structure_from_block(gemmi.cif.read_string(text).sole_block())
    out = {}
    for ch in st[0]:
        for span in ch.subchains():
            names = tuple(r.name for r in span if r.name != "HOH")
            if names:
                ent = st.get_entity_of(span)
                if ent is not None and ent.entity_type == gemmi.EntityType.Polymer and ent.full_sequence:
                    names = tuple(x.split(",")[0] for x in ent.full_sequence)
                out[span.subchain_id()] = (ent.name if ent else "", *names)
    return out


def _ids(s: Structure) -> dict[str, tuple[int, int]]:
    return {c.label_id: (c.entity_id, c.sym_id) for c in s.chains}


def test_identical_protein_chains_in_two_mmcif_entities_are_one_entity() -> None:
    """2q2k: protein chains B and C (one mmCIF entity); C moved to an entity of its own."""
    text = _split("2q2k.cif", "C", "9")
    seqs = _gemmi_sequences(text)
    assert seqs["B"][0] != seqs["C"][0]  # two mmCIF entities in the written file …
    assert seqs["B"][1:] == seqs["C"][1:]  # … with the same residues
    s = featurize_bytes(text.encode(), "2q2k_split.cif", "2q2k_split")
    ids = _ids(s)
    assert ids["B"][0] == ids["C"][0]
    assert sorted([ids["B"][1], ids["C"][1]]) == [0, 1]
    # the DNA chain and the EPE ligand are other sequences: entities of their own, sym 0
    others = {k: v for k, v in ids.items() if k not in ("B", "C")}
    assert len({v[0] for v in others.values()} | {ids["B"][0]}) == len(others) + 1
    assert all(v[1] == 0 for v in others.values())
    # token arrays agree with the chain rows
    for c in s.chains:
        sl = slice(c.token_start, c.token_start + c.token_count)
        assert (s.tokens["entity_id"][sl] == c.entity_id).all() and (s.tokens["sym_id"][sl] == c.sym_id).all()


def test_ligand_copies_in_two_mmcif_entities_are_one_entity() -> None:
    """5kc1: ions of one mmCIF entity in several subchains; one subchain moved to an entity of its own."""
    st = gemmi.read_structure(str(STRUCTURES / "5kc1.cif"))
    spans = {sp.subchain_id(): sp for ch in st[0] for sp in ch.subchains()}
    ni = next(
        e
        for e in st.entities
        if e.entity_type == gemmi.EntityType.NonPolymer
        and len(e.subchains) > 1
        and all(len(r) == 1 for sc in e.subchains for r in spans[sc])  # one-atom ions
    )
    moved = ni.subchains[-1]
    text = _split("5kc1.cif", moved, "99")
    seqs = _gemmi_sequences(text)
    copies = [k for k, v in seqs.items() if v[1:] == seqs[moved][1:]]
    assert len(copies) == len(ni.subchains) and len({seqs[k][0] for k in copies}) == 2
    s = featurize_bytes(text.encode(), "5kc1_split.cif", "5kc1_split")
    ids = _ids(s)
    assert len({ids[k][0] for k in copies}) == 1
    assert sorted(ids[k][1] for k in copies) == list(range(len(copies)))


def test_spec_example_sym_ids() -> None:
    """SI Table 5's example: chains A, B, C share a sequence, D does not → sym_id [0, 1, 2, 0] (and
    entity ids [e, e, e, f]). 5kc1 holds 12 chains of one sequence; the first three protein chains
    and the first chain of another sequence, in token order, must read that way."""
    s = featurize_bytes((STRUCTURES / "5kc1.cif").read_bytes(), "5kc1.cif", "5kc1")
    seqs = _gemmi_sequences((STRUCTURES / "5kc1.cif").read_text())
    by_label = {c.label_id: c for c in s.chains}
    first = s.chains[0].label_id
    same = [c.label_id for c in s.chains if seqs[c.label_id][1:] == seqs[first][1:]][:3]
    other = next(c.label_id for c in s.chains if seqs[c.label_id][1:] != seqs[first][1:])
    picked = [*same, other]
    assert [by_label[k].sym_id for k in picked] == [0, 1, 2, 0]
    ent = [by_label[k].entity_id for k in picked]
    assert ent[0] == ent[1] == ent[2] != ent[3]
    assert np.unique(s.tokens["entity_id"]).size == len({seqs[c.label_id][1:] for c in s.chains})
