"""Component definitions for the structure featurizer: atoms of per-atom residues, and bonds.

Both come from the CCD given with ``--ccd`` (then the packaged standard residues); a code neither
defines gets ``None`` and the featurizer falls back (one unresolved token / perceived bonds).
"""

from __future__ import annotations

import re

from featurecache.chem.bonds import component_bonds
from featurecache.chem.library import get_library
from featurecache.const import HYDROGEN_ELEMENTS
from featurecache.featurize.bonds import ComponentBonds
from featurecache.tokenize.af3 import ComponentAtoms, ComponentAtomSet

#: AF3's glycans (chemical_component_sets_gen): the word "saccharide" in the CCD type.
_GLYCAN_TYPE = re.compile(r"\bsaccharide\b", re.IGNORECASE)


def component_resolvers(ccd_path: str | None) -> tuple[ComponentAtoms, ComponentBonds]:
    library = get_library(ccd_path)

    def atoms(code: str) -> ComponentAtomSet | None:
        comp = library.get(code)
        if comp is None:
            return None
        heavy = tuple(
            (n, el, q)
            for n, el, q in zip(comp.atom_names, comp.elements, comp.charges, strict=True)
            if el not in HYDROGEN_ELEMENTS
        )
        return ComponentAtomSet(heavy, glycan=_GLYCAN_TYPE.search(comp.type) is not None)

    def bonds(code: str, names: list[str]) -> list[tuple[int, int, int]] | None:
        return component_bonds(code, names, ccd_path)

    return atoms, bonds
