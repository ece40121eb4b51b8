"""Elements of atoms whose file gives none, from their residues' definitions.

gemmi gives an atom element X when mmCIF's ``_atom_site.type_symbol`` is ``?``, ``.``, absent or
not an element symbol (721p-assembly1 writes ``M`` for its Mg ions), or when a PDB line's element
columns are blank and its name does not tell. The tokenizer would then guess from the atom name,
and mmCIF atom names are not aligned as PDB's are: CA became calcium, OG oganesson. Here an atom's
element comes from what is known instead: its residue's definition (the packaged standard
residues, else the CCD given to the build) by atom name; an atom the definition lacks whose name
starts with H or D is a hydrogen (the definitions the build reads list heavy atoms only); a water's
atoms are O, H or D by their first letter; an atom named as its residue and as an element is that
ion (``MG`` in ``MG``). An atom none of these places is refused, naming it: a guessed element would
be stored as if the file had said it.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import gemmi

from featurecache.chem.standard import standard_component
from featurecache.errors import ParseError
from featurecache.text import first_named

if TYPE_CHECKING:
    from featurecache.tokenize.af3 import ComponentAtoms

__all__ = ["resolve_unknown_elements"]

#: gemmi selection of the atoms whose element is unknown (one C++ pass over a model)
_UNKNOWN = gemmi.Selection("[X]")
#: Residues named in a refusal or a warning; the rest counted.
_MAX_NAMED = 5
#: Atoms of one residue named in a refusal; the rest counted.
_MAX_ATOMS = 8


def resolve_unknown_elements(
    st: gemmi.Structure, name: str, component_atoms: ComponentAtoms | None
) -> str | None:
    """Set the element of every atom of the first model whose element is unknown (X); a warning
    naming them, or None when there were none. ParseError (stage ``parse``) naming the atoms whose
    element cannot be known: no definition of their residue names them, and no rule of the
    module's docstring applies."""
    if len(st) == 0 or _UNKNOWN.copy_model_selection(st[0]).count_atom_sites() == 0:
        return None
    resolved: list[str] = []
    #: (residue, why) -> the atoms of that residue whose element cannot be known for that reason
    unknown: dict[tuple[str, str], list[str]] = {}
    #: residue name -> its definition's atom name -> element (None: no definition), looked up once
    defined: dict[str, dict[str, str] | None] = {}
    for chain in st[0]:
        for res in chain:
            for atom in res:
                if atom.element.atomic_number != 0:
                    continue
                if res.name not in defined:
                    defined[res.name] = _definition(res.name, component_atoms)
                symbol, why = _element_of(res, atom.name, defined[res.name], component_atoms is not None)
                if symbol is None:
                    where = f"{res.name} {res.seqid} in chain {chain.name}"
                    unknown.setdefault((where, why), []).append(atom.name)
                    continue
                atom.element = gemmi.Element(symbol)
                resolved.append(res.name)
    if unknown:
        n_atoms = sum(len(atoms) for atoms in unknown.values())
        refused = [f"{_atoms(atoms)} of {where} ({why})" for (where, why), atoms in unknown.items()]
        raise ParseError(
            f"{name}: no element for {n_atoms} atom(s) the file gives none (mmCIF type_symbol or PDB "
            f"element columns missing, '?' or not an element): {_listed(refused)}. Write their elements, or "
            "give --ccd with their residues' definitions",
            stage="parse",
        )
    by_residue = Counter(resolved)
    listed = first_named(
        (f"{code} {n}" for code, n in by_residue.most_common()), _MAX_NAMED, noun="residue names"
    )
    return (
        f"no element in the file (mmCIF type_symbol or PDB element columns missing, '?' or not an element) "
        f"for {len(resolved)} atom(s): taken from their residues' definitions by atom name (atoms by "
        f"residue: {listed})"
    )


def _definition(code: str, component_atoms: ComponentAtoms | None) -> dict[str, str] | None:
    """Atom name -> element of residue ``code``'s definition (packaged standard, else --ccd)."""
    standard = standard_component(code)
    if standard is not None:
        return dict(zip(standard.atom_names, standard.elements, strict=True))
    if component_atoms is not None and (defined := component_atoms(code)) is not None:
        return {atom: element for atom, element, _charge in defined.atoms}
    return None


def _element_of(
    res: gemmi.Residue, atom_name: str, names: dict[str, str] | None, have_ccd: bool
) -> tuple[str | None, str]:
    """(element symbol, "") of one atom of ``res``, or (None, why it cannot be known); ``names``:
    its definition's atom names and elements (:func:`_definition`)."""
    if res.is_water():  # no definition needed (and waters are dropped): O, H or D
        return (atom_name[0], "") if atom_name[:1] in ("O", "H", "D") else (None, "not an atom of water")
    if names is not None:
        symbol = names.get(atom_name)
        if symbol is not None and gemmi.Element(symbol).atomic_number > 0:
            return symbol, ""
        if symbol is None and atom_name[:1] in ("H", "D"):
            return atom_name[0], ""  # a hydrogen (deuterium) the heavy-atom definition leaves out
        if symbol is not None:
            return None, f"its definition gives element {symbol}"
    if atom_name == res.name and gemmi.Element(atom_name).atomic_number > 0:
        return atom_name, ""  # a single-atom ion, named as its element
    if names is None:
        return None, f"no definition of {res.name}" + ("" if have_ccd else " without --ccd")
    return None, f"not in {res.name}'s definition"


def _atoms(names: list[str]) -> str:
    return first_named(names, _MAX_ATOMS)


def _listed(items: list[str]) -> str:
    return first_named(items, _MAX_NAMED, "; ", noun="residues")
