"""Component definitions for the structure featurizer: atoms of per-atom residues, and bonds.

Both come from the CCD given with ``--ccd`` (then the packaged standard residues); a code neither
defines gets ``None`` and the featurizer falls back (one unresolved token / perceived bonds).
Everything the featurizer takes from the CCD passes through these two (the tokenizer's standard
residues of one token each read the packaged set, which the featurizer version covers), so the
codes they are asked for are the definitions an entry used (``used``: what a build records per
entry, ``build.ccd_keys``).
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


def component_resolvers(
    ccd_path: str | None, used: dict[str, str] | None = None
) -> tuple[ComponentAtoms, ComponentBonds]:
    """The featurizer's two lookups over ``ccd_path`` (then the packaged standard residues).
    ``used``: each code looked up is recorded in it with the ``ComponentDef.sha256`` of the
    definition found, "" for a code neither defines (a lookup whose definition does not parse
    raises, and records nothing: its entry fails)."""
    library = get_library(ccd_path)

    def record(code: str) -> None:
        if used is not None and code not in used:
            comp = library.get(code)
            used[code] = comp.sha256 if comp is not None else ""

    def atoms(code: str) -> ComponentAtomSet | None:
        comp = library.get(code)
        record(code)
        if comp is None:
            return None
        heavy = tuple(
            (n, el, q)
            for n, el, q in zip(comp.atom_names, comp.elements, comp.charges, strict=True)
            if el not in HYDROGEN_ELEMENTS
        )
        return ComponentAtomSet(heavy, glycan=_GLYCAN_TYPE.search(comp.type) is not None)

    def bonds(code: str, names: list[str]) -> list[tuple[int, int, int]] | None:
        found = component_bonds(code, names, ccd_path)
        record(code)
        return found

    return atoms, bonds
