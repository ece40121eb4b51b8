"""The sequence hash: the key that joins chains to MSAs (and deduplicates MSAs in the store)."""

from __future__ import annotations

import hashlib

from featurecache.const import MOL_TYPE_NAMES

SEQUENCE_HASH_CHARS = 20


def sequence_hash(sequence: str, mol_type: int) -> str:
    """Hex key of a chain sequence: sha256 of ``"<mol type name>:<sequence>"``, 20 hex characters.

    ``sequence`` is one letter per residue in the chain's alphabet (protein: 20 letters + ``X``;
    RNA ``ACGU`` + ``N``; DNA ``ACGT`` + ``N``), upper case, no gaps. The molecule type is part of
    the key so an RNA and a DNA chain with the same letters never share an MSA.
    """
    text = f"{MOL_TYPE_NAMES[mol_type]}:{sequence.strip().upper()}"
    return hashlib.sha256(text.encode()).hexdigest()[:SEQUENCE_HASH_CHARS]
