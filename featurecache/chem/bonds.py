"""Intra-component bonds from CCD definitions (for the featurizer's ``Bond`` table, source COMPONENT).

``component_bonds(code, atom_names)`` gives the bonds among the atoms of one residue as it occurs
in an entry: only bonds whose two atoms are both in ``atom_names`` (so leaving atoms and
unresolved atoms drop out naturally), indices into ``atom_names``. It returns None when no
definition is known for ``code``, or when some of ``atom_names`` are not atoms of the definition
(e.g. a ligand written with non-CCD atom names) — the caller then perceives bonds from distances
itself, just as the reference conformer of such a residue is perceived (``chem.reference``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

from featurecache.chem.library import get_library

__all__ = ["clear_bond_cache", "component_bonds"]

#: types.Bond ``order`` of an aromatic bond.
AROMATIC_ORDER = 4


def clear_bond_cache() -> None:
    """Forget the cached bond lists (see :func:`featurecache.chem.library.clear_component_caches`)."""
    _bonds_cached.cache_clear()


@functools.lru_cache(maxsize=16384)
def _bonds_cached(
    path: str | None, code: str, names: tuple[str, ...]
) -> tuple[tuple[int, int, int], ...] | None:
    comp = get_library(path).get(code)
    if comp is None:
        return None
    known = set(comp.atom_names)
    if not known.issuperset(names):
        return None
    where = {name: k for k, name in enumerate(names)}
    out: list[tuple[int, int, int]] = []
    for i, j, order, aromatic, _stereo in comp.bonds:
        a, b = where.get(comp.atom_names[i]), where.get(comp.atom_names[j])
        if a is None or b is None or a == b:
            continue
        a, b = min(a, b), max(a, b)
        out.append((a, b, AROMATIC_ORDER if aromatic else min(order, 3)))
    return tuple(sorted(set(out)))


def component_bonds(
    code: str, atom_names: Sequence[str], ccd_path: str | os.PathLike[str] | None = None
) -> list[tuple[int, int, int]] | None:
    """Bonds ``(i, j, order)`` among ``atom_names`` from the definition of ``code``.

    ``i < j`` index ``atom_names``; ``order`` is 1/2/3, or 4 for a bond the CCD flags aromatic
    (types.Bond). Definitions come from ``ccd_path`` (a ``components.cif[.gz]`` or a directory)
    and the packaged standard residues. None when neither defines ``code`` or when an atom name is
    not in its definition.
    """
    path = None if ccd_path is None else str(ccd_path)
    got = _bonds_cached(path, code, tuple(n.strip() for n in atom_names))
    return None if got is None else list(got)
