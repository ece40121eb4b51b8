"""One sample, start to finish: fetch the entry → crop → assemble. Free of torch on purpose, so
that process-pool workers start quickly (a spawned worker imports only this, numpy/zarr and the
modules of :data:`SAMPLE_PATH_MODULES`).

Sources: a store directory, an ``http(s)://`` lookup-service URL, or a reader object (anything with
the :class:`featurecache.store.base.FeatureReader` methods). A source is opened once per process;
what other processes get is a store path, a lookup client's own settings (:class:`ServiceSpec`:
token, timeouts and retries included), or the reader object itself.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa

from featurecache.auth import redact_url
from featurecache.client.assemble import assemble_sample, crop_atom_ranges, residues_within
from featurecache.client.crop import CropInput, Cropper, CropResult
from featurecache.client.sampler import SampleKey, check_seed
from featurecache.errors import InvalidRequest, NotFound, ServiceError
from featurecache.types import Entry

log = logging.getLogger(__name__)

#: modules a sample needs that the code using them imports at its first use (crop's interface
#: search: scipy's k-d tree; a store's MSA reader and conformer table, MSA source labels, reference
#: features), imported here with the sample path instead. A first use happens on a sample thread:
#: a DataLoader that forked while a trainer-side sample thread was importing one left its workers
#: that module's import lock held by a thread they do not have, and every sample of theirs waited
#: on it for good (review R26c s44 #1). The CLI's light commands never import the client.
SAMPLE_PATH_MODULES: Final[tuple[str, ...]] = (
    "scipy.spatial", "numpy.random", "featurecache.chem.reference", "featurecache.featurize.msa",
    "featurecache.store.components", "featurecache.store.msa",
)  # fmt: skip
for _module in SAMPLE_PATH_MODULES:
    importlib.import_module(_module)

#: Arrays the per-step path reads from an entry (everything but occupancy / B-factor).
ENTRY_ARRAYS: Final[tuple[str, ...]] = ("tokens", "bonds", "interfaces", "atoms/coords", "atoms/is_present",
    "atoms/element", "atoms/charge", "atoms/name", "atoms/token_index", "atoms/ref_space_uid")  # fmt: skip
#: The atom fields of :data:`ENTRY_ARRAYS`: all the crop-first path reads of an atom row (7 of the 9
#: fields; over the lookup service 27 of 35 bytes a row, so its rows never cost more than needed)
ATOM_FIELDS: Final[tuple[str, ...]] = tuple(
    n.partition("/")[2] for n in ENTRY_ARRAYS if n.startswith("atoms/")
)

#: The per-step path crops an entry before it reads its atoms (:meth:`SampleJob._crop_first`)
#: when the entry has more atoms than this and the crop cuts it. It was 8 inner chunks (32,768
#: atoms) while every read went through zarr's event loop (~0.4-0.65 ms a chunk, a second round
#: trip costlier than the chunks it saved below that size). Read directly (``store.shards``) and
#: with the tokens kept per process (:class:`TokenCache`), cropping first costs no more for any entry
#: the crop cuts, from a local store or over the service (benchmarks/sample_cost.py --crop-first
#: --http, session 42, train's settings, median per sample, crop first vs whole: 1ffk 7.6 vs 11.9 ms
#: CPU; 5kc1 (21,946 atoms) 6.6 vs 7.1, over the service 15.3 vs 18.5 ms wall; 7CFN (8,139) 3.4 vs
#: 4.1, 8.1 vs 9.4; 721p (2,710) 13.6 vs 13.9, 23.4 vs 26.2): 0, every such entry.
CROP_FIRST_MIN_ATOMS: Final[int] = 0

#: Bytes of what :meth:`SampleJob._crop_first` reads before the crop (an entry's tokens, bonds and
#: interfaces, its meta and chains rows, the crop input made of them) that a process keeps, by
#: reader snapshot and entry id, least recently used first out (:class:`TokenCache`): a sample of an
#: entry read before then reads only its atom rows (over a lookup service one request, not two).
#: 1ffk, the corpus's largest (94,675 atoms, 6,832 tokens, 36 chains), counts for 0.64 MB: ~100 fit.
TOKEN_CACHE_BYTES: Final[int] = 64 << 20
#: what a chain row or the meta row (a dict of some 15-25 fields) counts for in
#: :attr:`TokenCache.nbytes`: an estimate of Python objects' size, meant to err high
_ROW_BYTES: Final[int] = 2048
_NO_SNAPSHOT: Final[object] = object()

SampleHook = Callable[[SampleKey], None]


class SnapshotChanged(ValueError):
    """The reader's snapshot changed while a sample read an entry in two reads (:meth:`SampleJob.__call__`
    draws the sample again)."""


# --------------------------------------------------------------------------------------- sources
class ServiceSpec:
    """A lookup-service source as it travels to other processes: the client's class and constructor
    settings (URL, token, timeouts, retries …), so that a worker's client is the trainer's. The
    token is carried but never shown (``repr`` and ``str`` name the URL only). ``snapshot``: what
    the trainer's client held of the index when the spec was made (``LookupClient.lookup_snapshot``:
    the index id and the few columns a worker's lookups read, as Arrow tables: shared with a forked
    worker, pickled to a spawned one), so that each worker's client starts on it instead of
    fetching the index tables again."""

    def __init__(
        self, factory: Callable[..., Any], settings: Mapping[str, Any], snapshot: Any = None
    ) -> None:
        self.factory = factory
        self.settings = dict(settings)
        self.snapshot = snapshot

    @property
    def url(self) -> str:
        return str(self.settings["url"])

    def open(self) -> Any:
        if self.snapshot is None:
            return self.factory(**self.settings)
        return self.factory(**self.settings, snapshot=self.snapshot)

    def __repr__(self) -> str:
        auth = ", token=…" if self.settings.get("token") else ""
        return f"ServiceSpec({redact_url(self.url)!r}{auth})"

    __str__ = __repr__


def open_source(source: Any, token: str | None = None) -> Any:
    """A reader for ``source``: a store directory, an ``http(s)://`` lookup-service URL (``token``:
    its bearer token, default ``$FEATURECACHE_AUTH_TOKEN``), a :class:`ServiceSpec`, or a reader."""
    if isinstance(source, ServiceSpec):
        return source.open()
    if isinstance(source, str | Path):
        text = str(source)
        if text.startswith(("http://", "https://")):
            from featurecache.client.http import LookupClient

            return LookupClient(text, token=token)
        if token is not None:
            raise InvalidRequest(f"a token is for a lookup-service URL, not for the store {text}")
        from featurecache import open_store

        return open_store(text)
    if token is not None:
        raise InvalidRequest("a token is for a lookup-service URL; give it to the reader you pass instead")
    if not hasattr(source, "entry"):
        raise InvalidRequest(f"source must be a store path, a URL or a reader, got {type(source).__name__}")
    return source


def _source_spec(source: Any) -> Any:
    """What travels to other processes: a store path, a lookup client's settings, else the object."""
    if isinstance(source, ServiceSpec):
        return source
    if isinstance(source, str | Path):
        return str(source)
    settings = getattr(source, "settings", None)
    if callable(settings) and isinstance(getattr(source, "url", None), str):
        # a LookupClient: rebuilt with its own token, on the index columns this one holds
        snapshot = getattr(source, "lookup_snapshot", None)
        return ServiceSpec(type(source), settings(), snapshot() if callable(snapshot) else None)
    path = getattr(source, "path", None)
    if isinstance(path, str | Path) and (Path(path) / "zarr.json").is_file():
        return str(path)
    return source


class SourceRef:
    """Opens the reader lazily, once per process (readers hold mmaps, zarr handles, HTTP pools).

    The MSA shapes and the reference-conformer table it keeps for the process are those of the
    reader's current snapshot: a reader with a ``generation`` (:class:`LookupClient`: bumped by
    ``refresh()``, which a store rebuilt under the service also starts) has them read again when it
    changes. A local store is one snapshot for as long as it is open (its index is read once), so
    its shapes and table are read once.

    ``owned``: ``reader`` was opened for this ref (from a path or URL), so :meth:`close` closes it;
    a reader the caller made is the caller's to close. A reader :meth:`get` opens is always owned."""

    def __init__(self, source: Any, reader: Any = None, *, owned: bool = False) -> None:
        self.spec = _source_spec(reader if reader is not None else source)
        self._reader: Any = reader
        self._pid = os.getpid() if reader is not None else -1
        self._owned = owned and reader is not None
        self._msa_shapes: tuple[Any, dict[str, tuple[int, int]]] | None = None  # (generation, shapes)
        self._components: tuple[Any, Any] | None = None  # (generation, table or False)
        self._tokens = TokenCache()  # of this process's reader: never pickled (__getstate__)

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec}

    def describe(self) -> str:
        """The source for messages (a service's URL without credentials in it, never its token)."""
        if isinstance(self.spec, ServiceSpec):
            return f"the lookup service at {redact_url(self.spec.url)}"
        if isinstance(self.spec, str):
            if self.spec.startswith(("http://", "https://")):
                return f"the lookup service at {redact_url(self.spec)}"
            return f"the store {self.spec}"
        return f"the reader {type(self.spec).__name__}"

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"])  # type: ignore[misc]

    def get(self) -> Any:
        if self._reader is None or self._pid != os.getpid():
            self._reader = open_source(self.spec)
            self._pid = os.getpid()
            self._owned = self._reader is not self.spec  # a reader object carried as the spec is the giver's
            self._msa_shapes = None
            self._components = None
            self._tokens = TokenCache()  # another reader (a new process's): its snapshots are its own
        return self._reader

    def close(self) -> None:
        """Close this process's reader when it is this ref's own, and forget it (a later :meth:`get`
        opens another). A reader of another process (the parent's, in a forked DataLoader worker's
        copy) is never touched: it is the parent's to close, and its sockets serve the parent."""
        reader = self._reader
        if reader is None or not self._owned or self._pid != os.getpid():
            return
        self._reader, self._pid, self._owned = None, -1, False
        self._msa_shapes = self._components = None
        self._tokens = TokenCache()
        reader.close()

    def token_cache(self, reader: Any) -> TokenCache | None:
        """The :class:`TokenCache` of ``reader`` when it is the reader this process opened (None for
        another: its snapshots are not the ones the cache's keys name)."""
        return self._tokens if reader is self._reader and self._pid == os.getpid() else None

    def generation(self) -> Any:
        """The reader's snapshot (its ``generation``; None for a reader without one: one snapshot)."""
        return getattr(self.get(), "generation", None)

    def msa_shapes(self) -> dict[str, tuple[int, int]]:
        """MSA key → (depth, length) from the reader's ``msas`` table (empty when none), of the
        reader's current snapshot."""
        generation = self.generation()  # before the table: a refresh in between reads it again
        cached = self._msa_shapes
        if cached is None or cached[0] != generation:
            cached = self._msa_shapes = (generation, _msa_shapes(self.get()))
        return cached[1]

    def components(self) -> Any:
        """The reader's reference-conformer table of its current snapshot, or None."""
        generation = self.generation()
        cached = self._components
        if cached is None or cached[0] != generation:
            cached = self._components = (generation, _component_table(self.get()) or False)
        return cached[1] or None


def _msa_shapes(reader: Any) -> dict[str, tuple[int, int]]:
    own = getattr(reader, "msa_shapes", None)
    if callable(own):  # a lookup client: three columns of the msas index, not the whole table
        return own()  # type: ignore[no-any-return]
    try:
        t: pa.Table = reader.msas
    except (AttributeError, NotFound):  # a reader without MSAs
        return {}  # (any other error, e.g. a service that is down, fails the sample: MSAs stay on)
    if t is None or t.num_rows == 0:
        return {}
    cols = set(t.column_names)
    key_col = next((c for c in ("key", "msa_key", "sequence_hash", "hash") if c in cols), None)
    len_col = next((c for c in ("length", "n_cols", "query_length") if c in cols), None)
    if key_col is None or "depth" not in cols or len_col is None:
        log.warning("msas table has columns %s; cannot find key/depth/length, MSAs unused", sorted(cols))
        return {}
    keys = t.column(key_col).to_pylist()
    depth = t.column("depth").to_pylist()
    length = t.column(len_col).to_pylist()
    return {str(k): (int(d), int(n)) for k, d, n in zip(keys, depth, length, strict=True)}


def _component_table(reader: Any) -> Any:
    """The reader's reference-conformer table (``chem.reference.ComponentTable``) or None."""
    for attr in ("component_table", "reference_components"):
        val = getattr(reader, attr, None)
        if val is not None:
            return val() if callable(val) else val
    return None


# ------------------------------------------------------------------------------------ token cache
@dataclass(frozen=True)
class BeforeCrop:
    """What :meth:`SampleJob._crop_first` reads of an entry before it crops it, and the crop input
    made of it. Its arrays are read-only (a cached one is shared by every sample of the entry)."""

    tokens: dict[str, np.ndarray]
    bonds: dict[str, np.ndarray]
    interfaces: dict[str, np.ndarray]
    meta: dict[str, Any]
    chains: list[dict[str, Any]]
    crop_input: CropInput

    @classmethod
    def of(
        cls, groups: Mapping[str, np.ndarray], meta: dict[str, Any], chains: list[dict[str, Any]]
    ) -> BeforeCrop:
        tokens, bonds, interfaces = (_columns(groups[g]) for g in ("tokens", "bonds", "interfaces"))
        crop_input = CropInput.from_arrays(tokens, None, bonds, interfaces)
        for a in [*tokens.values(), *bonds.values(), *interfaces.values(), *_arrays_of(crop_input)]:
            a.flags.writeable = False
        return cls(tokens, bonds, interfaces, meta, chains, crop_input)

    @property
    def nbytes(self) -> int:
        """Its arrays' bytes (the crop input's views of the tokens counted again: it errs high) and
        :data:`_ROW_BYTES` for the meta row and each chain row."""
        arrays = [
            *self.tokens.values(),
            *self.bonds.values(),
            *self.interfaces.values(),
            *_arrays_of(self.crop_input),
        ]
        return sum(a.nbytes for a in arrays) + _ROW_BYTES * (1 + len(self.chains))


class TokenCache:
    """Per process, per reader (:meth:`SourceRef.token_cache`): :class:`BeforeCrop` of one reader
    snapshot by entry id, least recently used first out, at most ``max_bytes`` in all (an entry of
    more is not kept). The snapshot is the reader's ``generation`` (a lookup client's changes when
    it finds the store rebuilt or extended under the service; a local store is one snapshot while
    it is open), so an entry of a new index is read again, never served from an old one's; what
    was kept of an older snapshot is dropped when a newer one is asked for (a reader's snapshots
    only move on)."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, tuple[BeforeCrop, int]] = OrderedDict()  # of self._generation
        self._lock = threading.Lock()  # a thread pool's workers share the job
        #: bytes held (:attr:`BeforeCrop.nbytes` of each)
        self.nbytes = 0
        self._generation: Any = _NO_SNAPSHOT  # the snapshot of what is held

    def _at(self, generation: Any) -> None:
        """(Under the lock) hold the entries of ``generation`` only."""
        if generation != self._generation:
            self._items.clear()
            self.nbytes = 0
            self._generation = generation

    def __len__(self) -> int:
        return len(self._items)

    def get(self, generation: Any, entry_id: str) -> BeforeCrop | None:
        with self._lock:
            self._at(generation)
            got = self._items.get(entry_id)
            if got is None:
                return None
            self._items.move_to_end(entry_id)
            return got[0]

    def put(self, generation: Any, entry_id: str, value: BeforeCrop, max_bytes: int) -> None:
        size = value.nbytes
        if size > max_bytes:
            return
        with self._lock:
            self._at(generation)
            old = self._items.pop(entry_id, None)
            if old is not None:
                self.nbytes -= old[1]
            while self._items and self.nbytes + size > max_bytes:
                self.nbytes -= self._items.popitem(last=False)[1][1]
            self._items[entry_id] = (value, size)
            self.nbytes += size


# ------------------------------------------------------------------------------------ one sample
class SampleJob:
    """fetch → crop → assemble for one :class:`SampleKey` (picklable; runs on any pool worker)."""

    def __init__(
        self,
        source: SourceRef,
        cropper: Cropper,
        *,
        seed: int,
        max_msa_rows: int,
        augment_ref: bool,
        use_msa: bool,
        hook: SampleHook | None,
        pair_msa: bool = True,
        crop_first_atoms: int | None = CROP_FIRST_MIN_ATOMS,
        token_cache_bytes: int = TOKEN_CACHE_BYTES,
    ) -> None:
        """``crop_first_atoms``: entries of more atoms than this are read crop first
        (:meth:`_crop_first`), from a local store or a lookup service, the others whole; None reads
        every entry whole. The samples are the same either way (tests/client/test_crop_first.py, over
        a lookup service too). ``token_cache_bytes``: the bound of the process's
        :class:`TokenCache` of what the crop-first path reads before the crop (0: none kept); the
        samples are the same with it or without (tests/client/test_token_cache.py)."""
        self.source = source
        self.cropper = cropper
        self.seed = check_seed(seed, "SampleJob")
        self.max_msa_rows = max_msa_rows
        self.augment_ref = augment_ref
        self.use_msa = use_msa
        self.pair_msa = pair_msa
        self.crop_first_atoms = crop_first_atoms
        self.token_cache_bytes = token_cache_bytes
        self.hook = hook
        self._told_too_large = False  # a 413 from the rows read was logged at INFO (then at DEBUG)

    def rng(self, key: SampleKey) -> np.random.Generator:
        return np.random.default_rng([self.seed, key.epoch, key.draw_index])

    def __call__(self, key: SampleKey) -> dict[str, Any]:
        """The sample of ``key``. One during which the reader's snapshot changed (a lookup client
        that found the store rebuilt under the service and refreshed: its MSA rows were planned
        against the old depths) is drawn again, once, from the start: the same sample a process
        that opened the new snapshot draws. Whatever the second draw raises is raised."""
        if self.hook is not None:
            self.hook(key)
        generation = self.source.generation()
        try:
            sample = self._draw(key)
        except (ValueError, KeyError, IndexError) as exc:  # InvalidRequest, NotFound among them
            if self.source.generation() == generation:
                raise
            log.info("%s changed (a new index) during sample %s of %s (%s: %s); drawing it again",
                     self.source.describe(), key.index, key.entry_id, type(exc).__name__, exc)  # fmt: skip
            return self._draw(key)
        if self.source.generation() != generation:
            log.info("%s changed (a new index) during sample %s of %s; drawing it again",
                     self.source.describe(), key.index, key.entry_id)  # fmt: skip
            return self._draw(key)
        return sample

    def _draw(self, key: SampleKey) -> dict[str, Any]:
        reader = self.source.get()
        rng = self.rng(key)
        first = self._crop_first(reader, key, rng) if self.crop_first_atoms is not None else None
        if first is None:
            rng = self.rng(key)
            entry = reader.entry(key.entry_id, list(ENTRY_ARRAYS))
            crop = self.cropper(CropInput.from_arrays(entry.tokens, entry.atoms, entry.bonds, entry.interfaces),
                                rng, key.chains or None)  # fmt: skip
        else:
            entry, crop = first
        shapes = self.source.msa_shapes() if self.use_msa else {}
        chains = _with_msa_keys(entry.chains, shapes)
        # A reader that derives conformers per entry (the uncached baseline) says so with
        # ``entry_component_table(entry)``; a store's table is loaded once per process.
        per_entry = getattr(reader, "entry_component_table", None)
        components = per_entry(entry) if per_entry is not None else self.source.components()
        ref_fn = None
        if components is not None:
            from featurecache.chem.reference import reference_features

            def ref_fn(
                atoms: Mapping[str, np.ndarray], tokens: Mapping[str, np.ndarray]
            ) -> Mapping[str, np.ndarray]:
                return reference_features(atoms, tokens, components)

        sample = assemble_sample(
            entry, crop.indices, rng, chains=chains,
            msa_fetch=reader.msa if shapes else None, msa_shape=shapes.get if shapes else None,
            ref_features=ref_fn, max_msa_rows=self.max_msa_rows, augment_ref=self.augment_ref,
            pair_msa=self.pair_msa,
        )  # fmt: skip
        sample["crop_method"] = crop.method
        sample["crop_centre"] = crop.centre_token
        sample["epoch"] = key.epoch
        sample["index"] = key.index
        return sample

    def _crop_first(
        self, reader: Any, key: SampleKey, rng: np.random.Generator
    ) -> tuple[Entry, CropResult] | None:
        """DESIGN.md "Crop before decoding anything large": the entry's tokens, bonds and interfaces,
        the crop, then only the atom rows the sample needs (:func:`crop_atom_ranges`), as an entry
        whose atoms are those rows (its kept tokens' ``atom_start`` / ``centre_atom`` re-based onto
        them): :func:`assemble_sample` makes of it the sample it makes of the whole entry.

        Over a lookup service (:class:`~featurecache.client.http.LookupClient`) that is two requests
        (the tokens, bonds and interfaces; the atom rows), where the whole entry is one; what is read
        before the crop is kept for the process's later samples of the entry (:class:`TokenCache`,
        by the reader's snapshot: ``token_cache_bytes``), which then read the atom rows alone.

        None (the caller reads the whole entry, drawing from a fresh generator) for a reader
        without row reads (one without these methods, or a lookup service older than
        ``POST /v1/entries/{id}:rows``: its ``row_reads()`` is False), an entry of at most
        ``crop_first_atoms`` atoms or one that fits the crop whole (its atoms are all needed), a
        part without ``tokens/centre_coords`` (featurizer < 0.7.0: known before any array is
        read), ranges that :func:`residues_within` finds cut a residue, atom rows over the
        service's ``max_response_bytes`` or ``max_body_bytes`` (413: the whole entry, whose atoms
        cost fewer bytes a row, may fit), or a service that stopped answering row reads during the
        run (rolled back to an older version: the client then reads every entry whole).
        :class:`SnapshotChanged` when the source's reader answered from a new index during the reads
        (:meth:`__call__` draws the sample again, from the new one).

        The atom rows are read with :data:`ATOM_FIELDS` only (``fields=``) over a lookup service; a
        local store decodes every field of the rows anyway, so they are read whole there and only
        :data:`ATOM_FIELDS` copied out (``fields=`` would pack them into new records first)."""
        read_rows = getattr(reader, "read_rows", None)
        stored = getattr(reader, "stored_fields", None)
        count = getattr(reader, "row_count", None)
        if read_rows is None or stored is None or count is None:
            return None
        generation = self.source.generation()  # the snapshot the counts, tokens and rows must be of
        n_atoms, n_tokens = count(key.entry_id, "atoms"), count(key.entry_id, "tokens")
        budget = self.cropper.max_atoms
        if n_atoms <= (self.crop_first_atoms or 0) or (
            n_tokens <= self.cropper.max_tokens and (budget is None or n_atoms <= budget)
        ):
            return None
        row_reads = getattr(reader, "row_reads", None)  # a lookup service: whether it has the route
        if row_reads is not None and not row_reads():
            return None
        cache = self.source.token_cache(reader) if self.token_cache_bytes > 0 else None
        before = cache.get(generation, key.entry_id) if cache is not None else None
        try:
            if before is None:
                if "centre_coords" not in stored(key.entry_id, "tokens"):
                    return None
                before = BeforeCrop.of(reader.read_groups(key.entry_id, ["tokens", "bonds", "interfaces"]),
                                       reader.entry_meta(key.entry_id), reader.entry_chains(key.entry_id))  # fmt: skip
                if cache is not None and self.source.generation() == generation:  # not across a refresh
                    cache.put(generation, key.entry_id, before, self.token_cache_bytes)
            tokens, bonds, interfaces = before.tokens, before.bonds, before.interfaces
            crop = self.cropper(before.crop_input, rng, key.chains or None)
            keep = crop.indices
            ranges = crop_atom_ranges(tokens, keep)
            # one row either side: residues_within checks that no range cuts a residue
            guarded = np.stack(
                [np.maximum(ranges[:, 0] - 1, 0), np.minimum(ranges[:, 1] + 1, n_atoms)], axis=1
            )
            try:
                # a local store (no row_reads: it transfers nothing) reads every field of the rows
                # anyway; ATOM_FIELDS would only be packed into new records before the copies below
                # (review R27d s45 #6)
                rows, atom_rec = read_rows(key.entry_id, "atoms", guarded,
                                           fields=ATOM_FIELDS if row_reads is not None else None)  # fmt: skip
                if not set(ATOM_FIELDS) <= set(atom_rec.dtype.names or ()):  # raises naming the absent fields
                    rows, atom_rec = read_rows(key.entry_id, "atoms", guarded, fields=ATOM_FIELDS)
            except InvalidRequest as exc:
                if exc.status != 413:
                    raise
                log.log(logging.DEBUG if self._told_too_large else logging.INFO,
                        "entry %s: its crop's atom rows are over a limit of %s (%s); reading the whole entry",
                        key.entry_id, self.source.describe(), exc)  # fmt: skip
                self._told_too_large = True
                return None
        except ServiceError:
            if row_reads is None or row_reads():
                raise
            return None  # the service stopped answering row reads (the client said so): the whole entry
        if self.source.token_cache(reader) is not None and self.source.generation() != generation:
            # the atom rows came from a newer index than the tokens (a cached entry's included): the
            # sample is drawn again (__call__), not read whole nor checked against rows of another entry
            raise SnapshotChanged(f"{self.source.describe()} answered from a new index (the store was rebuilt "
                                  f"or extended) while entry {key.entry_id} was read")  # fmt: skip
        if not residues_within(atom_rec["ref_space_uid"], rows, ranges, n_atoms):
            log.warning(
                "entry %s: its crop's atom ranges cut a residue; reading the whole entry", key.entry_id
            )
            return None
        tokens = dict(tokens)
        for f in ("atom_start", "centre_atom"):  # onto the rows read (exact for the kept tokens)
            tokens[f] = np.searchsorted(rows, tokens[f]).astype(np.int32)
        atoms = {f: np.ascontiguousarray(atom_rec[f]) for f in ATOM_FIELDS}
        entry = Entry(id=key.entry_id, atoms=atoms, tokens=tokens, bonds=dict(bonds), interfaces=dict(interfaces),
                      meta=dict(before.meta), chains=[dict(c) for c in before.chains])  # fmt: skip
        return entry, crop


def _arrays_of(crop_input: CropInput) -> list[np.ndarray]:
    values = (getattr(crop_input, f.name) for f in fields(crop_input))
    return [v for v in values if isinstance(v, np.ndarray)]  # not its singleton_groups flag


def _columns(records: np.ndarray) -> dict[str, np.ndarray]:
    return {f: np.ascontiguousarray(records[f]) for f in records.dtype.names or ()}


def _with_msa_keys(
    chains: Sequence[Mapping[str, Any]], shapes: Mapping[str, tuple[int, int]]
) -> list[dict[str, Any]]:
    """Chain rows with ``msa_key`` set where the store holds an MSA for the chain."""
    out = []
    for ch in chains:
        row = dict(ch)
        key = row.get("msa_key") or row.get("sequence_hash")
        row["msa_key"] = key if key and key in shapes else None
        out.append(row)
    return out
