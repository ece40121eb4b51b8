"""Standard residue definitions shipped with the package (see ``data/SOURCES.md``).

The 20 amino acids, ``UNK``, RNA ``A C G U`` and DNA ``DA DC DG DT`` come from the CCD blocks in
``data/standard_components.cif``, so standard residues need no ``--ccd`` input. The file is parsed
once per process, on first use.
"""

from __future__ import annotations

import functools
from importlib import resources

from featurecache.const import HYDROGEN_ELEMENTS, LEAVING_ATOMS
from featurecache.parse.ccd import ComponentDef, _iter_blocks, _parse_component

__all__ = [
    "STANDARD_CCD_FILE",
    "standard_component",
    "standard_components",
    "standard_heavy_atom_charges",
    "standard_heavy_atoms",
]

STANDARD_CCD_FILE = "standard_components.cif"


@functools.cache
def standard_components() -> dict[str, ComponentDef]:
    """Code → packaged CCD definition of every standard residue (29 codes)."""
    text = resources.files("featurecache.chem").joinpath("data", STANDARD_CCD_FILE).read_text("utf-8")
    return {
        code: _parse_component(block, line) for code, block, line in _iter_blocks(text.splitlines(True), None)
    }


def standard_component(code: str) -> ComponentDef | None:
    """The packaged definition of ``code``, or None if it is not a standard residue."""
    return standard_components().get(code)


@functools.cache
def standard_heavy_atoms(code: str, *, leaving: bool = False) -> tuple[tuple[str, str], ...]:
    """``((atom_name, element_symbol), ...)`` of a standard residue's heavy atoms, CCD order.

    Hydrogens are left out, and so are the leaving atoms (``OXT``, ``OP3``;
    ``const.LEAVING_ATOMS``) unless ``leaving``: a residue inside a chain has lost them, a chain's
    terminal residue may keep one (the tokenizer decides, as AF3's ``get_link_drop_atoms``).
    Element symbols are upper case as in the CCD (``"C"``, ``"SE"``). KeyError for a code that is
    not a packaged standard residue.
    """
    comp = standard_component(code)
    if comp is None:
        raise KeyError(f"{code!r} is not a packaged standard residue")
    return tuple(
        (name, el)
        for name, el in zip(comp.atom_names, comp.elements, strict=True)
        if el not in HYDROGEN_ELEMENTS and (leaving or name not in LEAVING_ATOMS)
    )


@functools.cache
def standard_heavy_atom_charges(code: str) -> dict[str, int]:
    """Atom name → formal charge (``_chem_comp_atom.charge``) of a standard residue's heavy atoms,
    leaving atoms included (ARG NH2 +1, LYS NZ +1, the rest 0). KeyError for a code that is not a
    packaged standard residue."""
    comp = standard_component(code)
    if comp is None:
        raise KeyError(f"{code!r} is not a packaged standard residue")
    return {
        name: int(q)
        for name, el, q in zip(comp.atom_names, comp.elements, comp.charges, strict=True)
        if el not in HYDROGEN_ELEMENTS
    }
