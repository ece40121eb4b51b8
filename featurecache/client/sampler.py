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

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from featurecache.arrow_columns import column_array
from featurecache.const import MolType
from featurecache.errors import InvalidRequest

log = logging.getLogger(__name__)

WEIGHTINGS: Final[tuple[str, ...]] = ("uniform", "af3")
AF3_BETA_CHAIN: Final = 0.5
AF3_BETA_INTERFACE: Final = 1.0
AF3_ALPHA_PROTEIN: Final = 3.0
AF3_ALPHA_NUCLEIC: Final = 3.0
AF3_ALPHA_LIGAND: Final = 1.0
# The sampler's generator is seeded [seed, epoch, 0x5A3D]; a sample's is [seed, epoch, index]
# (client/job.py; a per-epoch padding sample's index is its index in the padded epoch:
# SampleKey.draw), so the sample at index 23101 of an epoch of more draws from the stream that chose
# that epoch's units (review R31c s47 #3). Its crop method and reference token are then a function
# of the epoch's permutation: harmless statistically, and separating the streams (another tag or
# length; a trailing 0 is no change to a SeedSequence) would change every stored run's samples.
_SAMPLER_STREAM: Final = 0x5A3D
#: Seeds are ``0 <= seed < SEED_LIMIT``: numpy's ``SeedSequence`` splits a larger int into 32-bit
#: words, so ``[2**32 + a, epoch, index]`` seeded what ``[a, 1, epoch, index]`` (≡ ``[a, 1, epoch]``
#: when ``index`` is 0) does: another seed's samples (review R41b s51 #2). Refused, not mixed into a
#: wider key, which would change every run's samples.
SEED_LIMIT: Final = 2**32


def check_seed(seed: object, owner: str) -> int:
    """``seed`` as an int, or an :class:`InvalidRequest` (a ``ValueError``) naming ``owner``'s
    ``seed`` and the range: an integer (not a bool), ``0 <= seed < 2**32`` (:data:`SEED_LIMIT`)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < SEED_LIMIT:
        raise InvalidRequest(
            f"{owner}: seed must be an integer with 0 ≤ seed < 2**32 ({SEED_LIMIT}); got {seed!r} (numpy "
            "splits a seed of 2**32 or more into 32-bit words: its samples would be other seeds')"
        )
    return int(seed)


@dataclass(frozen=True)
class SampleKey:
    """One position of the sample stream.

    ``chains``: the reference chains (asym ids) the sampler picked — ``()`` for the whole entry,
    ``(c,)`` for a chain, ``(a, b)`` for an interface; spatial crops centre there.

    ``draw``: the index whose generator, ``[seed, epoch, draw]``, seeds the sample's randomness
    (crop, MSA rows, conformer augmentation) where it is not ``index`` (None): a per-epoch padding
    position's index in its padded epoch (``FeatureDataset``), which draws the epoch's
    ``index``-th unit again with randomness of its own, as a ``DistributedSampler``'s padding draws
    its index again (review R41b s51 #1: it was the same generator, a byte-identical copy).
    """

    position: int
    epoch: int
    index: int
    entry_id: str
    chains: tuple[int, ...] = ()
    draw: int | None = None

    @property
    def draw_index(self) -> int:
        """The third word of the sample's generator key: ``draw``, else ``index``."""
        return self.index if self.draw is None else self.draw


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

    def __post_init__(self) -> None:
        if isinstance(self.ids, str | bytes):  # its characters were taken as ids (review R26c s44 #6)
            raise InvalidRequest(
                f"SamplerFilter(ids=...) takes a list of entry ids, not one string: ids=[{self.ids!r}]"
            )

    def mask(self, entries: pa.Table) -> np.ndarray:
        n = entries.num_rows
        keep = np.ones(n, dtype=bool)
        if self.max_resolution is not None:
            res = column_array(entries, "resolution", np.float64)
            unknown = ~np.isfinite(res)
            keep &= np.where(unknown, self.keep_unknown_resolution, res <= self.max_resolution)
        if self.date_cutoff is not None:
            dates = [str(d or "") for d in entries.column("release_date").to_pylist()]
            cutoff = self.date_cutoff[:10]
            ok = np.array([(d[:10] <= cutoff) if d else self.keep_undated for d in dates], dtype=bool)
            keep &= ok if n else keep
        if self.min_tokens is not None:
            keep &= column_array(entries, "token_count", np.int64) >= self.min_tokens
        if self.max_tokens is not None:
            keep &= column_array(entries, "token_count", np.int64) <= self.max_tokens
        if self.ids is not None:
            keep &= np.asarray(
                pc.is_in(entries.column("id"), pa.array(list(self.ids), pa.string())), dtype=bool
            )
        return keep


#: ids named in a message about ids not in the store
SHOWN_IDS: Final = 5


def _missing_ids(ids: Sequence[str], entries: pa.Table) -> list[str]:
    """The ids of ``ids`` that are not an entry of ``entries`` (each once, in the given order).
    ``SamplerFilter(ids=...)`` left them out without a word (review R26c s44 #4): an id of another
    store, of an old plan, or in other case (``102M`` for ``102m``) shrank the training set."""
    given = pa.array(list(dict.fromkeys(ids)), pa.string())
    found = np.asarray(pc.is_in(given, value_set=entries.column("id").combine_chunks()), dtype=bool)
    missing = [str(x) for x in np.asarray(given.to_pylist(), dtype=object)[~found]]
    if missing:  # say which are the store's in other case: ids are case-sensitive
        have = {str(x).lower(): str(x) for x in entries.column("id").to_pylist()}
        missing = [f"{m} (the store has {have[m.lower()]})" if m.lower() in have else m for m in missing]
    return missing


def _missing_text(missing: list[str], n_given: int) -> str:
    shown = ", ".join(missing[:SHOWN_IDS]) + (", …" if len(missing) > SHOWN_IDS else "")
    return (f"{len(missing)} of the {n_given} ids given are not in the store: {shown} (entry ids are "
            f"the store's, case-sensitive: store.ids())")  # fmt: skip


def _nothing_to_sample(
    n_entries: int, filters: SamplerFilter, failures: pa.Table | None, missing: list[str] | None = None
) -> str:
    """Why a sampler has no entry: an empty store (say so, and where its failures are listed) or
    filters that leave none (name the filters given, and the ids given that the store lacks)."""
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
    why = f"no entry of the store's {n_entries} passes the sampler's filters ({said or 'none given'})"
    return f"{why}; {_missing_text(missing, len(filters.ids or ()))}" if missing else why


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
        self.seed = check_seed(seed, "Sampler")
        self.filters = filters or SamplerFilter()
        keep = self.filters.mask(entries)
        self.entry_ids: list[str] = [
            str(x) for x in np.asarray(entries.column("id").to_pylist(), dtype=object)[keep]
        ]
        missing = [] if self.filters.ids is None else _missing_ids(self.filters.ids, entries)
        if not self.entry_ids:
            raise InvalidRequest(_nothing_to_sample(entries.num_rows, self.filters, failures, missing))
        if missing:
            log.warning(
                "SamplerFilter: %s; they are left out", _missing_text(missing, len(self.filters.ids or ()))
            )
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
        self._digest: str | None = None
        log.debug("sampler: %d entries, %d units, %s, epoch of %d", len(self.entry_ids), self._unit_entry.size,
                  weighting, self.epoch_length)  # fmt: skip

    def __len__(self) -> int:
        return self.epoch_length

    def stream_digest(self) -> str:
        """sha256 of what maps a position to its sample, the seed and epoch length aside: the
        entries (in order), the units (entry, chains) and their draw probabilities. Two samplers
        of one digest, seed and epoch length draw the same stream. Computed once (a sampler does not
        change; at 4M units it takes ~0.2 s, and ``state_dict`` asks for it at every step)."""
        if self._digest is not None:
            return self._digest
        h = hashlib.sha256()
        h.update(self.weighting.encode() + b"\0" + "\n".join(self.entry_ids).encode() + b"\0")
        for a in (self._unit_entry, self._unit_chains, self.unit_probabilities):
            h.update(np.ascontiguousarray(a).tobytes())
        self._digest = h.hexdigest()
        return self._digest

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
    """Units and their unnormalized AF3 weights: int64 ``[n_units]`` entry row (index into
    ``entry_ids``), int64 ``[n_units, 2]`` chains (asym ids; ``-1`` second for a chain unit),
    float64 ``[n_units]`` weight. Chain units first (in the order of ``chains``), then interface
    units (in the order of ``interfaces``).

    Vectorised: entries are their row in ``entry_ids``, a chain is the int64 key of (entry row,
    asym id), clusters are int64 codes; no per-row Python object is made (review F3: 8.6–10 s and
    +624 MB held at 200k entries with per-row lists and dicts)."""
    ids = pa.array(entry_ids, pa.string())
    wanted = ("entry_id", "asym_id", "label_id", "mol_type", "sequence_hash", "n_resolved")
    ch = chains.select([c for c in chains.column_names if c in wanted])  # not the sequences
    itf = interfaces.select(["entry_id", "chain_i", "chain_j"])
    first_row, last_row, (ch_code, i_code) = _entry_codes(ids, ch.column("entry_id"), itf.column("entry_id"))
    kept_chain = first_row[ch_code] >= 0
    if "n_resolved" in ch.column_names:
        resolved = pc.greater(pc.fill_null(ch.column("n_resolved"), 0), 0)
        kept_chain &= np.asarray(resolved.to_numpy(zero_copy_only=False), dtype=bool)
    ch, ch_code = ch.filter(pa.array(kept_chain)), ch_code[kept_chain]
    ch_row = first_row[ch_code]
    ch_asym = _int64(ch.column("asym_id"))
    ch_type = _int64(ch.column("mol_type"))
    ch_cluster, n_clusters = _chain_clusters(ch, ch_row, ch_asym, ids, cluster_table)

    sampled = first_row[i_code] >= 0
    itf, i_row = itf.filter(pa.array(sampled)), first_row[i_code[sampled]]
    i_a, i_b = _int64(itf.column("chain_i")), _int64(itf.column("chain_j"))
    chain_keys, a_keys, b_keys = _pair_keys((ch_row, ch_asym), (i_row, i_a), (i_row, i_b))
    # a chain listed twice is its last row, as a dict keyed by (entry, asym) kept it
    ka, kb = np.split(_last_match(chain_keys, np.concatenate([a_keys, b_keys])), [a_keys.size])
    kept = (ka >= 0) & (kb >= 0)  # both chains resolved and kept
    ra, rb = ka[kept], kb[kept]

    # chain units
    c_entry = last_row[ch_code]  # an id listed twice in entry_ids is its last row
    c_size = _cluster_sizes(ch_cluster)
    c_w = AF3_BETA_CHAIN / c_size * _type_weight(ch_type)
    c_units = np.stack([ch_asym, np.full(ch_asym.size, -1, dtype=np.int64)], axis=1)

    # interface units
    i_size = _cluster_sizes(_pair_clusters(ch_cluster[ra], ch_cluster[rb], n_clusters))
    i_w = AF3_BETA_INTERFACE / i_size * (_type_weight(ch_type[ra]) + _type_weight(ch_type[rb]))
    i_units = np.stack([i_a[kept], i_b[kept]], axis=1)
    return (
        np.concatenate([c_entry, c_entry[ra]]),
        np.concatenate([c_units, i_units]),
        np.concatenate([c_w, i_w]).astype(np.float64),
    )


def _type_weight(mol_type: np.ndarray) -> np.ndarray:
    prot = mol_type == MolType.PROTEIN
    nuc = (mol_type == MolType.RNA) | (mol_type == MolType.DNA)
    lig = mol_type == MolType.LIGAND
    return AF3_ALPHA_PROTEIN * prot + AF3_ALPHA_NUCLEIC * nuc + AF3_ALPHA_LIGAND * lig


def _cluster_sizes(codes: np.ndarray) -> np.ndarray:
    """float64 ``[n]``: how many of ``codes`` (int64 ``[n]``) equal each one."""
    index = pa.array(codes, pa.int64()).dictionary_encode().indices  # a hash: no sort of n codes
    dense = np.asarray(index.to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.bincount(dense)[dense].astype(np.float64)


def _pair_clusters(a: np.ndarray, b: np.ndarray, n_clusters: int) -> np.ndarray:
    """int64 ``[n]`` cluster code of each interface from its chains' cluster codes ``a``, ``b``
    (int64 ``[n]``, each below ``n_clusters``): the unordered pair. (Before f805882 the pair was
    keyed by ``"|".join(sorted(names))``, which made two different pairs one cluster when a cluster
    table's id held a ``|``, e.g. ``a|b`` with ``c`` and ``a`` with ``b|c``.)"""
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    return lo * max(n_clusters, 1) + hi


def _chain_clusters(
    ch: pa.Table, ch_row: np.ndarray, ch_asym: np.ndarray, ids: pa.Array, cluster_table: pa.Table | None
) -> tuple[np.ndarray, int]:
    """int64 ``[n_chains]`` cluster code of every chain, and how many codes there are (the chains'
    sequence hashes, then a cluster table's ids: a table's id and a hash that read the same are
    different clusters). ``ch_row``: int64 ``[n_chains]`` the chain's entry (first row of its id
    in ``ids``)."""
    seq_codes, n_seq = _text_codes(_texts(ch.column("sequence_hash")))
    if cluster_table is None:
        return seq_codes, n_seq
    cols = set(cluster_table.column_names)
    if "cluster_id" not in cols or "entry_id" not in cols or not ({"asym_id", "label_id"} & cols):
        raise InvalidRequest("cluster_table needs columns entry_id, cluster_id and asym_id or label_id")
    t_row = _first_row(_texts(cluster_table.column("entry_id")), ids)  # -1: an entry not sampled
    t_codes, n_table = _text_codes(_texts(cluster_table.column("cluster_id")))
    if "asym_id" in cols:
        t_val, c_val = _int64(cluster_table.column("asym_id")), ch_asym
    else:  # labels: codes shared by both tables
        t_label = _texts(cluster_table.column("label_id"))
        c_label = _texts(ch.column("label_id"))
        label_codes, _ = _text_codes(pa.concat_arrays([c_label, t_label]))
        c_val, t_val = label_codes[: len(c_label)], label_codes[len(c_label) :]
    chain_keys, table_keys = _pair_keys((ch_row, c_val), (t_row, t_val))
    hit = _last_match(table_keys, chain_keys)  # a chain listed twice in the table: its last row
    found = hit >= 0
    out = seq_codes.copy()
    out[found] = n_seq + t_codes[hit[found]]
    _check_coverage(ch, found, cluster_table, "asym_id" if "asym_id" in cols else "label_id")
    return out, n_seq + n_table


#: chains named as examples in a cluster table's coverage message
SHOWN_CHAINS: Final = 3


def _check_coverage(ch: pa.Table, found: np.ndarray, cluster_table: pa.Table, column: str) -> None:
    """A cluster table that matches none of the sampled chains (``found``: bool ``[n_chains]``) is
    refused; one that misses some is warned about, with how many of each type and examples. A
    table of other ids (``102M_1`` for ``102m``) was ignored with a line at INFO level, and the run
    trained on identical-sequence clusters instead of the user's (review R26c s44 #5)."""
    n, n_hit = found.size, int(found.sum())
    if n_hit == n:
        return

    def examples(table: pa.Table, rows: np.ndarray) -> str:
        pick = table.select(["entry_id", column]).take(pa.array(rows[:SHOWN_CHAINS], pa.int64())).to_pylist()
        return ", ".join(f"({r['entry_id']!r}, {r[column]!r})" for r in pick)

    missed = np.flatnonzero(~found)
    compared = f"compared on (entry_id, {column}), case-sensitive"
    if n_hit == 0:
        raise InvalidRequest(
            f"cluster_table matches none of the {n} chains sampled ({compared}): the store's chains are e.g. "
            f"{examples(ch, missed)}; the table's rows e.g. {examples(cluster_table, np.arange(cluster_table.num_rows))}"
        )
    names = {int(t): t.name.lower() for t in MolType}
    kinds, counts = np.unique(_int64(ch.column("mol_type"))[missed], return_counts=True)
    by_type = ", ".join(
        f"{int(c)} {names.get(int(k), f'type {int(k)}')}" for k, c in zip(kinds, counts, strict=True)
    )
    log.warning("cluster table covers %d of %d chains (%s); the other %d (%s; e.g. %s) cluster by "
                "identical sequence", n_hit, n, compared, n - n_hit, by_type, examples(ch, missed))  # fmt: skip


def _texts(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``str(value)`` of every value as one string array (None as ``"None"``): the text the
    sampler's per-row keys were made of before f805882, so equal values stay equal as they were."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        text = col
    elif pa.types.is_integer(col.type):  # Arrow writes an integer as str() does
        text = pc.cast(col, pa.string())
    else:  # any other type: str() of each value
        return pa.array([str(x) for x in col.to_pylist()], pa.string())
    return pc.fill_null(text.cast(pa.string()), "None")


def _text_codes(text: pa.Array) -> tuple[np.ndarray, int]:
    """int64 ``[n]`` codes of ``text`` (equal iff the texts are equal, from 0) and how many there are."""
    enc = text.dictionary_encode()
    return np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64), len(enc.dictionary)


def _int64(col: pa.ChunkedArray) -> np.ndarray:
    """int64 ``[n]`` of an integer column; another type, or nulls, as ``int()`` of each value (None
    raises TypeError there, as before)."""
    t = col.type
    if pa.types.is_integer(t) and t != pa.uint64() and col.null_count == 0:
        return np.asarray(col.to_numpy(), dtype=np.int64)
    return np.asarray([int(x) for x in col.to_pylist()], dtype=np.int64)


def _first_row(entry_id: pa.ChunkedArray | pa.Array, ids: pa.Array) -> np.ndarray:
    """int64 ``[n]`` first row of each id in ``ids``; -1 for an id not there."""
    rows = pc.fill_null(pc.index_in(entry_id, value_set=ids), -1)
    return np.asarray(rows.to_numpy(zero_copy_only=False), dtype=np.int64)


def _entry_codes(ids: pa.Array, *columns: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Entry ids hashed once, ``ids`` and ``columns`` together: int64 ``[n_codes + 1]`` first and
    last row in ``ids`` of each code (-1 for a code not in ``ids``, and at index -1), and the int64
    code of each value of each column (-1 for null). One hash of every id instead of one set of
    ``ids`` per lookup (``pc.is_in`` / ``pc.index_in`` build it again each call: ~45 ms at 200k)."""
    parts = [ids, *(c.cast(pa.string()).combine_chunks() for c in columns)]
    enc = pa.concat_arrays(parts).dictionary_encode()
    codes = np.asarray(pc.fill_null(enc.indices, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
    n, n_codes = len(ids), len(enc.dictionary)
    rows = np.arange(n, dtype=np.int64)
    first = np.full(n_codes + 1, n, dtype=np.int64)
    np.minimum.at(first, codes[:n], rows)
    first[first == n] = -1
    last = np.full(n_codes + 1, -1, dtype=np.int64)
    np.maximum.at(last, codes[:n], rows)
    return first, last, np.split(codes[n:], np.cumsum([len(p) for p in parts[1:-1]]))


def _pair_keys(*pairs: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """One int64 key per (row, value) of each ``(rows, values)`` (int64 ``[n_k]`` each), equal iff
    both parts are equal; rows are >= -1."""
    values = np.concatenate([v for _, v in pairs])
    if values.size == 0:
        return [np.zeros(0, dtype=np.int64) for _ in pairs]
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    n_rows = max(int(r.max(initial=-1)) for r, _ in pairs) + 2
    if n_rows * span >= 2**62:  # far-apart values: rank them first
        ranks = np.unique(values, return_inverse=True)[1].reshape(-1)
        lo, span = 0, int(ranks.max()) + 1
        splits = np.cumsum([v.size for _, v in pairs])[:-1]
        pairs = tuple((r, x) for (r, _), x in zip(pairs, np.split(ranks, splits), strict=True))
    return [(r + 1) * span + (v - lo) for r, v in pairs]


def _last_match(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """int64 ``[n_queries]``: for each query the last index of ``keys`` equal to it, -1 if none."""
    if keys.size == 0:
        return np.full(queries.size, -1, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    pos = np.searchsorted(sorted_keys, queries, side="right") - 1  # last of a run of equal keys
    found = pos >= 0
    found[found] = sorted_keys[pos[found]] == queries[found]
    return np.where(found, order[np.maximum(pos, 0)], -1).astype(np.int64)
