"""Component keys and seeds: pure functions with no RDKit, shared by the build and the readers.

A component defined by the CCD (or the packaged standard residues) is keyed by its code. A residue
no definition covers — or whose atom names its definition lacks — is keyed ``code#<8 hex>``, the
hash of its sorted ``(atom name, atomic number)`` pairs: the same unknown residue with the same
atoms always gets the same key, whichever entry or build it comes from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["component_seed", "perceived_key"]


def component_seed(code: str) -> int:
    """Embedding seed of a component: ``int(sha256(code)[:4]) mod 2**31`` (deterministic)."""
    return int.from_bytes(hashlib.sha256(code.encode()).digest()[:4], "big") % (2**31)


def perceived_key(code: str, atoms: Sequence[tuple[str, int]]) -> str:
    """Table key of a component with no (matching) definition: ``code#<8 hex>``.

    The hash is over the sorted ``(atom name, atomic number)`` pairs of the residue's heavy atoms.
    """
    text = "\n".join(f"{n}:{z}" for n, z in sorted((n.strip(), int(z)) for n, z in atoms))
    return f"{code}#{hashlib.sha256(text.encode()).hexdigest()[:8]}"
