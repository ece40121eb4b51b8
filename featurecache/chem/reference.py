"""AF3 reference features (``ref_pos``, ``ref_mask``, …) by joining an entry onto the component table.

Entries do not store reference conformers. Each token carries its residue's CCD code
(``Token.res_name``) and each atom its name (``Atom.name``); the store keeps one reference
conformer per component (``index/components.arrow`` + ``parts/c-*``). :func:`reference_features`
looks every atom up by ``(code, atom name)``:

* found, and the component's conformer succeeded → ``ref_pos`` from the component, ``ref_mask`` True;
* code unknown → try the perceived key ``code#hash`` of the residue's atoms
  (:func:`featurecache.chem.conformer.perceived_key`), grouped by ``ref_space_uid``;
* still not found, or the component's strategy is ``failed`` → ``ref_mask`` False, ``ref_pos`` 0.

Leaving atoms need no special case: only atoms present in the entry are looked up. Atoms the
file did not resolve (``is_present`` False: a standard residue's missing atoms, and those of a
per-atom residue, which has every heavy atom of its CCD component) are looked up like any other,
so their reference features come from the component's conformer. The join is
vectorised (one ``searchsorted`` over packed ``(component, name)`` keys), so it costs well under a
millisecond for a few thousand atoms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from featurecache.chem.keys import perceived_key
from featurecache.const import (
    ATOM_NAME_CHARS,
    decode_atom_name,
    decode_res_name,
    encode_atom_name,
    encode_res_name,
)

__all__ = ["ComponentTable", "reference_features", "residue_reference_mask"]

if TYPE_CHECKING:  # conformer.py imports RDKit, which the lookup image (and the client) lack
    from featurecache.chem.conformer import ReferenceConformer


def _pack_names(names: np.ndarray) -> np.ndarray:
    """uint8 ``[n, 4]`` encoded atom names → uint32 ``[n]`` (each code < 64, one byte each)."""
    n = np.asarray(names, dtype=np.uint32).reshape(-1, ATOM_NAME_CHARS)
    return n[:, 0] | (n[:, 1] << 8) | (n[:, 2] << 16) | (n[:, 3] << 24)


@dataclass
class ComponentTable:
    """Every stored reference conformer, flat, in memory (components are small).

    Row ``r`` of the per-component columns covers atoms ``atom_start[r] : atom_start[r]+atom_count[r]``
    of the flat atom arrays: ``name`` uint8 ``[N, 4]``, ``ref_pos`` float32 ``[N, 3]``,
    ``mask`` bool ``[N]``, ``element`` uint8 ``[N]``, ``charge`` int8 ``[N]``. When a key occurs in
    several rows (a definition recomputed in a later build), the last row wins.
    """

    keys: list[str]
    strategy: list[str]
    atom_start: np.ndarray
    atom_count: np.ndarray
    name: np.ndarray
    ref_pos: np.ndarray
    mask: np.ndarray
    element: np.ndarray
    charge: np.ndarray
    _row: dict[str, int] = field(init=False, repr=False)
    _sorted_keys: np.ndarray = field(init=False, repr=False)
    _sorted_atoms: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.atom_start = np.asarray(self.atom_start, dtype=np.int64)
        self.atom_count = np.asarray(self.atom_count, dtype=np.int64)
        self._row = {k: r for r, k in enumerate(self.keys)}  # later rows override earlier ones
        rows = np.array(sorted(self._row.values()), dtype=np.int64)
        comp_ids = np.repeat(rows, self.atom_count[rows])
        atoms = (
            np.concatenate(
                [
                    np.arange(s, s + c)
                    for s, c in zip(self.atom_start[rows], self.atom_count[rows], strict=True)
                ]
            )
            if len(rows)
            else np.zeros(0, np.int64)
        )
        packed = (comp_ids.astype(np.uint64) << np.uint64(32)) | _pack_names(self.name[atoms]).astype(
            np.uint64
        )
        order = np.argsort(packed, kind="stable")
        self._sorted_keys = packed[order]
        self._sorted_atoms = atoms[order]

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, key: object) -> bool:
        return key in self._row

    def row(self, key: str) -> int | None:
        return self._row.get(key)

    def component(self, key: str) -> dict[str, Any]:
        """One component's arrays (``name`` decoded to str) and strategy; KeyError if absent."""
        r = self._row[key]
        s, c = int(self.atom_start[r]), int(self.atom_count[r])
        return {
            "key": key,
            "strategy": self.strategy[r],
            "atom_names": [decode_atom_name(x) for x in self.name[s : s + c]],
            "ref_pos": self.ref_pos[s : s + c],
            "mask": self.mask[s : s + c],
            "element": self.element[s : s + c],
            "charge": self.charge[s : s + c],
        }

    def lookup(self, comp_rows: np.ndarray, names: np.ndarray) -> np.ndarray:
        """Flat atom index for each ``(component row, encoded name)``; -1 where absent.

        ``comp_rows`` int ``[n]`` (-1 = unknown component), ``names`` uint8 ``[n, 4]``.
        """
        comp_rows = np.asarray(comp_rows, dtype=np.int64)
        out = np.full(len(comp_rows), -1, dtype=np.int64)
        ok = comp_rows >= 0
        if not ok.any() or len(self._sorted_keys) == 0:
            return out
        q = (comp_rows[ok].astype(np.uint64) << np.uint64(32)) | _pack_names(names[ok]).astype(np.uint64)
        pos = np.searchsorted(self._sorted_keys, q)
        pos_c = np.minimum(pos, len(self._sorted_keys) - 1)
        hit = self._sorted_keys[pos_c] == q
        res = np.where(hit, self._sorted_atoms[pos_c], -1)
        out[ok] = res
        return out

    @classmethod
    def from_conformers(cls, conformers: Sequence[ReferenceConformer]) -> ComponentTable:
        """A table from conformers computed in memory (tests, a one-off featurization)."""
        counts = np.array([c.n_atoms for c in conformers], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else np.zeros(0, np.int64)

        def cat(arrs: list[np.ndarray], shape: tuple[int, ...], dtype: Any) -> np.ndarray:
            return np.concatenate(arrs).astype(dtype) if arrs else np.zeros(shape, dtype)

        names = [
            np.array([encode_atom_name(n) for n in c.atom_names], np.uint8).reshape(-1, 4) for c in conformers
        ]
        return cls(
            keys=[c.key for c in conformers],
            strategy=[c.strategy for c in conformers],
            atom_start=starts,
            atom_count=counts,
            name=cat(names, (0, 4), np.uint8),
            ref_pos=cat([c.positions for c in conformers], (0, 3), np.float32),
            mask=cat([c.mask for c in conformers], (0,), np.bool_),
            element=cat([c.elements for c in conformers], (0,), np.uint8),
            charge=cat([c.charges for c in conformers], (0,), np.int8),
        )

    @classmethod
    def empty(cls) -> ComponentTable:
        return cls.from_conformers([])

    # Arrow form: one row per atom, the component key and strategy repeated (dictionary-encoded).
    # This is what a lookup service sends and what an HTTP client rebuilds the table from.
    def to_arrow(self) -> pa.Table:
        """One row per atom of every live component: key, strategy, name, ref_pos, mask, element, charge."""
        rows = np.array(sorted(self._row.values()), dtype=np.int64)
        counts = self.atom_count[rows]
        atoms = (
            np.concatenate([np.arange(s, s + c) for s, c in zip(self.atom_start[rows], counts, strict=True)])
            if len(rows)
            else np.zeros(0, np.int64)
        )
        keys = pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(rows), dtype=np.int32), counts)),
            pa.array([self.keys[r] for r in rows]),
        )
        strategies = pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(rows), dtype=np.int32), counts)),
            pa.array([self.strategy[r] for r in rows]),
        )
        pos = np.ascontiguousarray(self.ref_pos[atoms], dtype=np.float32).reshape(-1)
        names = np.ascontiguousarray(self.name[atoms], dtype=np.uint8).reshape(-1)
        return pa.table(
            {
                "key": keys,
                "strategy": strategies,
                "name": pa.FixedSizeListArray.from_arrays(pa.array(names, pa.uint8()), ATOM_NAME_CHARS),
                "ref_pos": pa.FixedSizeListArray.from_arrays(pa.array(pos, pa.float32()), 3),
                "mask": pa.array(self.mask[atoms]),
                "element": pa.array(self.element[atoms]),
                "charge": pa.array(self.charge[atoms]),
            }
        )

    @classmethod
    def from_arrow(cls, table: pa.Table) -> ComponentTable:
        """Inverse of :meth:`to_arrow` (rows of one key must be contiguous)."""
        n = table.num_rows
        if n == 0:
            return cls.empty()
        key_col = table.column("key").combine_chunks()
        strat_col = table.column("strategy").combine_chunks()
        keys_py = key_col.to_pylist()
        strat_py = strat_col.to_pylist()
        starts = [0] + [i for i in range(1, n) if keys_py[i] != keys_py[i - 1]]
        counts = np.diff(np.array([*starts, n], dtype=np.int64))

        def flat(col: str, width: int, dtype: Any) -> np.ndarray:
            arr = table.column(col).combine_chunks()
            return np.asarray(arr.flatten().to_numpy(zero_copy_only=False), dtype=dtype).reshape(n, width)

        return cls(
            keys=[keys_py[s] for s in starts],
            strategy=[strat_py[s] for s in starts],
            atom_start=np.array(starts, dtype=np.int64),
            atom_count=counts,
            name=flat("name", ATOM_NAME_CHARS, np.uint8),
            ref_pos=flat("ref_pos", 3, np.float32),
            mask=np.asarray(table.column("mask").to_numpy(zero_copy_only=False), dtype=bool),
            element=np.asarray(table.column("element").to_numpy(zero_copy_only=False), dtype=np.uint8),
            charge=np.asarray(table.column("charge").to_numpy(zero_copy_only=False), dtype=np.int8),
        )


def _field(table: Mapping[str, np.ndarray] | np.ndarray, name: str) -> np.ndarray:
    return np.asarray(table[name])


def residue_codes(entry_tokens: Mapping[str, np.ndarray] | np.ndarray) -> list[str]:
    """CCD code of each token (decoded ``res_name``)."""
    uniq, inv = np.unique(_pack_res_names(_field(entry_tokens, "res_name")), return_inverse=True)
    names = [_unpack_res_name(int(u)) for u in uniq]
    return [names[i] for i in np.asarray(inv).reshape(-1)]


def _pack_res_names(res: np.ndarray) -> np.ndarray:
    """uint8 ``[t, 5]`` encoded residue names → uint64 ``[t]`` (1-D unique is ~20x faster than axis=0)."""
    r = np.asarray(res, dtype=np.uint64).reshape(-1, 5)
    return r[:, 0] | (r[:, 1] << 8) | (r[:, 2] << 16) | (r[:, 3] << 24) | (r[:, 4] << 32)


def _unpack_res_name(packed: int) -> str:
    return decode_res_name([(packed >> (8 * i)) & 0xFF for i in range(5)])


@dataclass(frozen=True)
class Resolution:
    """Per entry atom: component-table ``rows`` int64 ``[n]`` (-1: none), ``flat`` int64 ``[n]``
    (atom of the table, -1: not found) and the key tried, ``key_names[key_ids[k]]``."""

    rows: np.ndarray
    flat: np.ndarray
    key_ids: np.ndarray
    key_names: list[str]

    def key(self, k: int) -> str:
        return self.key_names[int(self.key_ids[k])]


def resolve(
    entry_atoms: Mapping[str, np.ndarray] | np.ndarray,
    entry_tokens: Mapping[str, np.ndarray] | np.ndarray,
    table: ComponentTable,
) -> Resolution:
    """Which stored component and which of its atoms each entry atom takes its reference from.

    Per residue (atoms sharing ``ref_space_uid`` and code): the component of the CCD code; when
    the code is not stored, or some of the residue's atom names are not in it, the perceived
    component ``code#hash`` of the residue's atoms if one is stored (and did not fail) — so a
    residue's reference always comes from one conformer.
    """
    names = _field(entry_atoms, "name").reshape(-1, ATOM_NAME_CHARS)
    tok = _field(entry_atoms, "token_index").astype(np.int64)
    n = len(tok)
    if n == 0:
        z = np.zeros(0, np.int64)
        return Resolution(z, z, z, [])
    uniq, inv = np.unique(_pack_res_names(_field(entry_tokens, "res_name")), return_inverse=True)
    codes = [_unpack_res_name(int(u)) for u in uniq]
    code_rows = np.array([r if (r := table.row(c)) is not None else -1 for c in codes], dtype=np.int64)
    atom_code = np.asarray(inv).reshape(-1)[tok]
    rows = code_rows[atom_code]
    key_ids = atom_code.astype(np.int64)
    key_names = list(codes)
    flat = table.lookup(rows, names)
    unresolved = np.flatnonzero(flat < 0)
    if len(unresolved):
        uid = _field(entry_atoms, "ref_space_uid").astype(np.int64)
        elements = _field(entry_atoms, "element")
        residues = {(int(uid[k]), int(atom_code[k])) for k in unresolved}
        in_residue = {r: np.flatnonzero((uid == r[0]) & (atom_code == r[1])) for r in residues}
        for (_uid, ci), members in sorted(in_residue.items()):
            key = perceived_key(codes[ci], [(decode_atom_name(names[k]), int(elements[k])) for k in members])
            r = table.row(key)
            if r is None or (table.strategy[r] == "failed" and rows[members[0]] >= 0):
                continue
            rows[members] = r
            flat[members] = table.lookup(np.full(len(members), r, dtype=np.int64), names[members])
            key_ids[members] = len(key_names)
            key_names.append(key)
    return Resolution(rows, flat, key_ids, key_names)


def reference_features(
    entry_atoms: Mapping[str, np.ndarray] | np.ndarray,
    entry_tokens: Mapping[str, np.ndarray] | np.ndarray,
    component_table: ComponentTable,
) -> dict[str, np.ndarray]:
    """AF3 per-atom reference features of one entry, or of a subset of its atoms made of whole
    residues (every atom of each ``ref_space_uid`` it holds), with the entry's tokens.

    A residue's component is decided from all of its atoms (:func:`resolve`: a perceived key
    ``code#hash`` hashes them), so a subset that cuts a residue can get another conformer for the
    atoms it kept, or none: a crop looks up the whole residues it touched and takes its atoms'
    rows (``client.assemble.assemble_sample``).

    ``entry_atoms`` / ``entry_tokens``: mappings of field → array (``types.Entry.atoms``/``tokens``)
    or structured arrays of ``types.Atom``/``types.Token``; atoms need ``name``, ``element``,
    ``charge``, ``token_index``, ``ref_space_uid``; tokens need ``res_name``.

    Returns ``ref_pos`` float32 ``[n, 3]`` (0 where masked), ``ref_mask`` bool ``[n]``,
    ``ref_element`` uint8 ``[n]`` (atomic number; the component's, else the entry's),
    ``ref_charge`` int8 ``[n]`` (likewise), ``ref_atom_name_chars`` uint8 ``[n, 4]``,
    ``ref_space_uid`` int32 ``[n]``.
    """
    names = _field(entry_atoms, "name").reshape(-1, ATOM_NAME_CHARS).astype(np.uint8)
    n = len(names)
    flat = resolve(entry_atoms, entry_tokens, component_table).flat
    found = flat >= 0
    safe = np.where(found, flat, 0)
    entry_element = _field(entry_atoms, "element")
    entry_charge = _field(entry_atoms, "charge")
    mask = _ref_mask(flat, component_table)
    if len(component_table.mask):
        ref_pos = component_table.ref_pos[safe]  # fancy indexing copies
        ref_pos[~mask] = 0
        element = component_table.element[safe]
        element[~found] = np.asarray(entry_element)[~found]
        charge = component_table.charge[safe]
        charge[~found] = np.asarray(entry_charge)[~found]
    else:
        ref_pos = np.zeros((n, 3), np.float32)
        element = np.asarray(entry_element, dtype=np.uint8)
        charge = np.asarray(entry_charge, dtype=np.int8)
    return {
        "ref_pos": ref_pos.reshape(n, 3),
        "ref_mask": mask,
        "ref_element": element,
        "ref_charge": charge,
        "ref_atom_name_chars": names.copy(),
        "ref_space_uid": _field(entry_atoms, "ref_space_uid").astype(np.int32),
    }


def missing_reference_atoms(
    entry_atoms: Mapping[str, np.ndarray] | np.ndarray,
    entry_tokens: Mapping[str, np.ndarray] | np.ndarray,
    component_table: ComponentTable,
) -> list[tuple[str, str, str]]:
    """``(key, atom name, reason)`` for every atom whose ``ref_mask`` is False in
    :func:`reference_features` (a diagnostic of one entry; the build's chem stage warns of the
    same atoms by residue: :func:`residue_reference_mask`)."""
    names = _field(entry_atoms, "name").reshape(-1, ATOM_NAME_CHARS)
    res = resolve(entry_atoms, entry_tokens, component_table)
    rows, flat = res.rows, res.flat
    out: list[tuple[str, str, str]] = []
    for k in np.flatnonzero(~_ref_mask(flat, component_table)):
        name = decode_atom_name(names[k])
        if rows[k] < 0:
            why = "no reference conformer for the component"
        elif flat[k] < 0:
            why = "atom name not in the component definition"
        else:
            why = f"component strategy {component_table.strategy[int(rows[k])]}"
        out.append((res.key(int(k)), name, why))
    return out


def _ref_mask(flat: np.ndarray, table: ComponentTable) -> np.ndarray:
    """``ref_mask`` bool ``[n]`` of atoms that :func:`resolve` mapped to atoms ``flat`` int64
    ``[n]`` of ``table`` (-1: none): found, and its component's conformer has the atom (a failed
    component's has none)."""
    found = flat >= 0
    if not len(table.mask):
        return np.zeros(len(flat), dtype=bool)
    return found & table.mask[np.where(found, flat, 0)]


def residue_reference_mask(
    code: str, atoms: Sequence[tuple[str, int]], table: ComponentTable
) -> tuple[str, np.ndarray]:
    """One residue's reference as :func:`reference_features` takes it: the key of the component
    its atoms are looked up in (:func:`resolve`: ``code``, or the perceived ``code#hash`` of its
    atoms; ``code`` when neither is stored) and their ``ref_mask`` bool ``[n]``. ``atoms``: the
    residue's ``(atom name, atomic number)`` pairs. The build's chem stage warns of the atoms
    this leaves masked, so its warnings name the atoms a client finds masked."""
    n = len(atoms)
    if n == 0:
        return code, np.zeros(0, dtype=bool)
    names = np.array([encode_atom_name(name) for name, _z in atoms], np.uint8).reshape(n, ATOM_NAME_CHARS)
    entry_atoms: dict[str, np.ndarray] = {
        "name": names,
        "element": np.array([z for _name, z in atoms], np.uint8),
        "token_index": np.zeros(n, np.int64),
        "ref_space_uid": np.zeros(n, np.int64),
    }
    entry_tokens = {"res_name": np.array([encode_res_name(code)], np.uint8)}
    res = resolve(entry_atoms, entry_tokens, table)
    return res.key(0), _ref_mask(res.flat, table)
