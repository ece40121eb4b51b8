"""Which entry (and which chain or interface of it) each step trains on.

The sampler turns the store's index tables into a deterministic stream of :class:`SampleKey`:
position ``p`` of the stream belongs to epoch ``p // len(sampler)`` and is sample
``p % len(sampler)`` of that epoch. An epoch's keys depend only on ``(seed, epoch)``, never on
workers or ranks, so any process can compute any position (that is what makes sharding and exact
resume possible; see :mod:`featurecache.client.loader`).

Weighting
---------
``"uniform"``: every entry that passes the filters once per epoch, in a random order (an epoch
longer than the entry count continues with further permutations).

``"af3"``: AF3's weighted-PDB sampling (supplement §2.5.1). The units are every chain with a
resolved token and every interface of the index; a unit is drawn with probability proportional to

    w = β / N_cluster · (α_protein · n_protein + α_nucleic · n_nucleic + α_ligand · n_ligand)

with β = 0.5 for chains and 1 for interfaces, α_protein = α_nucleic = 3, α_ligand = 1,
n_* the number of chains of that type in the unit, and N_cluster the number of units of the
dataset in the unit's cluster. Chain clusters come from ``cluster_table`` when one is given
(columns ``entry_id``, ``asym_id`` (int) or ``label_id`` (str), ``cluster_id``); chains missing
from it — or every chain without a table — are clustered by **identical sequence** (the store's
``sequence_hash``; for ligands the CCD codes). That is AF3's rule for nucleic acids and ligands and
a stricter one than its 40 % identity for proteins: without a cluster table, homologous proteins
are not down-weighted. An interface's cluster is the unordered pair of its chains' clusters.
An ``"af3"`` epoch has ``samples_per_epoch`` draws with replacement (default: the number of
entries passing the filters).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featurecache.const import MolType
from featurecache.errors import InvalidRequest

log = logging.getLogger(__name__)

WEIGHTINGS: Final[tuple[str, ...]] = ("uniform", "af3")
AF3_BETA_CHAIN: Final = 0.5
AF3_BETA_INTERFACE: Final = 1.0
AF3_ALPHA_PROTEIN: Final = 3.0
AF3_ALPHA_NUCLEIC: Final = 3.0
AF3_ALPHA_LIGAND: Final = 1.0
_SAMPLER_STREAM: Final = 0x5A3D  # keeps the sampler's generator apart from per-sample generators


@dataclass(frozen=True)
class SampleKey:
    """One position of the sample stream.

    ``chains``: the reference chains (asym ids) the sampler picked — ``()`` for the whole entry,
    ``(c,)`` for a chain, ``(a, b)`` for an interface; spatial crops centre there.
    """

    position: int
    epoch: int
    index: int
    entry_id: str
    chains: tuple[int, ...] = ()


@dataclass(frozen=True)
class SamplerFilter:
    """Which entries may be sampled.

    ``max_resolution`` Å (entries without a resolution pass unless ``keep_unknown_resolution`` is
    False); ``date_cutoff`` ISO date, entries released after it are dropped (undated ones pass
    unless ``keep_undated`` is False); ``min_tokens`` / ``max_tokens`` bound the entry's token
    count; ``ids`` restricts to the given entry ids (kept in the order of the index).
    """

    max_resolution: float | None = None
    date_cutoff: str | None = None
    min_tokens: int | None = None
    max_tokens: int | None = None
    keep_unknown_resolution: bool = True
    keep_undated: bool = True
    ids: Sequence[str] | None = None

    def mask(self, entries: pa.Table) -> np.ndarray:
        n = entries.num_rows
        keep = np.ones(n, dtype=bool)
        if self.max_resolution is not None:
            res = _column(entries, "resolution", np.float64)
            unknown = ~np.isfinite(res)
            keep &= np.where(unknown, self.keep_unknown_resolution, res <= self.max_resolution)
        if self.date_cutoff is not None:
            dates = [str(d or "") for d in entries.column("release_date").to_pylist()]
            cutoff = self.date_cutoff[:10]
            ok = np.array([(d[:10] <= cutoff) if d else self.keep_undated for d in dates], dtype=bool)
            keep &= ok if n else keep
        if self.min_tokens is not None:
            keep &= _column(entries, "token_count", np.int64) >= self.min_tokens
        if self.max_tokens is not None:
            keep &= _column(entries, "token_count", np.int64) <= self.max_tokens
        if self.ids is not None:
            keep &= np.asarray(
                pc.is_in(entries.column("id"), pa.array(list(self.ids), pa.string())), dtype=bool
            )
        return keep


def _nothing_to_sample(n_entries: int, filters: SamplerFilter, failures: pa.Table | None) -> str:
    """Why a sampler has no entry: an empty store (say so, and where its failures are listed) or
    filters that leave none (name the filters given)."""
    if n_entries == 0:
        n = None if failures is None else failures.num_rows
        failed = "" if n is None else f"; {n} input{'s' if n != 1 else ''} failed to build"
        return (f"the store has no entries{failed}: `featurecache info STORE --failures` lists the inputs "
                f"that failed and why")  # fmt: skip
    given = {
        name: (f"{len(value)} ids" if name == "ids" else value)
        for name, value in vars(filters).items()
        if value is not None and value != getattr(SamplerFilter, name)
    }
    said = ", ".join(f"{k}={v}" for k, v in given.items())
    return f"no entry of the store's {n_entries} passes the sampler's filters ({said or 'none given'})"


def _column(table: pa.Table, name: str, dtype: Any) -> np.ndarray:
    col = table.column(name)
    fill = math.nan if np.dtype(dtype).kind == "f" else 0
    return np.asarray(pc.fill_null(col, fill).to_numpy(zero_copy_only=False), dtype=dtype)


class Sampler:
    """Deterministic, seeded stream of :class:`SampleKey` over a store's index tables.

    ``entries`` / ``chains`` / ``interfaces``: the reader's Arrow tables (``chains`` and
    ``interfaces`` are needed for ``weighting="af3"``); ``failures``: optional, the reader's
    failures table, counted in the error when the store has no entry at all. ``len(sampler)`` is
    the epoch length.
    """

    def __init__(
        self,
        entries: pa.Table,
        chains: pa.Table | None = None,
        interfaces: pa.Table | None = None,
        *,
        weighting: str = "uniform",
        cluster_table: pa.Table | None = None,
        filters: SamplerFilter | None = None,
        samples_per_epoch: int | None = None,
        seed: int = 0,
        failures: pa.Table | None = None,
    ) -> None:
        if weighting not in WEIGHTINGS:
            raise InvalidRequest(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        self.weighting = weighting
        self.seed = int(seed)
        self.filters = filters or SamplerFilter()
        keep = self.filters.mask(entries)
        self.entry_ids: list[str] = [
            str(x) for x in np.asarray(entries.column("id").to_pylist(), dtype=object)[keep]
        ]
        if not self.entry_ids:
            raise InvalidRequest(_nothing_to_sample(entries.num_rows, self.filters, failures))
        if weighting == "uniform":
            self._unit_entry = np.arange(len(self.entry_ids), dtype=np.int64)
            self._unit_chains = np.full((len(self.entry_ids), 2), -1, dtype=np.int64)
            self._p: np.ndarray | None = None
        else:
            if chains is None or interfaces is None:
                raise InvalidRequest("weighting='af3' needs the chains and interfaces tables")
            self._unit_entry, self._unit_chains, weights = _af3_units(
                self.entry_ids, chains, interfaces, cluster_table
            )
            if weights.size == 0 or weights.sum() <= 0:
                raise InvalidRequest("no chain or interface with a resolved token to sample")
            self._p = weights / weights.sum()
        self.epoch_length = int(samples_per_epoch) if samples_per_epoch else len(self.entry_ids)
        if self.epoch_length < 1:
            raise InvalidRequest(f"samples_per_epoch must be >= 1, got {samples_per_epoch}")
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        log.debug("sampler: %d entries, %d units, %s, epoch of %d", len(self.entry_ids), self._unit_entry.size,
                  weighting, self.epoch_length)  # fmt: skip

    def __len__(self) -> int:
        return self.epoch_length

    @property
    def n_units(self) -> int:
        return int(self._unit_entry.size)

    @property
    def unit_probabilities(self) -> np.ndarray:
        """float64 ``[n_units]`` draw probability of every unit (uniform: 1 / n_entries each)."""
        if self._p is None:
            return np.full(self.n_units, 1.0 / self.n_units)
        return self._p.copy()

    def unit(self, u: int) -> tuple[str, tuple[int, ...]]:
        """(entry id, reference chains) of unit ``u``."""
        a, b = (int(x) for x in self._unit_chains[u])
        chains = tuple(c for c in (a, b) if c >= 0)
        return self.entry_ids[int(self._unit_entry[u])], chains

    def epoch_units(self, epoch: int) -> np.ndarray:
        """int64 ``[len(self)]`` unit of every sample of ``epoch``."""
        hit = self._cache.get(epoch)
        if hit is not None:
            return hit[0]
        rng = np.random.default_rng([self.seed, int(epoch), _SAMPLER_STREAM])
        n = self.epoch_length
        if self._p is None:
            reps = -(-n // self.n_units)
            units = np.concatenate([rng.permutation(self.n_units) for _ in range(reps)])[:n]
        else:
            units = rng.choice(self.n_units, size=n, replace=True, p=self._p)
        units = units.astype(np.int64)
        if len(self._cache) >= 2:
            self._cache.pop(min(self._cache))
        self._cache[epoch] = (units, units)
        return units

    def key(self, position: int) -> SampleKey:
        if position < 0:
            raise InvalidRequest(f"stream positions are >= 0, got {position}")
        epoch, index = divmod(int(position), self.epoch_length)
        entry_id, chains = self.unit(int(self.epoch_units(epoch)[index]))
        return SampleKey(int(position), epoch, index, entry_id, chains)


# ---------------------------------------------------------------------------------- AF3 weights
def _af3_units(
    entry_ids: list[str], chains: pa.Table, interfaces: pa.Table, cluster_table: pa.Table | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Units (entry row, (chain_a, chain_b)) and their unnormalized AF3 weights."""
    row_of = {e: i for i, e in enumerate(entry_ids)}
    ids = pa.array(entry_ids, pa.string())
    ch = chains.filter(pc.is_in(chains.column("entry_id"), ids))
    if "n_resolved" in ch.column_names:
        ch = ch.filter(pc.greater(pc.fill_null(ch.column("n_resolved"), 0), 0))
    ch_entry = [str(x) for x in ch.column("entry_id").to_pylist()]
    ch_asym = np.asarray(ch.column("asym_id").to_pylist(), dtype=np.int64)
    ch_type = np.asarray(ch.column("mol_type").to_pylist(), dtype=np.int64)
    ch_cluster = _chain_clusters(ch, ch_entry, ch_asym, cluster_table)
    chain_key = {(e, int(a)): i for i, (e, a) in enumerate(zip(ch_entry, ch_asym.tolist(), strict=True))}

    itf = interfaces.filter(pc.is_in(interfaces.column("entry_id"), ids))
    i_entry = [str(x) for x in itf.column("entry_id").to_pylist()]
    i_a = itf.column("chain_i").to_pylist()
    i_b = itf.column("chain_j").to_pylist()
    i_rows: list[tuple[int, int]] = []
    i_pairs: list[tuple[int, int]] = []
    for e, a, b in zip(i_entry, i_a, i_b, strict=True):
        ka, kb = chain_key.get((e, int(a))), chain_key.get((e, int(b)))
        if ka is not None and kb is not None:  # both chains resolved and kept
            i_rows.append((ka, kb))
            i_pairs.append((int(a), int(b)))

    # chain units
    n_c = len(ch_entry)
    c_entry = np.asarray([row_of[e] for e in ch_entry], dtype=np.int64)
    c_size = _cluster_sizes(ch_cluster)
    c_w = AF3_BETA_CHAIN / c_size * _type_weight(ch_type)
    c_units = (
        np.stack([ch_asym, np.full(n_c, -1, dtype=np.int64)], axis=1) if n_c else np.zeros((0, 2), np.int64)
    )

    # interface units
    if i_rows:
        ra = np.asarray([r[0] for r in i_rows], dtype=np.int64)
        rb = np.asarray([r[1] for r in i_rows], dtype=np.int64)
        pair_cluster = [
            "|".join(sorted((ch_cluster[x], ch_cluster[y])))
            for x, y in zip(ra.tolist(), rb.tolist(), strict=True)
        ]
        i_size = _cluster_sizes(pair_cluster)
        i_w = AF3_BETA_INTERFACE / i_size * (_type_weight(ch_type[ra]) + _type_weight(ch_type[rb]))
        i_entry_rows = c_entry[ra]
        i_units = np.asarray(i_pairs, dtype=np.int64)
    else:
        i_w = np.zeros(0)
        i_entry_rows = np.zeros(0, dtype=np.int64)
        i_units = np.zeros((0, 2), dtype=np.int64)
    return (
        np.concatenate([c_entry, i_entry_rows]),
        np.concatenate([c_units, i_units]),
        np.concatenate([c_w, i_w]).astype(np.float64),
    )


def _type_weight(mol_type: np.ndarray) -> np.ndarray:
    prot = mol_type == MolType.PROTEIN
    nuc = (mol_type == MolType.RNA) | (mol_type == MolType.DNA)
    lig = mol_type == MolType.LIGAND
    return AF3_ALPHA_PROTEIN * prot + AF3_ALPHA_NUCLEIC * nuc + AF3_ALPHA_LIGAND * lig


def _cluster_sizes(labels: Sequence[str]) -> np.ndarray:
    if not labels:
        return np.zeros(0)
    enc = pa.array(list(labels), pa.string()).dictionary_encode()
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.bincount(codes)[codes].astype(np.float64)


def _chain_clusters(
    ch: pa.Table, ch_entry: list[str], ch_asym: np.ndarray, cluster_table: pa.Table | None
) -> list[str]:
    default = [f"seq:{h}" for h in ch.column("sequence_hash").to_pylist()]
    if cluster_table is None:
        return default
    cols = set(cluster_table.column_names)
    if "cluster_id" not in cols or "entry_id" not in cols or not ({"asym_id", "label_id"} & cols):
        raise InvalidRequest("cluster_table needs columns entry_id, cluster_id and asym_id or label_id")
    t_entry = [str(x) for x in cluster_table.column("entry_id").to_pylist()]
    t_cluster = [f"table:{x}" for x in cluster_table.column("cluster_id").to_pylist()]
    out = list(default)
    n_hit = 0
    if "asym_id" in cols:
        lookup = {
            (e, int(a)): c
            for e, a, c in zip(t_entry, cluster_table.column("asym_id").to_pylist(), t_cluster, strict=True)
        }
        for i, (e, a) in enumerate(zip(ch_entry, ch_asym.tolist(), strict=True)):
            c = lookup.get((e, int(a)))
            if c is not None:
                out[i], n_hit = c, n_hit + 1
    else:
        lookup_l = {
            (e, str(lbl)): c
            for e, lbl, c in zip(
                t_entry, cluster_table.column("label_id").to_pylist(), t_cluster, strict=True
            )
        }
        labels = [str(x) for x in ch.column("label_id").to_pylist()]
        for i, (e, lbl) in enumerate(zip(ch_entry, labels, strict=True)):
            c = lookup_l.get((e, lbl))
            if c is not None:
                out[i], n_hit = c, n_hit + 1
    if n_hit < len(out):
        log.info(
            "cluster table covers %d of %d chains; the rest cluster by identical sequence", n_hit, len(out)
        )
    return out
