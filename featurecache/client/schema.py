"""The batch the client yields and the model consumes: names, dtypes and shapes.

B = batch size, N = padded token count (≤ crop size), M = sampled MSA rows, A = padded atoms.
Every tensor is padded to the largest sample of the batch; masks say what is real: padding is 0
in every integer feature but ``restype`` and ``msa`` (gap, 31), and 0 is also a real value there
(the first chain's ``asym_id``, ``PROTEIN`` in ``mol_type``, the first token in ``atom_to_token``),
so gate pair features and scatters with ``token_mask`` / ``atom_mask``. An MSA row of a sample is
real where ``msa_mask[b, m].any()``. One-hots are never stored: the model embeds the integer
classes after the crop.
"""

from __future__ import annotations

from typing import Final

#: name -> (torch dtype name, shape in symbols)
BATCH_SCHEMA: Final[dict[str, tuple[str, str]]] = {
    # tokens
    "restype": ("int64", "B N"),  # const.RESTYPES, 32 classes
    "residue_index": ("int64", "B N"),  # 1-based position in the entity sequence (tokenize/af3.py)
    "asym_id": ("int64", "B N"),  # chain, 0-based in the entry's chain order
    "entity_id": ("int64", "B N"),  # 0-based: chains of one sequence share it
    "sym_id": ("int64", "B N"),  # 0-based copy number among the chains of one entity
    "mol_type": ("int64", "B N"),  # const.MolType
    "token_index": ("int64", "B N"),  # position of the token in the uncropped entry
    "token_mask": ("bool", "B N"),
    "token_bonds": ("bool", "B N N"),
    "centre_coords": ("float32", "B N 3"),  # ground-truth centre atom (Cα / C1′ / atom), Å
    "centre_mask": ("bool", "B N"),  # centre atom resolved
    # AF3 distogram representative atom (supplement §4.4): Cβ (Cα for GLY), C4 of purines, C2 of
    # pyrimidines, the atom of a per-atom token; Å, 0 where rep_mask is False
    "rep_coords": ("float32", "B N 3"),
    "rep_mask": ("bool", "B N"),  # representative atom among the token's atoms and resolved
    # MSA (AF3 supplement §2.8)
    "msa": ("int64", "B M N"),  # 32 classes, gap = 31
    "msa_mask": ("bool", "B M N"),
    "has_deletion": ("float32", "B M N"),
    "deletion_value": ("float32", "B M N"),  # 2/pi * arctan(d/3)
    "profile": ("float32", "B N 32"),  # over the full (uncropped-rows) MSA
    "deletion_mean": ("float32", "B N"),  # mean deletion count per column (raw counts, not arctan)
    # atoms of the kept tokens
    "atom_to_token": ("int64", "B A"),  # index into the N axis
    "atom_mask": ("bool", "B A"),  # real (not padding) atom
    "atom_present": ("bool", "B A"),  # resolved in the file
    "atom_coords": ("float32", "B A 3"),
    "ref_pos": ("float32", "B A 3"),  # augmented reference conformer
    "ref_mask": ("bool", "B A"),
    "ref_element": ("int64", "B A"),  # atomic number
    "ref_charge": ("float32", "B A"),  # formal charge of the CCD atom, in e
    "ref_atom_name_chars": ("int64", "B A 4"),
    "ref_space_uid": ("int64", "B A"),
}

#: Keys the model (featurecache.model) reads; the client must always provide these.
MODEL_INPUT_KEYS: Final[tuple[str, ...]] = (
    "restype", "residue_index", "token_index", "asym_id", "entity_id", "sym_id", "token_mask", "token_bonds",
    "msa", "msa_mask", "has_deletion", "deletion_value", "profile", "deletion_mean",
    "rep_coords", "rep_mask",
)  # fmt: skip
