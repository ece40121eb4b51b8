"""Synthetic batches that follow :data:`~featurecache.client.schema.BATCH_SCHEMA` exactly, and a
checker for any batch (synthetic or from the client).

Synthetic batches stand in for the client in tests and benchmarks of the model alone: chains of
tokens whose centre atoms walk 3.8 Å per step (so distogram targets span the bins) and whose
representative atom is one of their atoms, ligand tokens with bonds, an MSA with gaps and
deletions, and padding in every axis.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from featurecache.client.schema import BATCH_SCHEMA, MODEL_INPUT_KEYS
from featurecache.const import GAP, NUM_RESTYPES, MolType
from featurecache.errors import InvalidRequest

_DTYPES = {"int64": torch.int64, "float32": torch.float32, "bool": torch.bool}


def check_batch(batch: Mapping[str, Any], keys: tuple[str, ...] = MODEL_INPUT_KEYS) -> dict[str, int]:
    """Check ``keys`` of ``batch`` against BATCH_SCHEMA (dtype, rank, consistent symbols).

    Returns the sizes of the symbols (B, N, M, A …) found; raises :class:`InvalidRequest`.
    """
    sizes: dict[str, int] = {}
    for key in keys:
        if key not in batch:
            raise InvalidRequest(f"batch lacks {key!r}")
        dtype, shape = BATCH_SCHEMA[key]
        t = batch[key]
        if not isinstance(t, torch.Tensor) or t.dtype != _DTYPES[dtype]:
            raise InvalidRequest(f"{key}: expected a {dtype} tensor, got {getattr(t, 'dtype', type(t))}")
        symbols = shape.split()
        if t.dim() != len(symbols):
            raise InvalidRequest(f"{key}: expected shape [{shape}], got {tuple(t.shape)}")
        for sym, n in zip(symbols, t.shape, strict=True):
            if sym.isdigit():
                if int(sym) != n:
                    raise InvalidRequest(f"{key}: axis {sym} has size {n}")
            elif sizes.setdefault(sym, n) != n:
                raise InvalidRequest(f"{key}: {sym} = {n} but another key has {sym} = {sizes[sym]}")
    return sizes


#: pad values other than 0/False (a gap, class 31, as the client's ``collate`` pads)
_PAD = {"restype": GAP, "msa": GAP}


def pad_tokens(batch: Mapping[str, Any], multiple: int, cap: int | None = None) -> dict[str, Any]:
    """The batch with its token axis N padded up to a multiple of ``multiple`` (at most ``cap``).

    Every BATCH_SCHEMA tensor is padded along each of its ``N`` axes the way the client's
    ``collate`` pads a short sample (``token_mask`` / ``rep_mask`` / ``msa_mask`` False, restype
    and MSA a gap, the rest 0), so the model, which masks padded tokens everywhere, computes the same
    loss. Why: the Triton kernels specialise on N (divisibility by 16, whether the tiles divide N),
    and each new specialisation is a compilation of several seconds in the middle of training;
    with N a multiple of 128 every crop length runs the same compiled kernels. ``cap`` (the crop
    size) keeps the padding from growing a full-size batch. Keys outside the schema pass through.
    """
    if multiple < 1:
        raise InvalidRequest(f"pad multiple must be ≥ 1; got {multiple}")
    n = int(batch["token_mask"].shape[1])
    target = -(-n // multiple) * multiple
    if cap is not None:
        target = max(n, min(target, cap))
    return _pad_axis(batch, "N", n, target)


def pad_msa_rows(batch: Mapping[str, Any], min_rows: int = 64) -> dict[str, Any]:
    """The batch with its MSA-row axis M padded up to the next power of two (at least
    ``min_rows``), padded rows masked (``msa_mask`` False, a gap, no deletion). The client samples
    a different number of rows for every batch (AF3: uniform in 1 … min(depth, max rows)); the
    model only takes masked means over them, so the padding changes nothing but the shape, and a
    CUDA graph per shape (``train --cuda-graphs``) then needs a handful of row counts, not one per
    batch."""
    if min_rows < 1:
        raise InvalidRequest(f"min_rows must be ≥ 1; got {min_rows}")
    m = int(batch["msa"].shape[1])
    target = max(min_rows, 1 << max(m - 1, 0).bit_length())
    return _pad_axis(batch, "M", m, target)


def _pad_axis(batch: Mapping[str, Any], sym: str, n: int, target: int) -> dict[str, Any]:
    """Every BATCH_SCHEMA tensor padded along each of its ``sym`` axes from ``n`` to ``target``
    (the values of ``collate``'s padding); other keys pass through."""
    if target == n:
        return dict(batch)
    out: dict[str, Any] = {}
    for key, value in batch.items():
        spec = BATCH_SCHEMA.get(key)
        if spec is None or not isinstance(value, torch.Tensor):
            out[key] = value
            continue
        axes = spec[1].split()
        pad: list[int] = []  # F.pad order: last axis first, (before, after) each
        for s in reversed(axes):
            pad += [0, target - n if s == sym else 0]
        if not any(pad):
            out[key] = value
            continue
        out[key] = torch.nn.functional.pad(value, pad, value=_PAD.get(key, 0))
    return out


def synthetic_sample(
    rng: np.random.Generator, n_tokens: int, msa_rows: int, atoms_per_token: int = 4
) -> dict[str, np.ndarray]:
    """One unpadded sample (numpy), B axis absent."""
    n = n_tokens
    n_chains = int(rng.integers(1, 4)) if n >= 12 else 1
    cuts = (
        np.sort(rng.choice(np.arange(1, n), size=n_chains - 1, replace=False))
        if n_chains > 1
        else np.array([], int)
    )
    asym = np.zeros(n, np.int64)
    for c in cuts:
        asym[c:] += 1
    mol = np.full(n, int(MolType.PROTEIN), np.int64)
    n_lig = min(n // 8, 12)
    if n_lig:
        mol[-n_lig:] = int(MolType.LIGAND)
        asym[-n_lig:] = asym[-1] + 1
    restype = rng.integers(0, 20, n).astype(np.int64)
    restype[mol == int(MolType.LIGAND)] = 20  # UNK
    residue_index = np.zeros(n, np.int64)
    for a in np.unique(asym):
        sel = np.flatnonzero(asym == a)
        residue_index[sel] = np.arange(1, sel.size + 1)
    entity = asym.copy()
    sym = np.zeros(n, np.int64)
    if n_chains > 1:  # a homodimer: chains 0 and 1 share an entity
        entity[asym == 1] = 0
        sym[asym == 1] = 1
    bonds = np.zeros((n, n), bool)
    lig = np.flatnonzero(mol == int(MolType.LIGAND))
    for i, j in itertools.pairwise(lig):
        bonds[i, j] = bonds[j, i] = True
    steps = rng.normal(size=(n, 3))
    steps *= 3.8 / np.linalg.norm(steps, axis=1, keepdims=True)
    coords = np.cumsum(steps, axis=0).astype(np.float32)
    centre_mask = rng.random(n) > 0.05
    m = msa_rows
    msa = rng.integers(0, NUM_RESTYPES, (m, n)).astype(np.int64)
    msa[0] = restype
    msa[rng.random((m, n)) < 0.1] = GAP
    deletions = np.where(rng.random((m, n)) < 0.05, rng.integers(1, 20, (m, n)), 0).astype(np.float32)
    profile = (
        np.stack([np.bincount(msa[:, j], minlength=NUM_RESTYPES) for j in range(n)]).astype(np.float32) / m
    )
    a_total = n * atoms_per_token
    atom_to_token = np.repeat(np.arange(n), atoms_per_token).astype(np.int64)
    atom_coords = (coords[atom_to_token] + rng.normal(scale=1.2, size=(a_total, 3))).astype(np.float32)
    atom_present = rng.random(a_total) > 0.02
    # representative atom (no extra draws, so the stream of batches is unchanged): a polymer
    # token's second atom (a Cβ / C4 / C2 stand-in), a ligand token's only atom
    rep = np.arange(n) * atoms_per_token + np.where(
        mol == int(MolType.LIGAND), 0, min(1, atoms_per_token - 1)
    )
    return {
        "restype": restype, "residue_index": residue_index, "asym_id": asym, "entity_id": entity, "sym_id": sym,
        "mol_type": mol, "token_index": np.arange(n, dtype=np.int64), "token_bonds": bonds,
        "centre_coords": coords, "centre_mask": centre_mask,
        "rep_coords": atom_coords[rep], "rep_mask": centre_mask & atom_present[rep],
        "msa": msa, "msa_mask": np.ones((m, n), bool), "has_deletion": (deletions > 0).astype(np.float32),
        "deletion_value": (2.0 / math.pi * np.arctan(deletions / 3.0)).astype(np.float32),
        "profile": profile, "deletion_mean": deletions.mean(0).astype(np.float32),
        "atom_to_token": atom_to_token, "atom_present": atom_present, "atom_coords": atom_coords,
        "ref_pos": rng.normal(size=(a_total, 3)).astype(np.float32), "ref_mask": np.ones(a_total, bool),
        "ref_element": rng.choice([6, 7, 8, 16], a_total).astype(np.int64),
        "ref_charge": np.zeros(a_total, np.float32),
        "ref_atom_name_chars": rng.integers(0, 64, (a_total, 4)).astype(np.int64),
        "ref_space_uid": atom_to_token.copy(),
    }  # fmt: skip


def collate_synthetic(samples: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """Pad to the largest sample and stack into a BATCH_SCHEMA dict (masks mark what is real)."""
    sizes = {
        "N": max(s["restype"].shape[0] for s in samples),
        "M": max(s["msa"].shape[0] for s in samples),
        "A": max(s["atom_to_token"].shape[0] for s in samples),
    }
    batch: dict[str, torch.Tensor] = {}
    for key, (dtype, shape) in BATCH_SCHEMA.items():
        if key in ("token_mask", "atom_mask"):
            continue
        dims = [sizes[sym] if sym in sizes else int(sym) for sym in shape.split()[1:]]
        out = np.full((len(samples), *dims), _PAD.get(key, 0), dtype=np.dtype(dtype))
        for b, s in enumerate(samples):
            arr = s[key]
            index: tuple[int | slice, ...] = (b, *[slice(0, d) for d in arr.shape])
            out[index] = arr
        batch[key] = torch.from_numpy(out)
    batch["token_mask"] = torch.from_numpy(
        np.stack([np.arange(sizes["N"]) < s["restype"].shape[0] for s in samples])
    )
    batch["atom_mask"] = torch.from_numpy(
        np.stack([np.arange(sizes["A"]) < s["atom_to_token"].shape[0] for s in samples])
    )
    return batch


def synthetic_batch(
    rng: np.random.Generator,
    batch_size: int,
    crop_size: int,
    msa_rows: int = 64,
    full: bool = True,
) -> dict[str, torch.Tensor]:
    """A padded batch; ``full``: every sample has ``crop_size`` tokens, else between crop/2 and crop."""
    if crop_size < 2 or batch_size < 1:
        raise InvalidRequest(f"need crop_size ≥ 2 and batch_size ≥ 1; got {crop_size}, {batch_size}")
    lo = crop_size if full else max(2, crop_size // 2)
    samples = [
        synthetic_sample(rng, int(rng.integers(lo, crop_size + 1)), msa_rows) for _ in range(batch_size)
    ]
    return collate_synthetic(samples)


def synthetic_batches(
    batch_size: int, crop_size: int, seed: int = 0, msa_rows: int = 64, full: bool = True
) -> Iterator[dict[str, torch.Tensor]]:
    """An endless stream of synthetic batches (seeded)."""
    rng = np.random.default_rng(seed)
    while True:
        yield synthetic_batch(rng, batch_size, crop_size, msa_rows, full)
