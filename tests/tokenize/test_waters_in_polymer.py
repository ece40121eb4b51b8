"""A water among a PDB chain's ATOM records keeps the polymer whole (review R25a s43 #7).

gemmi ends a PDB chain's polymer at its first water: 1A8O.pdb with the line ``ATOM 121 CZ TYR A
164`` renamed ``HOH`` was stored as 57 chains, every residue after the "water" a ligand chain of
per-atom tokens (559 tokens, 1045 atoms, instead of 70 and 556), silently.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from featurecache.build.components import component_resolvers
from featurecache.featurize.entry import featurize_bytes
from featurecache.tokenize.af3 import ComponentAtoms
from featurecache.types import Structure
from tests.conftest import CCD, STRUCTURES

CZ_164 = "ATOM    121  CZ  TYR A 164"


@cache
def _ccd_atoms() -> ComponentAtoms:
    return component_resolvers(str(CCD))[0]


def _featurize(text: str) -> Structure:
    return featurize_bytes(text.encode(), "1A8O.pdb", "1A8O", component_atoms=_ccd_atoms())


def _water_warnings(s: Structure) -> list[str]:
    return [w for w in s.warnings if "water residue" in w]


def test_one_atom_line_named_hoh_inside_the_chain_leaves_the_polymer_whole() -> None:
    text = (STRUCTURES / "1A8O.pdb").read_text()
    assert CZ_164 in text
    clean, hoh = _featurize(text), _featurize(text.replace(CZ_164, CZ_164.replace("TYR", "HOH")))
    assert len(hoh.chains) == len(clean.chains) == 1
    assert hoh.tokens.tobytes() == clean.tokens.tobytes()
    assert hoh.bonds.tobytes() == clean.bonds.tobytes()
    # the one atom the file no longer has as TYR 164's is absent; everything else is as it was
    differ = np.flatnonzero(hoh.atoms != clean.atoms)
    assert (
        len(differ) == 1 and not hoh.atoms["is_present"][differ[0]] and clean.atoms["is_present"][differ[0]]
    )
    assert _water_warnings(hoh) == [
        "chain A: 1 water residue(s) among the ATOM records of its polymer (HOH 164 after TYR 164): read as "
        "waters after the polymer, which stays one chain"
    ]
    assert _water_warnings(clean) == []  # its 88 waters follow the polymer, as in every wwPDB file


def test_a_water_residue_between_two_residues_leaves_the_polymer_whole() -> None:
    lines = (STRUCTURES / "1A8O.pdb").read_text().splitlines(keepends=True)
    k = max(i for i, line in enumerate(lines) if line.startswith("ATOM") and line[22:26] == " 180")
    water = "HETATM  999  O   HOH A 501      20.000  20.000  20.000  1.00 30.00           O  \n"
    clean, moved = _featurize("".join(lines)), _featurize("".join([*lines[: k + 1], water, *lines[k + 1 :]]))
    for group in ("atoms", "tokens", "bonds", "interfaces"):
        assert getattr(moved, group).tobytes() == getattr(clean, group).tobytes(), group
    assert len(moved.chains) == 1
    assert _water_warnings(moved) == [
        "chain A: 1 water residue(s) among the ATOM records of its polymer (HOH 501 after GLU 180): read as "
        "waters after the polymer, which stays one chain"
    ]
