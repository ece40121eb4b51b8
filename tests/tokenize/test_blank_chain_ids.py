"""Chains without an ID (R1 H3): a PDB whose chain column is blank (MD, Rosetta and PyMOL exports)
keeps its protein a protein, and an mmCIF whose atoms have no ``label_asym_id`` fails saying so.

gemmi makes no entity for a subchain of a chain without a name, so the 70-residue protein of
1A8O written with a blank chain column was stored as one ligand of 625 per-atom tokens, exit 0.
The blank chain is now named (the first ID no chain or SEQRES of the file uses, a warning says
which) and tokenized as the same file with that ID. Real files, damaged in memory.
"""

from __future__ import annotations

import numpy as np
import pytest

from featurecache.build.components import component_resolvers
from featurecache.const import PROTEIN_RESIDUES, MolType, decode_res_name
from featurecache.errors import TokenizeError
from featurecache.featurize.entry import featurize_bytes
from featurecache.types import Structure
from tests.conftest import CCD, STRUCTURES

#: (start, end) of the chain ID columns of each record kind that names a chain (0-based slices)
_CHAIN_COLUMNS = {
    b"ATOM": ((21, 22),),
    b"HETATM": ((21, 22),),
    b"TER": ((21, 22),),
    b"SEQRES": ((11, 12),),
    b"LINK": ((21, 22), (51, 52)),
    b"SSBOND": ((15, 16), (29, 30)),
}


def _featurize(data: bytes, name: str) -> Structure:
    atoms, bonds = component_resolvers(str(CCD))
    return featurize_bytes(data, name, name, component_atoms=atoms, component_bonds=bonds)


def _blank(data: bytes, kinds: tuple[bytes, ...], chain: bytes | None = None, to: bytes = b" ") -> bytes:
    """``data`` with the chain ID columns of the ``kinds`` records blanked (of ``chain`` only, if
    given), or set to ``to``."""
    out = []
    for line in data.split(b"\n"):
        kind = line[:6].rstrip()
        if kind in kinds:
            for a, b in _CHAIN_COLUMNS[kind]:
                if chain is None or line[a:b] == chain:
                    line = line[:a] + to + line[b:]
        out.append(line)
    return b"\n".join(out)


def _coordinates_only(data: bytes) -> bytes:
    return b"\n".join(
        line for line in data.split(b"\n") if line.startswith((b"ATOM", b"HETATM", b"TER", b"END"))
    )


def _same_arrays(a: Structure, b: Structure) -> None:
    for group in ("atoms", "tokens", "bonds", "interfaces"):
        x, y = getattr(a, group), getattr(b, group)
        assert x.dtype == y.dtype and np.array_equal(x, y), group


def _chain_ids(s: Structure) -> list[tuple[str, str, int]]:
    return [(c.label_id, c.auth_id, c.mol_type) for c in s.chains]


def test_blank_chain_without_seqres_is_the_protein_of_chain_a() -> None:
    """An MD-style file (coordinate records only) with a blank chain column: one protein chain A,
    array for array the file written with chain A; a warning names the ID it took."""
    chain_a = _coordinates_only((STRUCTURES / "1A8O.pdb").read_bytes())
    named = _featurize(chain_a, "a.pdb")
    blank = _featurize(_blank(chain_a, (b"ATOM", b"HETATM", b"TER")), "blank.pdb")
    assert _chain_ids(blank) == _chain_ids(named) == [("Axp", "A", MolType.PROTEIN)]
    assert len(blank.tokens) == 70 and not (blank.tokens["mol_type"] == MolType.LIGAND).any()
    _same_arrays(blank, named)
    assert [w for w in blank.warnings if "blank chain ID" in w] == [
        "158 residues have a blank chain ID: named chain A, the first ID that no chain or SEQRES of the file uses"
    ]


def test_blank_chain_everywhere_is_the_file_with_its_chain_id() -> None:
    """1A8O with its chain column blank in every record (SEQRES, LINK, SSBOND too): the entity
    sequence and the MSE links still apply, so every array is the original file's."""
    original = (STRUCTURES / "1A8O.pdb").read_bytes()
    blank = _featurize(_blank(original, tuple(_CHAIN_COLUMNS)), "blank.pdb")
    _same_arrays(blank, _featurize(original, "1A8O.pdb"))
    assert _chain_ids(blank) == [("Axp", "A", MolType.PROTEIN)]


def test_blank_chain_takes_no_id_of_another_chain_or_seqres() -> None:
    """7DDO's chain C blanked (its SEQRES left naming C): named B, not A (a chain) nor C (a
    SEQRES of no chain now, not taken for the blank one), its NAG (a HETATM part of its own after
    chain A's) included; its protein stays a protein, as in the file with chain C written B."""
    original = (STRUCTURES / "7DDO.pdb").read_bytes()
    atom_records = (b"ATOM", b"HETATM", b"TER")
    blank = _featurize(_blank(original, atom_records, chain=b"C"), "blank.pdb")
    as_b = _featurize(_blank(original, atom_records, chain=b"C", to=b"B"), "b.pdb")
    assert {c.auth_id for c in _featurize(original, "7DDO.pdb").chains} == {"A", "C"}
    assert {c.auth_id for c in blank.chains} == {"A", "B"}
    _same_arrays(blank, as_b)
    assert _chain_ids(blank) == _chain_ids(as_b)
    polymer = [c for c in blank.chains if c.mol_type != MolType.LIGAND]
    assert [(c.auth_id, c.mol_type) for c in polymer] == [("A", MolType.PROTEIN), ("B", MolType.PROTEIN)]
    ligand_names = {
        decode_res_name(r) for r in blank.tokens["res_name"][blank.tokens["mol_type"] == MolType.LIGAND]
    }
    assert not ligand_names & set(PROTEIN_RESIDUES)  # no amino acid tokenized per atom
    assert any("named chain B" in w for w in blank.warnings)


@pytest.mark.parametrize("columns", [("label_asym_id",), ("label_asym_id", "auth_asym_id")])
def test_mmcif_without_label_asym_id_fails_saying_so(columns: tuple[str, ...]) -> None:
    """102m.cif with ``.`` for every atom's label_asym_id (and auth_asym_id): a tokenize failure
    naming the column, not one ligand chain of 1421 per-atom tokens."""
    lines = (STRUCTURES / "102m.cif").read_text().split("\n")
    header = [i for i, line in enumerate(lines) if line.startswith("_atom_site.")]
    index = {lines[i].split(".", 1)[1].strip(): k for k, i in enumerate(header)}
    for i in range(header[-1] + 1, len(lines)):
        if not lines[i].startswith(("ATOM", "HETATM")):
            break
        values = lines[i].split()
        for column in columns:
            values[index[column]] = "."
        lines[i] = " ".join(values)
    with pytest.raises(TokenizeError) as info:
        _featurize("\n".join(lines).encode(), "dots.cif")
    assert info.value.stage == "tokenize"
    assert "311 residues of chain" in str(info.value) and "have no label_asym_id" in str(info.value)
