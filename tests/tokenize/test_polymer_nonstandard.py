"""A non-standard residue inside a polymer chain stays in that chain (a review's finding 3).

SI Table 5: "residue_index: Residue number in the token's original input chain"; AF3's tokenizer
(``features.tokenizer``) keeps every residue of a polymer chain in it, a non-standard one as
per-atom tokens. 209d-assembly1's actinomycin peptide (chain C, no entity sequence in the file)
holds PXA at label_seq 6, between MVA 5 and THR 7; before, PXA became a ligand chain ``C_PXA6`` and
the other residues were renumbered 1..10 (THR 7 read 6). Expected values come from gemmi's reading
of the file (label_seq ids, atom counts) and from counting the HETATM records.
"""

from __future__ import annotations

import gemmi
import numpy as np

from featurecache.const import PROTEIN_RESIDUES, UNK_PROTEIN, MolType
from featurecache.featurize.entry import featurize_bytes
from tests.conftest import STRUCTURES


def _gemmi_chain(path: str, chain: str) -> list[tuple[str, int, int]]:
    """(residue name, label_seq, heavy atoms) of every residue of ``chain`` in gemmi's model."""
    st = gemmi.read_structure(str(STRUCTURES / path))
    return [
        (r.name, int(r.label_seq), len({a.name for a in r if a.element.name not in ("H", "D")}))
        for r in st[0][chain]
    ]


def test_pxa_stays_in_its_peptide_with_label_seq_numbering() -> None:
    s = featurize_bytes((STRUCTURES / "209d-assembly1.cif").read_bytes(), "209d-assembly1.cif", "209d")
    gem = _gemmi_chain("209d-assembly1.cif", "C")
    assert [n for n, _, _ in gem][4:7] == ["MVA", "PXA", "THR"]
    labels = [c.label_id for c in s.chains]
    assert not any(lab.startswith("C_") for lab in labels), labels  # no ligand chain split off
    c = next(ch for ch in s.chains if ch.label_id == "C")
    sl = slice(c.token_start, c.token_start + c.token_count)
    tok = s.tokens[sl]
    # residue_index = label_seq of each residue; one token per standard residue, per atom otherwise
    names = [n for n, _, _ in gem]
    expected = np.concatenate([np.full(1 if n in PROTEIN_RESIDUES else k, seq) for n, seq, k in gem])
    np.testing.assert_array_equal(tok["residue_index"], expected)
    assert len(c.sequence) == len(gem) == 11
    pxa = tok["residue_index"] == 6
    assert int(pxa.sum()) == dict((n, k) for n, _, k in gem)["PXA"] == 22
    assert (tok["mol_type"][pxa] == MolType.PROTEIN).all()  # the chain's type, not ligand
    assert (tok["restype"][pxa] == UNK_PROTEIN).all() and not tok["is_standard"][pxa].any()
    assert (tok["asym_id"] == c.asym_id).all() and (tok["entity_id"] == c.entity_id).all()
    assert c.sequence[5] == "X" and names[5] == "PXA"
    # THR 7 and MVA 5 are two apart, as in the file
    thr = tok["residue_index"][tok["restype"] == PROTEIN_RESIDUES.index("THR")]
    assert thr.tolist() == [seq for n, seq, _ in gem if n == "THR"] == [1, 7]
    # THR1 N–PXA6 C0 and PXA6 C0'–THR7 N are polymer–polymer links: not token bonds (AF3's
    # remove_polymer_polymer_bonds); only PXA's own bonds join its tokens
    bonded = {(int(i), int(j)) for i, j in zip(s.bonds["token_i"], s.bonds["token_j"], strict=True)}
    chain_tokens = set(range(c.token_start, c.token_start + c.token_count))
    pxa_tokens = {c.token_start + int(k) for k in np.flatnonzero(pxa)}
    assert not any(
        (i in pxa_tokens) != (j in pxa_tokens) for i, j in bonded if i in chain_tokens and j in chain_tokens
    )


def test_ligands_after_the_last_residue_of_a_rewritten_subchain_stay_ligands() -> None:
    """721p-assembly1 puts MG 167 and GNP 168 into the protein's subchain (label_seq after HIS 166,
    label_entity_id of the protein): they stay ligand chains (2 x (GNP 32 + MG 1) HETATM heavy atoms)."""
    s = featurize_bytes((STRUCTURES / "721p-assembly1.cif").read_bytes(), "721p-assembly1.cif", "721p")
    ligand = [c for c in s.chains if c.mol_type == MolType.LIGAND]
    assert sorted(c.label_id for c in ligand) == ["A_GNP168", "A_MG167", "B_GNP168", "B_MG167"]
    assert int((s.tokens["mol_type"] == MolType.LIGAND).sum()) == 66
    prot = [c for c in s.chains if c.mol_type == MolType.PROTEIN]
    gem = _gemmi_chain("721p-assembly1.cif", "A")
    assert [len(c.sequence) for c in prot] == [len([g for g in gem if g[0] not in ("MG", "GNP")])] * 2
