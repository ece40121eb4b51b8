"""Component definitions for the structure featurizer: atoms of unresolved residues and bonds.

Both come from the CCD given with ``--ccd`` (then the packaged standard residues); a code neither
defines gets ``None`` and the featurizer falls back (one unresolved token / perceived bonds).
"""

from __future__ import annotations

from featurecache.chem.bonds import component_bonds
from featurecache.chem.library import get_library
from featurecache.const import HYDROGEN_ELEMENTS
from featurecache.featurize.bonds import ComponentBonds
from featurecache.tokenize.af3 import ComponentAtoms


def component_resolvers(ccd_path: str | None) -> tuple[ComponentAtoms, ComponentBonds]:
    library = get_library(ccd_path)

    def atoms(code: str) -> tuple[tuple[str, str], ...] | None:
        comp = library.get(code)
        if comp is None:
            return None
        return tuple(
            (n, el)
            for n, el in zip(comp.atom_names, comp.elements, strict=True)
            if el not in HYDROGEN_ELEMENTS
        )

    def bonds(code: str, names: list[str]) -> list[tuple[int, int, int]] | None:
        return component_bonds(code, names, ccd_path)

    return atoms, bonds
