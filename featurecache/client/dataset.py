"""``FeatureDataset``: what a training script imports.

sampler → fetch entry → crop → assemble (MSA rows, reference augmentation) → sample, computed for
several samples at once on a bounded pool and yielded ready-first (:mod:`.loader`).

Usage::

    ds = FeatureDataset("store/", crop_size=384, weighting="af3", infinite=True, workers=4)
    loader = ds.loader(batch_size=2, num_workers=2)   # FeatureLoader: DataLoader + consumption tracking
    loader.load_state_dict(torch.load("loader.pt"))   # optional, before iterating
    for step, batch in enumerate(loader):             # batch: schema.BATCH_SCHEMA tensors (+ metadata)
        ...
        if step % 1000 == 0:
            torch.save(loader.state_dict(), "loader.pt")
            loader.stats.log()

Sharding
--------
The sampler defines one stream of positions ``0, 1, 2, …`` (epoch ``e`` is
``[e·L, (e+1)·L)``, ``L = len(sampler)``). Rank ``r`` of ``W`` takes the positions with
``p % W == r``; inside a rank, ``DataLoader`` worker ``w`` of ``K`` takes every ``K``-th of the
rank's positions from the pass's first unresolved one, ``(p // W - m // W) % K == w`` for that
watermark ``m`` (so that the DataLoader's round robin, which restarts at worker 0 every pass,
meets them in the stream's order; ``r`` and ``W`` are the trainer's, also in a spawned worker,
which has no process group). Every sample's randomness comes from a generator seeded by
``(seed, epoch, index in epoch)`` (the padded epoch's, below), so a position gives the same crop
on any rank, worker or restart (:meth:`FeatureDataset.sample` recomputes one). Every rank must
be given the same ``seed`` (and sampler settings): ranks of other seeds draw other permutations,
and their shares then overlap and leave entries out. In per-epoch mode with ``W`` > 1 an epoch spans
``S = ceil(L / W) · W`` positions (``S = L`` when ``W`` divides ``L``): epoch ``e`` is
``[e·S, (e+1)·S)``, and its positions ``e·S + L + j`` draw the epoch's ``(j mod L)``-th entry (or
chain, interface) again, as torch's ``DistributedSampler`` pads, so that every rank takes as many
samples (a rank with fewer steps hangs a DDP job in its next collective). As with a
``DistributedSampler`` over a randomly augmented dataset, the padding sample is cropped and
augmented afresh: its generator is seeded by its own index in the padded epoch, ``L + j`` (it was
the epoch's sample byte for byte, the same gradient twice in an epoch: review R41b s51 #1). A
position still names one sample (:meth:`FeatureDataset.sample` recomputes a padded one too) for a
given ``W``. A skipped sample
(it raised, or passed its deadline) still leaves its rank one short; DDP over a source that can
fail samples wants infinite mode (a fixed number of steps) or ``torch.distributed.algorithms.Join``.

Exact resume — semantics
------------------------
A position is *resolved* once the trainer has **received** its sample (the dataset's iterator
handed it over, or — through a ``DataLoader`` — :meth:`FeatureDataset.consume` saw it in a batch;
:class:`FeatureLoader` calls it for you), or once it was **skipped** (raised, or passed its
deadline; a skip is reported with the next sample of the same worker, or at once when iterating
the dataset directly; under :class:`FeatureLoader` the skips that end a worker's pass come as a
skip-only item, :data:`K_SKIPS_ONLY`, that its collate adds to the batch or that it consumes
alone; a plain ``DataLoader`` never reports them, so they are computed again next pass), or
— per-epoch mode, ``FeatureLoader(drop_last=True)`` — once it was **dropped** with a worker's last,
partial batch (the epoch ends as with torch's ``drop_last``; the next pass is the next epoch, whole).
:meth:`~FeatureDataset.state_dict` records, for this rank and the current epoch, the resolved
positions: a watermark below which all are resolved plus the resolved ones above it (samples
yielded out of order). Samples that were prefetched, computed or even batched
inside ``DataLoader`` workers but not yet received by the trainer are **not** resolved. After
:meth:`~FeatureDataset.load_state_dict`, iteration yields exactly the unresolved positions of the
epoch (in the new run's ready-first order): no duplicate, no missing sample. Skipped samples are
not retried after a resume, except skips that no later sample of their worker reported before the
state was taken (they are computed once more). The state is per rank; resume needs the same seed,
epoch length and world size (checked; :func:`reshard_states` makes every rank's states of an
infinite-mode run those of another world size), while the number of ``DataLoader`` workers and
the pool may change. A state taken over another sampling stream (other entries, units or weights: the
store extended, pruned or rebuilt since, other sampler settings) resumes at its positions with a
warning: they draw other samples than the run before would have.

``DataLoader`` workers iterate a copy of the dataset taken when they start, with
``persistent_workers=True`` once per run, while only the trainer's copy moves on (next epoch,
:meth:`~FeatureDataset.set_epoch`, :meth:`~FeatureDataset.consume`,
:meth:`~FeatureDataset.load_state_dict`). So the trainer's copy mirrors its share, epoch and
resolved positions in shared memory (:class:`SharedPositions`), and a worker reads them there at
the start of each pass after its first: the ``k``-th pass of a persistent loader yields what the
``k``-th pass of a non-persistent one does, a state may be loaded between passes, and all of the
above holds with either, forked or spawned. One state the mirror cannot hold is refused
(``LoaderError`` naming ``persistent_workers``) instead of iterated wrongly: positions resolved
``max(L, 65536)`` or more past the trainer's watermark (infinite mode only: one worker that far
behind the others when a pass is stopped; :class:`FeatureLoader`'s ``max_lag`` prevents it).

With several ``DataLoader`` workers (``in_order=False``) one worker that lags behind the others
lets them run ahead: in infinite mode without a bound the resolved positions above the watermark,
and so the state, grew with the run (a worker 40 ms a sample slower: 328 of them after 1000
steps). :class:`FeatureLoader`'s ``max_lag`` bounds them: a worker waits to hand over a sample
more than ``max_lag`` share positions past the trainer's watermark, unless the watermark is its
own position (the lagging worker never waits, so nothing deadlocks; a worker that stays slow then
paces the others).

In ``infinite`` mode the stream never ends: positions run on through epochs and ``epoch`` in the
state is the epoch of the watermark. In per-epoch mode an iteration yields the unresolved positions
of the current epoch; one started after every position of the epoch was resolved begins the next
epoch, as re-iterating a dataset each epoch does (:meth:`~FeatureDataset.set_epoch` picks one
explicitly; in infinite mode it does nothing). An iteration the trainer stopped early is
continued, not restarted, by the next. A plain ``DataLoader`` with workers iterates copies of the
dataset, which do not learn what the trainer received: as with torch's ``DistributedSampler``,
call :meth:`~FeatureDataset.set_epoch` before each pass (each pass is then that epoch, from its
start), or :meth:`~FeatureDataset.consume` each batch (the passes then continue and move on as
above). Without either every pass begins where the one before began and repeats its samples: the
workers warn once (on their stderr).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from featurecache.client.assemble import DEFAULT_MAX_MSA_ROWS, Sample, collate
from featurecache.client.crop import (
    DEFAULT_CROP_SIZE,
    DEFAULT_CROP_WEIGHTS,
    DEFAULT_CROP_WHOLE_GROUPS,
    DEFAULT_MAX_ATOMS,
    INTERFACE_CROP_CUTOFF,
    Cropper,
)
from featurecache.client.job import SampleHook, SampleJob, SourceRef, open_source
from featurecache.client.loader import (
    ConsumedPositions,
    Done,
    LoaderStats,
    ReadyFirst,
    SkipRecord,
)
from featurecache.client.sampler import SampleKey, Sampler, SamplerFilter, check_seed
from featurecache.errors import InvalidRequest, LoaderError
from featurecache.store.reader import LocalStore, unfinished_build_error
from featurecache.store.versions import FeaturizerChanged, msa_stage_notes, source_versions, version_notes

log = logging.getLogger(__name__)

STATE_VERSION: Final = 1
#: state_dict keys
K_VERSION, K_SEED, K_EPOCH_LENGTH, K_INFINITE = "version", "seed", "epoch_length", "infinite"
K_EPOCH, K_WORLD, K_RANK, K_CONSUMED = "epoch", "world_size", "rank", "consumed"
#: the sampler's :meth:`~featurecache.client.sampler.Sampler.stream_digest` (absent from the states
#: of a featurecache before session 35: not compared)
K_STREAM = "stream_sha256"
#: positions per epoch the state's positions are numbered by (per-epoch mode: the epoch length
#: padded to a multiple of the ranks; absent from states before session 35)
K_SPAN = "span"
#: an item (and a collated batch) that carries only skip records: the skips at the end of a pass
#: under :class:`FeatureLoader` (``{K_SKIPS_ONLY: True, "skipped": [skip-record dicts]}``)
K_SKIPS_ONLY: Final = "skips_only"
#: error classes that say the source itself cannot serve — the lookup service is down, hung or
#: refuses the token — rather than that one entry is bad (classes travel by name from pool workers)
SOURCE_FAILURES: Final = frozenset({"ServiceUnavailable", "AuthenticationError"})
#: a lookup client made with ``on_featurizer_change="raise"`` failed a sample because its service
#: moved to a store of other featurizer versions: the iterator raises it at once
#: (:class:`~featurecache.store.versions.FeaturizerChanged`)
SOURCE_CHANGED: Final = "FeaturizerChanged"


#: smallest span of positions (bytes) the shared mirror of the trainer's state covers past its
#: watermark: in infinite mode the positions resolved out of order run ahead of it by DataLoader
#: workers' skew, not bounded by the epoch length
MIN_SHARED_SPAN: Final = 1 << 16
#: the least default ``max_lag`` of :class:`FeatureLoader` (positions of a rank's share)
MIN_MAX_LAG: Final = 1024
#: header slots: published (a count of resets: a pass begun before the last reset is over), start,
#: stop, stride, offset, the trainer's watermark (the mask's floor), overflow, a sequence number
#: (odd while the trainer rewrites the header or the mask: readers read again), then the DataLoader
#: worker pass whose samples the trainer received first since the last reset and the watermark just
#: before (:meth:`SharedPositions.note_pass`)
_H_PUBLISHED, _H_WATERMARK, _H_OVERFLOW, _H_SEQ, _H_PASS, _H_PASS_BASE = 0, 5, 6, 7, 8, 9
_HEADER_BYTES: Final = 16 * 8
#: positions the shared mirror covers past the epoch's length: a rank's per-epoch share is padded
#: to ``ceil(L / W)`` positions, up to ``W - 1`` past the epoch
SHARE_PADDING_SPAN: Final = 4096
#: DataLoader worker ids whose passes the mirror records (:meth:`SharedPositions.begin_pass`)
MAX_RECORDED_WORKERS: Final = 256


# ---------------------------------------------------------------------- torch's default collate
def _collate_samples(batch: Sequence[Sample], *, collate_fn_map: Any = None) -> dict[str, Any]:
    """torch's default collate, given :class:`~featurecache.client.assemble.Sample` s: :func:`collate`."""
    return collate(batch)


try:  # where torch's default_collate looks up a collate function by the element's type
    from torch.utils.data._utils.collate import default_collate_fn_map
except ImportError:  # pragma: no cover - a torch without it: collate_fn=collate is needed
    pass
else:
    default_collate_fn_map.setdefault(Sample, _collate_samples)


# ------------------------------------------------------------------------- state for workers
#: seconds a spawned DataLoader worker, at its exit, waits for its result queue's feeder thread to
#: finish pickling what it sends (:func:`_join_queue_feeders`)
FEEDER_JOIN_S: Final = 10.0
#: seconds it waits for a feeder that writes to the trainer's pipe, which the trainer may no longer
#: read (a batch of numpy arrays or raw samples goes through the pipe itself), or that waits for work
FEEDER_SEND_S: Final = 0.5
_feeders_hooked = False


def _feeder_state(thread: threading.Thread) -> str:
    """What a queue's feeder thread does now: ``"pickling"`` (``ForkingPickler.dumps``: torch puts
    tensors into shared memory with the GIL released), ``"sending"`` (writing to the pipe), or
    ``"idle"`` (waiting for something to send, or gone)."""
    frame = sys._current_frames().get(thread.ident or -1)
    sending = False
    while frame is not None:
        code = frame.f_code
        where = code.co_filename.replace("\\", "/")
        if code.co_name == "dumps" and where.endswith("multiprocessing/reduction.py"):
            return "pickling"
        if where.endswith("multiprocessing/connection.py") and code.co_name in (
            "_send",
            "_send_bytes",
            "send_bytes",
        ):
            sending = True
        frame = frame.f_back
    return "sending" if sending else "idle"


def _join_queue_feeders() -> None:
    """At a spawned ``DataLoader`` worker's exit: wait (up to :data:`FEEDER_JOIN_S`) while a
    feeder thread of its ``multiprocessing`` queues still pickles a batch for the trainer.

    A worker told to stop right after it put a batch (the trainer left a pass early, or the loader
    was deleted) exits while its queue's feeder thread still pickles that batch into shared memory
    with the GIL released. The interpreter's finalization then ends that thread inside torch's C++
    code, and the worker dies with "terminate called without an active exception" (SIGABRT); the
    trainer sees "DataLoader worker (pid N) is killed by signal: Aborted" (3 of 4 loaders with a
    256 MB batch). Forked workers leave by ``os._exit`` and never finalize. A feeder that waits for
    work (its queue was never closed: the trainer is gone), or writes to a pipe (the trainer no
    longer reads it), for longer than :data:`FEEDER_SEND_S` is left to finalization, where it ends
    without harm: it holds no C++ frame."""
    deadline = time.monotonic() + FEEDER_JOIN_S
    for t in threading.enumerate():
        if t.name != "QueueFeederThread" or t is threading.current_thread():
            continue
        last, since = "", 0.0  # the state seen last, and since when without a break
        while t.is_alive() and (now := time.monotonic()) < deadline:
            state = _feeder_state(t)
            if state != last:
                last, since = state, now
            elif state != "pickling" and now - since > FEEDER_SEND_S:
                break  # a pipe nobody reads, or a queue nobody closed (a brief idle is between items)
            t.join(0.01)


def _hook_worker_exit() -> None:
    """Once per DataLoader worker process: :func:`_join_queue_feeders` at its exit."""
    global _feeders_hooked
    if not _feeders_hooked:
        _feeders_hooked = True
        atexit.register(_join_queue_feeders)


class SharedPositions:
    """The trainer's resolved positions (a :class:`ConsumedPositions`), mirrored in shared memory
    for ``DataLoader`` workers whose copy of the dataset is older than the pass they run.

    ``buf``: uint8 shared tensor ``(_HEADER_BYTES + span,)``: an int64 header (published: how many
    resets so far, start, stop or -1, stride, offset, the trainer's watermark, overflow, a sequence
    number, the recorded worker pass and its base),
    then ``mask`` ``(span,)``, a ring: ``mask[p % span] == 1`` when position ``p`` of
    ``[watermark, watermark + span)`` is resolved above the watermark. The trainer resets it between
    passes (new epoch or share, resume, :class:`FeatureLoader`'s pass start) and marks positions as
    it receives them; as its watermark moves on, the slots it leaves behind are cleared for the
    positions a span further on, so the mirror holds any run whose resolved positions stay within a
    span of the watermark (before, within a span of the watermark at the last reset: a plain
    ``DataLoader`` in infinite mode whose trainer calls ``consume`` was refused after 65,536
    positions). Workers read it at the start of a pass, again if the sequence number changed while
    they read (a seqlock: no lock, and the trainer never waits). A position resolved a span or more
    past the watermark sets ``overflow``: the mirror can no longer say the state, and :meth:`read`
    refuses it.

    The workers of one pass split its positions among themselves counted from one base, the
    trainer's watermark when the pass began (:meth:`read_pass`). A worker that reads the mirror
    late, after the trainer already received samples of the pass from the others, must not take
    the watermark of then: before it resolves the first samples of a new worker pass, the trainer
    records that pass (each worker writes its pass number into :attr:`passes` as it begins) and
    the watermark just before (:meth:`note_pass`), which a late worker of that pass takes instead.
    (Before, two workers of a pass could count from different watermarks: samples duplicated and
    missing, and with ``max_lag`` both waited for a position neither owned.)
    """

    def __init__(self, span: int) -> None:
        self.buf = torch.zeros(_HEADER_BYTES + span, dtype=torch.uint8).share_memory_()
        #: per DataLoader worker id, the state its last pass began from: (start, watermark,
        #: resolved count, produced: 1 once the pass handed over a sample, ended: 1 once it ran to
        #: its end, the worker's pass number); row MAX_RECORDED_WORKERS: 1 once the repeat warning
        #: was given, then the state a worker found stuck (:meth:`stuck`). -1: nothing
        self.passes = torch.full((MAX_RECORDED_WORKERS + 1, 6), -1, dtype=torch.int64).share_memory_()
        self._views()

    def _views(self) -> None:
        a = self.buf.numpy()
        self.header, self.mask = a[:_HEADER_BYTES].view(np.int64), a[_HEADER_BYTES:]

    def __getstate__(self) -> dict[str, Any]:
        # the tensors travel as shared memory; numpy views would be copied
        return {"buf": self.buf, "passes": self.passes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.buf, self.passes = state["buf"], state["passes"]
        self._views()

    @staticmethod
    def _state(consumed: ConsumedPositions) -> tuple[int, int, int]:
        return consumed.start, consumed.watermark, consumed.n_resolved()

    def stuck(self, n_workers: int, consumed: ConsumedPositions) -> bool:
        """Every one of the ``n_workers`` workers' previous passes began from the state
        ``consumed`` is, ran to its end and handed over nothing, while the trainer had resolved
        some of the epoch: what is left of it are samples that fail (a plain ``DataLoader`` does
        not report a worker's trailing skips to ``consume``), which no pass will deliver."""
        if n_workers > MAX_RECORDED_WORKERS or consumed.n_resolved() == 0:
            return False
        rows = self.passes.numpy()
        now = self._state(consumed)
        if all(tuple(int(v) for v in r[:3]) == now and r[3] == 0 and r[4] == 1 for r in rows[:n_workers]):
            # for the workers that read the rows after this one began its pass (and rewrote its row):
            # written before that row, read after the rows
            rows[-1, 1:4] = now
            return True
        return tuple(int(v) for v in rows[-1, 1:4]) == now

    def begin_pass(self, wid: int, n_workers: int, consumed: ConsumedPositions, number: int) -> bool:
        """DataLoader worker ``wid`` of ``n_workers`` begins its pass ``number`` over ``consumed``:
        record it (and forget the pass numbers of worker ids past ``n_workers``: an earlier loader's
        with more workers, whose higher numbers :meth:`note_pass` would take for this loader's), and
        say whether its previous pass began from this very state and handed over samples (a
        repeat: nothing the trainer received reached the state in between) and no repeat was
        warned about yet."""
        if wid >= MAX_RECORDED_WORKERS:
            return False
        rows = self.passes.numpy()
        rows[n_workers:-1, 5] = -1
        now = self._state(consumed)
        repeat = tuple(int(v) for v in rows[wid, :3]) == now and rows[wid, 3] == 1 and rows[-1, 0] != 1
        rows[wid] = (*now, 0, 0, number)
        if repeat:
            rows[-1, 0] = 1
        return bool(repeat)

    def produced(self, wid: int) -> None:
        """Worker ``wid``'s pass handed over a sample."""
        if wid < MAX_RECORDED_WORKERS:
            self.passes.numpy()[wid, 3] = 1

    def ended(self, wid: int) -> None:
        """Worker ``wid``'s pass ran to its end."""
        if wid < MAX_RECORDED_WORKERS:
            self.passes.numpy()[wid, 4] = 1

    def forget_passes(self) -> None:
        """The trainer chose what comes next (``set_epoch``, ``load_state_dict``, a
        :class:`FeatureLoader` pass): no repeat to warn of (the warning, once given, stays given)."""
        rows = self.passes.numpy()
        rows[:-1] = -1
        rows[-1, 1:] = -1

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """The trainer rewrites the header or the mask: the sequence number is odd meanwhile (a
        reader that overlaps the write reads again), and even again however the write ends (an
        exception left it odd: readers spun for good)."""
        header = self.header
        header[_H_SEQ] = int(header[_H_SEQ]) | 1
        try:
            yield
        finally:
            header[_H_SEQ] = int(header[_H_SEQ]) + 1

    def _clear(self, lo: int, hi: int) -> None:
        """Free the ring slots of positions ``[lo, hi)`` (below the watermark now)."""
        n = self.mask.size
        if hi - lo >= n:
            self.mask[:] = 0
            return
        a, b = lo % n, hi % n
        if a <= b:
            self.mask[a:b] = 0
        else:
            self.mask[a:] = 0
            self.mask[:b] = 0

    def reset(self, consumed: ConsumedPositions) -> None:
        header, mask = self.header, self.mask
        above = np.fromiter(consumed.above, dtype=np.int64, count=len(consumed.above))
        fits = above - consumed.watermark < mask.size
        stop = -1 if consumed.stop is None else consumed.stop
        with self._writing():
            mask[:] = 0
            mask[above[fits] % mask.size] = 1
            header[:7] = (header[_H_PUBLISHED] + 1, consumed.start, stop, consumed.stride, consumed.offset,
                          consumed.watermark, int(not fits.all()))  # fmt: skip
            header[_H_PASS] = -1  # no worker pass recorded since

    def note_pass(self) -> None:
        """Before the trainer resolves a batch: if a DataLoader worker began a pass the mirror has
        not recorded since its last reset, record it with the watermark of now, the base that pass
        counts its positions from (:meth:`read_pass`). Its workers began before they produced what
        the trainer now resolves, so this runs before the pass's first sample moves the watermark."""
        newest = int(self.passes.numpy()[:-1, 5].max())
        header = self.header
        if newest >= 1 and newest != int(header[_H_PASS]):
            with self._writing():
                header[_H_PASS], header[_H_PASS_BASE] = newest, header[_H_WATERMARK]

    def mark(self, position: int, watermark: int | None = None) -> None:
        """``position`` (of the mirrored share) is resolved; ``watermark``: the trainer's now."""
        header, n = self.header, self.mask.size
        floor = int(header[_H_WATERMARK])
        if watermark is not None and watermark > floor:
            with self._writing():
                header[_H_WATERMARK] = watermark
                self._clear(floor, watermark)
            floor = watermark
        i = position - floor
        if 0 <= i < n:
            self.mask[position % n] = 1
        elif i >= n:
            header[_H_OVERFLOW] = 1

    def published(self) -> int:
        """How many times the mirror was reset (0: never)."""
        return int(self.header[_H_PUBLISHED])

    def watermark(self) -> int:
        """The trainer's watermark as of its last received sample."""
        return int(self.header[_H_WATERMARK])

    def read(self) -> ConsumedPositions | None:
        """The mirrored state (None: nothing mirrored yet)."""
        return self.read_pass(0)[0]

    def read_pass(self, number: int) -> tuple[ConsumedPositions | None, int]:
        """The mirrored state (None: nothing mirrored yet), and the base DataLoader worker pass
        ``number`` counts its positions from: the watermark :meth:`note_pass` recorded for it, or,
        while the trainer has received nothing of it, the watermark now (which it will record)."""
        header = self.header
        while True:
            seq = int(header[_H_SEQ])
            published, start, stop, stride, offset, floor, overflow = (int(v) for v in header[:7])
            noted, noted_base = int(header[_H_PASS]), int(header[_H_PASS_BASE])
            slots = np.flatnonzero(self.mask)
            if seq % 2 == 0 and int(header[_H_SEQ]) == seq:
                break
            time.sleep(0)
        base = noted_base if noted == number else floor
        if not published:
            return None, base
        n = self.mask.size
        if overflow:
            raise LoaderError(
                f"persistent_workers=True: DataLoader workers cannot be told the positions the trainer "
                f"resolved, some lie {n} or more past its watermark {floor} (one worker that far behind "
                f"the others when a pass was stopped); use persistent_workers=False, or ds.loader(...), "
                f"whose max_lag bounds how far workers run ahead"
            )
        consumed = ConsumedPositions(start, None if stop < 0 else stop, stride, offset)
        consumed.load({"watermark": floor, "resolved_above": []})
        for p in np.sort(floor + (slots - floor) % n).tolist():
            consumed.mark(p)
        return consumed, base


# --------------------------------------------------------------------------------------- dataset
def _check_count(name: str, value: Any, least: int) -> None:
    """An integer argument of :class:`FeatureDataset` that must be ≥ ``least`` (an InvalidRequest
    naming it otherwise: a float crop size or a negative seed failed later, or not at all)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
        raise InvalidRequest(f"FeatureDataset: {name} must be an integer ≥ {least}; got {value!r}")


def _client_for(source: Any, token: str | None, options: Mapping[str, Any] | None) -> Any:
    """``source``, or the LookupClient of a URL ``source`` made with ``options`` (when given)."""
    if not options:
        return source
    if not (isinstance(source, str) and source.startswith(("http://", "https://"))):
        raise InvalidRequest(
            f"FeatureDataset: client_options are for a lookup-service URL source, not {source!r}; "
            "give the settings to the reader you pass instead"
        )
    import inspect

    from featurecache.client.http import LookupClient

    known = set(inspect.signature(LookupClient).parameters) - {"url", "token", "answered"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidRequest(
            f"FeatureDataset: unknown client_options {unknown}; LookupClient takes {sorted(known)}"
        )
    return LookupClient(source, token=token, **options)


def _no_job(item: Any) -> None:
    """The job of the :class:`ReadyFirst` that only checks the pool settings (it runs nothing)."""


def _check_retry_budget(reader: Any, deadline_s: float | None) -> None:
    """Warn when a lookup client may still be retrying when the sample deadline abandons it."""
    budget, timeout = getattr(reader, "retry_budget_s", None), getattr(reader, "timeout", None)
    if deadline_s is None or not isinstance(budget, int | float) or not isinstance(timeout, int | float):
        return
    if budget + timeout >= deadline_s:
        log.warning(
            "%r: retry_budget_s %g + timeout %g >= deadline_s %g: a sample whose call is still being "
            "retried is abandoned at its deadline (raise deadline_s or lower the client's budget)",
            reader, budget, timeout, deadline_s,
        )  # fmt: skip


class FeatureDataset(IterableDataset):  # type: ignore[type-arg]
    """Cropped, assembled training samples from a feature store, ready-first.

    ``source``: store directory, lookup-service URL, or a reader object (a
    :class:`~featurecache.client.http.LookupClient` reaches worker processes as its settings:
    token, timeouts, retries); ``token``: bearer token of a URL source (default
    ``$FEATURECACHE_AUTH_TOKEN``); ``client_options``: keyword arguments of the
    :class:`~featurecache.client.http.LookupClient` made for a URL source, e.g.
    ``{"retry_budget_s": 20, "timeout": 10}`` (a client whose retry budget plus one ``timeout``
    exceeds ``deadline_s`` is warned about: its samples would be abandoned before it gives up). Sampling: ``sampler`` or ``weighting`` (``"uniform"`` |
    ``"af3"``), ``cluster_table``, ``filters``, ``samples_per_epoch``, ``seed``, ``infinite``.
    Cropping: ``crop_size`` tokens, ``max_atoms`` (atoms of a crop; None, the default, = no atom
    budget: a crop holds ``min(N, crop_size)`` tokens; with a budget a crop holds fewer tokens
    when their atoms would exceed it, see :data:`~featurecache.client.crop.DEFAULT_MAX_ATOMS`),
    ``crop_weights`` (contiguous, spatial, spatial-interface), ``crop_whole_groups`` (False, the
    default: crop token by token as AF3 does; True: keep or drop each ligand, glycan and modified
    residue whole, see :mod:`featurecache.client.crop`). Assembly: ``max_msa_rows``, ``augment_ref``, ``use_msa``, ``pair_msa`` (pair
    the rows of protein chains of different sequences by species, AF3 SI 2.3; False: every chain's
    rows unpaired). Execution:
    ``pool`` (``"thread"`` | ``"process"``), ``workers`` (samples computed at once), ``window``
    (reorder window), ``deadline_s`` (per sample; None = none), ``mp_context``. Sharding:
    ``rank`` / ``world_size`` (default: from ``torch.distributed`` when initialized).
    ``sample_hook(key)`` runs before each sample's fetch (fault injection in tests and
    benchmarks). ``max_source_failures``: after this many samples in a row (no sample arrived in
    between) failed because the source itself cannot serve (:data:`SOURCE_FAILURES`: the lookup
    service unreachable or not answering within its client's timeout after the client's retries,
    or refusing the token), the iterator raises :class:`~featurecache.errors.LoaderError` naming
    the source and the last error (None = skip them like any other failed sample).
    ``max_consecutive_skips``: after this many skipped samples in a row, whatever the reason, the
    iterator raises ``LoaderError`` instead of spinning forever on a broken source (None = never).
    ``allow_unfinished``: read a local store whose first build has not finished (interrupted, or
    still running) as it is; by default such a store is refused with
    :class:`~featurecache.errors.UnfinishedBuildError` (a ``StoreError``), since its index lists
    only the entries written so far, without the MSAs and reference conformers still to come
    (a lookup service does not serve it: 503 until its build ends).

    Yields sample dicts (see :mod:`.assemble`) with ``position``, ``epoch``, ``index``,
    ``reorder_depth`` and ``skipped`` (skip records since the previous sample). Batch them with
    :func:`~featurecache.client.assemble.collate`, or use :meth:`loader`.
    """

    def __init__(
        self,
        source: Any,
        *,
        token: str | None = None,
        client_options: Mapping[str, Any] | None = None,
        crop_size: int = DEFAULT_CROP_SIZE,
        max_atoms: int | None = DEFAULT_MAX_ATOMS,
        crop_weights: Sequence[float] = DEFAULT_CROP_WEIGHTS,
        interface_cutoff: float = INTERFACE_CROP_CUTOFF,
        crop_whole_groups: bool = DEFAULT_CROP_WHOLE_GROUPS,
        sampler: Sampler | None = None,
        weighting: str = "uniform",
        cluster_table: pa.Table | None = None,
        filters: SamplerFilter | None = None,
        samples_per_epoch: int | None = None,
        seed: int = 0,
        infinite: bool = False,
        max_msa_rows: int = DEFAULT_MAX_MSA_ROWS,
        augment_ref: bool = True,
        use_msa: bool = True,
        pair_msa: bool = True,
        pool: str = "thread",
        workers: int = 2,
        window: int = 8,
        deadline_s: float | None = 60.0,
        mp_context: str = "spawn",
        rank: int | None = None,
        world_size: int | None = None,
        sample_hook: SampleHook | None = None,
        max_consecutive_skips: int | None = 256,
        max_source_failures: int | None = 3,
        allow_unfinished: bool = False,
    ) -> None:
        super().__init__()
        # every check that needs no reader comes first: a URL source's reader holds connections,
        # which a refused argument left open (review R31d s47 #3)
        _check_count("crop_size", crop_size, 1)
        _check_count("seed", seed, 0)
        check_seed(seed, "FeatureDataset")  # and < 2**32 (review R41b s51 #2)
        _check_count("workers", workers, 1)
        _check_count("max_msa_rows", max_msa_rows, 1)
        for name, limit in (
            ("max_consecutive_skips", max_consecutive_skips),
            ("max_source_failures", max_source_failures),
        ):
            if limit is not None and limit < 1:
                raise InvalidRequest(f"{name} must be >= 1 or None, got {limit}")
        if (rank is None) != (world_size is None):
            raise InvalidRequest("give both rank and world_size, or neither")
        if world_size is not None and not 0 <= int(rank or 0) < world_size:
            raise InvalidRequest(f"rank {rank} out of range for world size {world_size}")
        ReadyFirst(_no_job, pool=pool, workers=workers, window=window, deadline_s=deadline_s)  # validates
        self.cropper = Cropper(
            crop_size, max_atoms, crop_weights, interface_cutoff, whole_groups=crop_whole_groups
        )
        made = _client_for(source, token, client_options)
        reader = open_source(made, token=None if client_options else token)
        owned = reader is not source  # opened here from a path or URL: this dataset closes it
        try:
            if isinstance(reader, LocalStore) and not allow_unfinished:
                # its index lists the entries written so far, without the MSAs and reference conformers
                # still to come: samples of query rows and no conformers (the lookup service answers 503)
                unfinished = unfinished_build_error(
                    reader, " (FeatureDataset(..., allow_unfinished=True) reads it as it is)"
                )
                if unfinished is not None:
                    raise unfinished
            _check_retry_budget(reader, deadline_s)
            self.sampler = sampler or Sampler(
                reader.entries, reader.chains, reader.interfaces, weighting=weighting, cluster_table=cluster_table,
                filters=filters, samples_per_epoch=samples_per_epoch, seed=seed,
                failures=reader.failures if reader.entries.num_rows == 0 else None,  # only said of an empty store
            )  # fmt: skip
            # after the sampler's tables: a lookup client that has reached its service says so in the
            # settings its worker copies are made from, so that their first calls wait out a restart
            # instead of failing as a first contact with a URL that never answered
            self.source = SourceRef(source, reader, owned=owned)
            #: the featurizer versions of the source's entries and MSAs (``store.versions.store_versions``;
            #: None: a reader that cannot say); one warning when they are mixed or not this featurecache's
            self.featurizer_versions = versions = source_versions(reader)
            remote = hasattr(reader, "shown_url")  # compared with the service's featurecache
            where = str(reader.shown_url if remote else getattr(reader, "path", self.source.describe()))
            for line in version_notes(versions, where, this_code=(versions or {}).get("this_code"),
                                      code="the service's featurecache" if remote else "this featurecache"):  # fmt: skip
                log.warning("%s", line)
            if isinstance(reader, LocalStore):  # MSAs merged by an older MSA stage (as info and verify say)
                for line in msa_stage_notes(reader):
                    log.warning("%s", line)
            self.job = SampleJob(self.source, self.cropper, seed=seed, max_msa_rows=max_msa_rows,
                                 augment_ref=augment_ref, use_msa=use_msa, hook=sample_hook,
                                 pair_msa=pair_msa)  # fmt: skip
        except BaseException:
            if owned:
                reader.close()
            raise
        self.seed = seed
        self.infinite = infinite
        self.pool, self.workers, self.window = pool, workers, window
        self.deadline_s, self.mp_context = deadline_s, mp_context
        self.max_consecutive_skips = max_consecutive_skips
        self.max_source_failures = max_source_failures
        self._rank, self._world = rank, world_size
        self.epoch = 0
        self.stats = LoaderStats()
        self._consumed: ConsumedPositions | None = None
        # made now, before any DataLoader worker copies the dataset (a forked one is not pickled)
        self._shared = SharedPositions(max(self.epoch_length, MIN_SHARED_SPAN) + SHARE_PADDING_SPAN)
        self._set_epoch_warned = False
        self._worker_passes = 0  # passes begun by this copy inside a DataLoader worker
        self._track_on_yield = True
        self._report_trailing_skips = False  # FeatureLoader's collate reads skip-only items
        #: FeatureLoader's bound on how far (positions of the share) a DataLoader worker's samples
        #: may run ahead of the trainer's watermark (None: unbounded)
        self._max_lag: int | None = None
        self._executors: dict[int, ReadyFirst] = {}

    # --------------------------------------------------------------- pickling (DataLoader workers)
    def __getstate__(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["_executors"] = {}
        d["_worker_passes"] = 0
        if self._world is None and torch.distributed.is_available() and torch.distributed.is_initialized():
            # a spawned DataLoader worker has no process group: it would take the whole stream
            d["_rank"], d["_world"] = self.rank_world()
        return d

    # ------------------------------------------------------------------------------- sharding
    def rank_world(self) -> tuple[int, int]:
        if self._world is not None:
            return int(self._rank or 0), int(self._world)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    @property
    def epoch_length(self) -> int:
        return len(self.sampler)

    def __len__(self) -> int:
        """Per-epoch mode: the samples one epoch holds on this rank, ``ceil(L / W)`` (its share of
        the epoch, padded as :meth:`_span` says), counting any that will fail and be skipped.
        torch's ``len(DataLoader(ds, batch_size=B))`` is ``ceil(len(ds) / B)``, which with several
        workers (each batches its own share) is not the batches a pass hands out:
        ``len(ds.loader(...))`` is. Infinite mode has no length (``TypeError``, as ``len()`` of an
        unsized object)."""
        if self.infinite:
            raise TypeError(
                "FeatureDataset(infinite=True) has no length: its stream never ends (count steps instead; "
                "per-epoch mode, infinite=False, has one: the samples of an epoch on this rank)"
            )
        world = self.rank_world()[1]
        return self._span(world) // world

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (per-epoch mode); the consumed-position state starts afresh.
        Reaches persistent ``DataLoader`` workers at their next pass. In infinite mode the stream
        runs on through every epoch and this does nothing (a warning, once): starting it again at
        an epoch would repeat the samples already drawn (the habit of calling it every N steps, as
        with torch's ``DistributedSampler``, gave the same N samples each time)."""
        if self.infinite:
            if not self._set_epoch_warned:
                log.warning("FeatureDataset(infinite=True).set_epoch(%s) does nothing: the stream goes on "
                            "through every epoch (per-epoch mode is infinite=False)", epoch)  # fmt: skip
                self._set_epoch_warned = True
            return
        if epoch != self.epoch:
            self.epoch = int(epoch)
            self._consumed = None
        self._positions()  # mirrored now: a plain DataLoader does not call the trainer's copy again
        self._shared.forget_passes()  # the trainer chose: a pass of the same epoch again is no mistake

    def _next_epoch_if_done(self) -> None:
        """Per-epoch mode: once this rank's share of the epoch is resolved, move to the next epoch."""
        if not self.infinite and next(self._positions().pending(), None) is None:
            self.set_epoch(self.epoch + 1)

    def _span(self, world: int | None = None) -> int:
        """Positions an epoch spans: per-epoch mode with ``world`` (default: this rank's world)
        ranks pads the epoch length ``L`` up to a multiple of it, ``ceil(L / W) · W`` (= ``L``
        when ``W`` divides it), so that every rank takes as many samples, as torch's
        ``DistributedSampler`` pads; ``L`` in infinite mode."""
        if self.infinite:
            return self.epoch_length
        if world is None:
            world = self.rank_world()[1]
        return -(-self.epoch_length // world) * world

    def _key(self, position: int, span: int) -> SampleKey:
        """The sample key of ``position`` in epochs of ``span`` positions: index ``i`` of epoch
        ``e`` draws the epoch's ``i % L``-th unit (the padding repeats the epoch's first), seeded
        by ``i`` itself (``SampleKey.draw``): a padding sample is that unit cropped and augmented
        afresh, not a byte-identical copy of the sample another rank draws (review R41b s51 #1)."""
        epoch, index = divmod(int(position), span)
        key = self.sampler.key(epoch * self.epoch_length + index % self.epoch_length)
        return key if index < self.epoch_length else replace(key, draw=index)

    def _positions(self) -> ConsumedPositions:
        rank, world = self.rank_world()
        c = self._consumed
        if c is None or c.stride != world or c.offset != rank:
            span = self._span(world)
            start = 0 if self.infinite else self.epoch * span
            stop = None if self.infinite else start + span
            c = ConsumedPositions(start, stop, world, rank)
            self._consumed = c
            if get_worker_info() is None:  # a worker's copy never writes the trainer's mirror
                self._shared.reset(c)
        return c

    def _mark(self, consumed: ConsumedPositions, position: int) -> None:
        """Resolve ``position`` in the trainer's state and its shared mirror."""
        consumed.mark(position)
        if consumed is self._consumed and consumed.in_share(position):  # not one set_epoch replaced
            self._shared.mark(position, consumed.watermark)

    def _publish(self) -> None:
        """Mirror the trainer's state anew (between passes: it rebases the mirror at the watermark)."""
        self._shared.reset(self._positions())

    def _worker_positions(self, first_pass: bool, wid: int, n_workers: int) -> tuple[ConsumedPositions, int]:
        """What a DataLoader worker's pass iterates: its copy's own state in the first pass of the
        worker (the copy was taken at that pass's start), the trainer's mirrored state later; in
        per-epoch mode the next epoch when the trainer resolved all of that one (a plain
        ``DataLoader`` whose trainer calls :meth:`consume`: its own copy does not move on, as
        :class:`FeatureLoader`'s does). A pass that begins from the state the worker's previous
        pass began from, which handed samples over, repeats them: warned once (a plain
        ``DataLoader`` whose trainer neither consumes nor calls ``set_epoch``)."""
        consumed, base = None, 0
        if not first_pass:
            consumed, base = self._shared.read_pass(self._worker_passes)
        if consumed is None:
            consumed = self._positions()
            base = consumed.watermark
        if not self.infinite:
            stuck = self._shared.stuck(n_workers, consumed)
            if stuck or next(consumed.pending(), None) is None:
                epoch = consumed.start // self._span(consumed.stride)
                if stuck and wid == 0:
                    log.warning("FeatureDataset: the rest of epoch %d (%d samples) failed again in this pass and "
                                "the one before, and no pass will deliver it: left out (the next epoch "
                                "begins)", epoch, sum(1 for _ in consumed.pending()))  # fmt: skip
                self.epoch, self._consumed = epoch + 1, None
                consumed = self._positions()  # this copy's (in a worker the mirror is not touched)
                base = consumed.watermark
        if self._shared.begin_pass(wid, n_workers, consumed, self._worker_passes):
            where = f"epoch {self.epoch}" if not self.infinite else f"position {consumed.watermark}"
            log.warning(
                "FeatureDataset: this DataLoader pass begins where the one before began (%s, nothing the "
                "trainer received recorded since), so it repeats its samples: a plain DataLoader's workers "
                "iterate a copy of the dataset, which does not learn what the trainer received. Call "
                "ds.set_epoch(epoch) before each pass (per-epoch mode, as with DistributedSampler), or "
                "ds.consume(batch) for each batch, or iterate ds.loader(...) (a FeatureLoader) instead. "
                "(With consume: a plain DataLoader's drop_last=True drops a worker's last, partial batch "
                "before the trainer sees it, so its samples come again; ds.loader(drop_last=True) resolves them)",
                where,
            )
        return consumed, base

    # ------------------------------------------------------------------------------ iteration
    def _executor(self, in_worker: bool) -> ReadyFirst:
        pid = os.getpid()
        ex = self._executors.get(pid)
        if ex is None:
            pool = self.pool
            if pool == "process" and in_worker:
                log.warning("a process pool cannot start inside a DataLoader worker; using threads")
                pool = "thread"
            ex = ReadyFirst(self.job, pool=pool, workers=self.workers, window=self.window,
                            deadline_s=self.deadline_s, mp_context=self.mp_context)  # fmt: skip
            self._executors = {pid: ex}
        return ex

    def close(self) -> None:
        """Stop the pool: threads end the sample they run and exit, waited for (up to
        :data:`~featurecache.client.loader.CLOSE_JOIN_S` s); processes exit. Then close the reader
        this dataset opened from a path or URL (a reader passed in is the caller's to close). A
        ``DataLoader`` worker's copy has readers of its own, so closing the dataset in the trainer
        leaves running workers be, and a worker's copy never closes the trainer's reader. Iterating
        again afterwards opens the pool and the reader anew."""
        for ex in self._executors.values():
            ex.close()
        self._executors = {}
        self.source.close()

    def __enter__(self) -> FeatureDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Generator[dict[str, Any], None, None]:
        info = get_worker_info()
        if info is None:
            return self._samples(None, 0, 1)
        # Counted at iter(), which the DataLoader calls in each worker at the start of every pass
        # (a pass's generator may never be advanced before the next pass replaces it).
        self._worker_passes += 1
        _hook_worker_exit()
        return self._samples(self._worker_passes == 1, info.id, info.num_workers)

    def _samples(
        self, first_pass: bool | None, wid: int, n_workers: int
    ) -> Generator[dict[str, Any], None, None]:
        """The pass's samples; ``first_pass`` None: iterated by the trainer itself (not in a
        DataLoader worker ``wid`` of ``n_workers``)."""
        in_worker = first_pass is not None
        if first_pass is None:  # a worker's state is the trainer's at the pass's start: already moved on
            self._next_epoch_if_done()
            consumed = self._positions()
            start = consumed.watermark
        else:
            consumed, start = self._worker_positions(first_pass, wid, n_workers)
        world = consumed.stride
        track = self._track_on_yield and not in_worker
        # worker w of K takes the share's positions w, w + K, … counted from the pass's watermark
        # (one for all its workers: SharedPositions.read_pass): a DataLoader's round robin restarts
        # at worker 0 every pass, so a fixed assignment would skew the workers by a batch each
        # short pass (in_order: only worker 0's ever delivered)
        base = start // world
        positions = (p for p in consumed.pending() if (p // world - base) % n_workers == wid)
        span = self._span(world)
        items = ((p, self._key(p, span)) for p in positions)
        skipped: list[dict[str, Any]] = []
        in_a_row = source_failures = 0
        lag = self._max_lag if in_worker and self.infinite else None
        generation = self._shared.published()
        t0 = time.perf_counter()
        for out in self._executor(in_worker).run(items):
            key: SampleKey = out.item
            if not isinstance(out, Done):
                rec = SkipRecord(
                    out.seq, key.entry_id, out.reason, out.error_class, out.message, out.elapsed_s
                )
                skipped.append(rec.as_dict())
                if track:
                    self.stats.record_skip(rec)
                    self._mark(consumed, out.seq)
                in_a_row += 1
                if rec.error_class == SOURCE_CHANGED:
                    raise FeaturizerChanged(rec.message)
                if rec.error_class in SOURCE_FAILURES:
                    source_failures += 1
                    if self.max_source_failures is not None and source_failures >= self.max_source_failures:
                        raise LoaderError(f"{self.source.describe()} failed {source_failures} samples in a row; "
                                          f"the last: position {rec.position} ({rec.entry_id}): {rec.error_class}: "
                                          f"{rec.message}", rec.error_class)  # fmt: skip
                if self.max_consecutive_skips is not None and in_a_row >= self.max_consecutive_skips:
                    raise LoaderError(f"{in_a_row} samples in a row were skipped; the last: position {rec.position} "
                                      f"({rec.entry_id}): {rec.error_class}: {rec.message}", rec.error_class)  # fmt: skip
                continue
            in_a_row = source_failures = 0
            sample = out.value
            sample["position"] = out.seq
            sample["reorder_depth"] = out.depth
            sample["skipped"] = skipped
            skipped = []
            if lag is not None and not self._within_lag(
                out.seq, lag * world, wid, n_workers, world, generation, base
            ):
                return  # the trainer began another pass (or is gone): this one is over
            if track:
                self._mark(consumed, out.seq)
                self.stats.record_sample(out.depth)
                self.stats.record_wait(time.perf_counter() - t0)
            elif in_worker:
                self._shared.produced(wid)
            yield sample
            t0 = time.perf_counter()
        if in_worker:
            self._shared.ended(wid)
        if skipped and not track and self._report_trailing_skips:
            # no later sample of this pass carries them: a skip report of their own, which
            # FeatureLoader's collate keeps out of the batch's samples (else: never reported, and a
            # per-epoch pass ending in a skip left its epoch unfinished, every later pass empty)
            yield {K_SKIPS_ONLY: True, "skipped": skipped}

    def _within_lag(
        self, position: int, lag: int, wid: int, n_workers: int, world: int, generation: int, base: int
    ) -> bool:
        """Wait (DataLoader worker ``wid``) until ``position`` is less than ``lag`` positions past
        the trainer's watermark, or the watermark is this worker's own position (its owner never
        waits: the watermark moves on only when the trainer receives it). Without it a worker that
        lags behind the others (a slow host, a run of large entries) lets them run ahead without
        bound, and the resolved positions above the watermark — the exact-resume state — grow
        with the run. False: the pass is over (the mirror was reset for another pass, or the
        trainer process is gone), stop it."""
        parent = os.getppid()
        pause = 0.001
        while True:
            if self._shared.published() != generation or os.getppid() != parent:
                return False
            watermark = self._shared.watermark()
            if position - watermark < lag or (watermark // world - base) % n_workers == wid:
                return True
            time.sleep(pause)
            pause = min(2 * pause, 0.02)

    def consume(self, batch: Mapping[str, Any]) -> None:
        """Record that the trainer received ``batch`` (or one sample): its positions and the skips
        it reports are resolved. :class:`FeatureLoader` calls this for every batch."""
        self._resolve(batch, received=True)

    def _resolve(self, batch: Mapping[str, Any], received: bool) -> None:
        """Resolve ``batch``'s positions and the skips it reports; its samples count in ``stats``
        when the trainer ``received`` them (not: a partial batch :class:`FeatureLoader` dropped)."""
        positions = _ints(batch.get("position"))
        if positions and not self.infinite:
            # a plain DataLoader's workers move on to the next epoch once the trainer resolved this
            # one (its own copy does not iterate): follow them
            epoch = max(positions) // self._span()
            if epoch > self.epoch:
                self.epoch, self._consumed = epoch, None
        consumed = self._positions()
        self._shared.note_pass()  # a DataLoader pass's first batch: the base its workers count from
        for p in positions:
            self._mark(consumed, p)
        for d in _ints(batch.get("reorder_depth", 0)) if received else ():
            self.stats.record_sample(d)
        for rec in batch.get("skipped", ()):
            self._mark(consumed, int(rec["position"]))
            self.stats.record_skip(SkipRecord(**rec))

    # ---------------------------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        """What the trainer has consumed so far this epoch (see the module docstring)."""
        rank, world = self.rank_world()
        consumed = self._positions()
        epoch = self.epoch
        if self.infinite:
            epoch = consumed.watermark // self.epoch_length
        return {
            K_VERSION: STATE_VERSION, K_SEED: self.seed, K_EPOCH_LENGTH: self.epoch_length,
            K_INFINITE: self.infinite, K_EPOCH: epoch, K_WORLD: world, K_RANK: rank, K_CONSUMED: consumed.state(),
            K_STREAM: self.sampler.stream_digest(), K_SPAN: self._span(world),
        }  # fmt: skip

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        rank, world = self.rank_world()
        if int(state.get(K_VERSION, -1)) != STATE_VERSION:
            raise InvalidRequest(f"state version {state.get(K_VERSION)} is not {STATE_VERSION}")
        for k, mine in ((K_SEED, self.seed), (K_EPOCH_LENGTH, self.epoch_length), (K_INFINITE, self.infinite),
                        (K_WORLD, world), (K_RANK, rank)):  # fmt: skip
            if state[k] != mine:
                raise InvalidRequest(f"cannot resume: state has {k}={state[k]!r}, this dataset {mine!r}")
        theirs = state.get(K_STREAM)
        if theirs is not None and theirs != self.sampler.stream_digest():
            log.warning("the resumed state was taken over another sampling stream (its source's entries, "
                        "their chains or weights differ: a store extended, pruned or rebuilt since, or "
                        "other sampler settings): it resumes at the same positions, but they draw other "
                        "samples than the run before would have")  # fmt: skip
        their_span, span = state.get(K_SPAN, self.epoch_length), self._span(world)
        if their_span != span:
            raise InvalidRequest(
                f"cannot resume: the state numbers epochs of {their_span} positions, "
                f"this dataset of {span} (a per-epoch state of {world} ranks over epochs of "
                f"{self.epoch_length} samples from a featurecache that did not pad the epoch to a multiple of "
                "the ranks); resume it with that featurecache, or start its epoch again (set_epoch)"
            )
        if not self.infinite:
            self.epoch = int(state[K_EPOCH])
        self._consumed = None
        self._positions().load(dict(state[K_CONSUMED]))
        self._shared.forget_passes()
        self._publish()

    # ------------------------------------------------------------------------ direct access
    def sample(self, position: int) -> dict[str, Any]:
        """The sample at stream ``position``, computed here and now (same crop as in iteration)."""
        key = self._key(position, self._span())
        out = self.job(key)
        out["position"] = position
        out["reorder_depth"] = 0
        out["skipped"] = []
        return out

    def loader(self, batch_size: int = 1, num_workers: int = 0, **kwargs: Any) -> FeatureLoader:
        return FeatureLoader(self, batch_size=batch_size, num_workers=num_workers, **kwargs)


def reshard_states(states: Sequence[Mapping[str, Any]], world_size: int) -> list[dict[str, Any]]:
    """The :meth:`FeatureDataset.state_dict` of every rank of an infinite-mode run (``states[r]``:
    rank r's) made the states of ``world_size`` ranks over the same stream, for a job that comes
    back on another number of ranks (a preempted job on other nodes). A position resolved on any
    old rank is resolved on the new rank whose share holds it, so the new ranks together draw every
    position the old ones had not resolved, each once, and none they had. Only positions between
    the old ranks' lowest watermark and their highest resolved position are looked at (their
    spread, a few batches). Per-epoch states are refused: each new rank's share of the rest of the
    epoch would differ in length (DDP ranks of unequal steps hang). ``states[r]`` for r of the
    same world, seed, epoch length and stream, each once, or an ``InvalidRequest`` saying which."""
    _check_count("world_size", world_size, 1)
    if not states:
        raise InvalidRequest("reshard_states: no state given")
    first = states[0]
    old_world = len(states)
    for r, st in enumerate(states):
        if int(st.get(K_VERSION, -1)) != STATE_VERSION:
            raise InvalidRequest(f"state {r}: version {st.get(K_VERSION)} is not {STATE_VERSION}")
        if not st[K_INFINITE]:
            raise InvalidRequest(
                "per-epoch states cannot be resharded (the new ranks' shares of the rest of the epoch "
                "would differ in length); resume on the same number of ranks, or start the next epoch"
            )
        if st[K_WORLD] != old_world or st[K_RANK] != r:
            raise InvalidRequest(f"state {r} is of rank {st[K_RANK]} of {st[K_WORLD]}: give every rank's "
                                 f"state of one run in rank order ({old_world} given)")  # fmt: skip
        for k in (K_SEED, K_EPOCH_LENGTH, K_STREAM):
            if st.get(k) != first.get(k):
                raise InvalidRequest(
                    f"state {r} has {k}={st.get(k)!r}, state 0 {first.get(k)!r}: not one run"
                )
        if type(st[K_WORLD]) is not int or type(st[K_RANK]) is not int:
            raise InvalidRequest(f"state {r}: rank and world_size must be integers")
        ConsumedPositions(0, None, old_world, r).load(dict(st[K_CONSUMED]))  # its watermark is of its share
    marks = [int(st[K_CONSUMED]["watermark"]) for st in states]
    above = [set(map(int, st[K_CONSUMED]["resolved_above"])) for st in states]

    def resolved(p: int) -> bool:
        r = p % old_world
        return p < marks[r] or p in above[r]

    low = min(marks)
    high = max([*marks, *(max(a) + 1 for a in above if a)])
    out = []
    for rank in range(world_size):
        share = ConsumedPositions(0, None, world_size, rank)
        mark = low + (rank - low) % world_size  # every position below the lowest watermark is resolved
        while resolved(mark):
            mark += world_size
        share.load({"watermark": mark,
                    "resolved_above": [p for p in range(mark + world_size, high, world_size) if resolved(p)]})  # fmt: skip
        out.append({**first, K_WORLD: world_size, K_RANK: rank, K_CONSUMED: share.state(),
                    K_EPOCH: share.watermark // int(first[K_EPOCH_LENGTH])})  # fmt: skip
    return out


def _ints(value: Any) -> list[int]:
    """A tensor, array, list or scalar of integers as a list (None → [])."""
    if value is None:
        return []
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


@dataclass
class TrackedBatch:
    """What :class:`FeatureLoader`'s collate hands from a worker to the trainer: ``batch``, what
    the user's collate made of the samples (None: a skip report alone), and beside it what
    :meth:`FeatureDataset.consume` needs, taken from the samples before that collate ran: their
    ``position`` and ``reorder_depth`` and the ``skipped`` records they carry. So consumption is
    tracked whatever the collate returns (a collate that kept only the model inputs made every pass
    repeat epoch 0 silently; a list or a tuple crashed: review R26c s44 #2, #3)."""

    batch: Any
    position: list[int]
    reorder_depth: list[int]
    skipped: list[dict[str, Any]]
    skips_only: bool = False

    def tracking(self) -> dict[str, Any]:
        """The positions and skips as :meth:`FeatureDataset.consume` reads them."""
        return {"position": self.position, "reorder_depth": self.reorder_depth, "skipped": self.skipped}

    def pin_memory(self) -> TrackedBatch:
        """The DataLoader's ``pin_memory=True`` pins the user's batch, as it would unwrapped."""
        from torch.utils.data._utils.pin_memory import pin_memory

        return replace(self, batch=pin_memory(self.batch))


class SkipReportCollate:
    """``collate_fn`` of :class:`FeatureLoader`: ``fn`` (the given collate, default
    :func:`~featurecache.client.assemble.collate`) over the batch's samples, in a
    :class:`TrackedBatch` with their positions and skip records; the skip records of skip-only
    items (:data:`K_SKIPS_ONLY`: a pass that ended in skips) are tracked too, and added to the
    batch's ``skipped`` when the batch is a mutable mapping. Skip-only items alone make a
    ``TrackedBatch(None, …, skips_only=True)``, which FeatureLoader consumes without handing it
    to the trainer. ``fn`` may return anything."""

    def __init__(self, fn: Callable[[list[Any]], Any]) -> None:
        self.fn: Callable[[list[Any]], Any] = fn.fn if isinstance(fn, SkipReportCollate) else fn

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> TrackedBatch:
        samples = [s for s in items if not s.get(K_SKIPS_ONLY)]
        trailing = [rec for s in items if s.get(K_SKIPS_ONLY) for rec in s["skipped"]]
        # read before fn runs: it may change or drop the samples' keys
        positions = [int(s["position"]) for s in samples]
        depths = [int(s.get("reorder_depth", 0)) for s in samples]
        skipped = [*(rec for s in samples for rec in s.get("skipped", ())), *trailing]
        if not samples:
            return TrackedBatch(None, [], [], trailing, skips_only=True)
        batch = self.fn(samples)
        if trailing and isinstance(batch, MutableMapping):
            batch["skipped"] = [*batch.get("skipped", ()), *trailing]
        return TrackedBatch(batch, positions, depths, skipped)


class FeatureLoader:
    """A ``torch.utils.data.DataLoader`` over a :class:`FeatureDataset` that knows what the trainer
    consumed: every batch it hands out is passed to ``dataset.consume``, and the wait for it is
    recorded in ``dataset.stats`` (one step per batch; the wait for a batch consumed here without
    a step, skip reports or a dropped partial batch, counts in the next one's, or in the pass's
    ``total_wait_s`` when the pass ends after it). ``state_dict`` / ``load_state_dict``
    delegate to the dataset; load before a pass (with persistent workers too). Iterating again
    after an epoch ended starts the next one (per-epoch mode), after a stopped pass continues it.
    Workers' batches are taken as they come (``in_order=False`` unless given), except with the
    dataset's ``window=0``: its workers' round robin (``in_order=True``), so the batches come in the
    stream's order, the same on every run.

    ``collate_fn`` (default :func:`~featurecache.client.assemble.collate`) gets the list of sample
    dicts and may return anything (a dict of some keys, a tuple, a list, an object of its own):
    the loader hands that on as it is, and takes what consumption tracking needs (each sample's
    ``position`` and ``skipped``) from the samples before the collate runs (:class:`TrackedBatch`).

    ``max_lag`` (infinite mode, ``num_workers`` ≥ 2, ``in_order=False``): a DataLoader worker
    hands over a sample at most this many positions of the rank's share past the trainer's
    watermark — unless the watermark is its own position — and waits otherwise, so that one
    worker lagging behind the others bounds the exact-resume state (about ``max_lag`` resolved
    positions above the watermark) instead of letting it grow with the run. Default
    ``max(1024, 4 · num_workers · (dataset.workers + dataset.window + batch_size · (prefetch_factor
    + 1)))``: far more than the workers' skew when none lags. (Per-epoch mode is bounded by the
    epoch; ``in_order=True`` by the DataLoader's round robin.)

    ``drop_last=True`` in per-epoch mode: each worker's last batch of a pass with fewer than
    ``batch_size`` samples (its last items, or a batch that a trailing skip report fills up) is
    dropped here, not in the worker, so that its positions and skips are resolved: the epoch ends
    and the next pass is the next epoch, whole, as with torch's ``drop_last``. (Dropped inside the
    worker, they stayed unresolved: every later pass held only them, fewer than a batch, and was
    empty.) Its samples are not counted in ``stats``. In infinite mode it goes to the DataLoader
    as given (a worker's pass ends only when the trainer stopped it)."""

    def __init__(
        self,
        dataset: FeatureDataset,
        batch_size: int = 1,
        num_workers: int = 0,
        max_lag: int | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size < 1:
            # torch's batch_size=None ("no batching") too: the skip reports and max_lag count batches
            raise InvalidRequest(f"FeatureLoader: batch_size must be an integer ≥ 1; got {batch_size!r}")
        self.dataset = dataset
        #: the latest pass (__iter__): only it republishes when it ends
        self._passes = 0
        kwargs["collate_fn"] = SkipReportCollate(kwargs.get("collate_fn") or collate)
        # Ready-first across DataLoader workers too: a batch is handed over when any worker has one,
        # not in worker round-robin order. Resume stays exact (consumption is tracked by position).
        # window=0 (the stream's order, the same on every run) keeps the workers' round robin
        kwargs.setdefault("in_order", dataset.window == 0)
        # A DataLoader draws its workers' base seed from ``generator``, torch's global one when None:
        # every pass then moved the trainer's seeded torch stream (review R31c s47 #2). The samples
        # are seeded by (seed, epoch, index) and use neither; a generator of the loader's own keeps
        # the workers' torch seeds reproducible per pass and the trainer's stream untouched.
        if kwargs.get("generator") is None:
            kwargs["generator"] = torch.Generator().manual_seed(int(dataset.seed))
        #: per-epoch drop_last: a batch of fewer samples is dropped by __iter__, resolved (None: not)
        self._drop_below: int | None = None
        if kwargs.get("drop_last") and batch_size is not None and not dataset.infinite:
            kwargs["drop_last"] = False
            self._drop_below = batch_size
        if max_lag is None:
            prefetch = kwargs.get("prefetch_factor") or 2
            max_lag = max(
                MIN_MAX_LAG,
                4 * num_workers * (dataset.workers + dataset.window + batch_size * (prefetch + 1)),
            )
        _check_count("max_lag", max_lag, 1)
        #: what the dataset does while this loader's pass runs (set for the pass only: the dataset
        #: iterated directly, or by a plain DataLoader, tracks and reports as it does alone)
        self._pass_settings: dict[str, Any] = {
            "_track_on_yield": False, "_report_trailing_skips": True,
            "_max_lag": max_lag if num_workers > 1 and not kwargs["in_order"] else None,
        }  # fmt: skip
        #: and what it does otherwise, restored when the latest pass ends
        self._outside = {k: getattr(dataset, k) for k in self._pass_settings}
        self.dataloader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, **kwargs)

    @property
    def stats(self) -> LoaderStats:
        return self.dataset.stats

    def __len__(self) -> int:
        """Per-epoch mode: the batches a whole epoch's pass hands out when no sample fails (each
        worker batches its own positions, so with ``num_workers`` K it is the sum over the
        workers of their batches, not ``ceil(len(dataset) / batch_size)``); ``drop_last`` counts
        only whole batches. A pass that continues an epoch stopped early hands out fewer.
        Infinite mode: ``TypeError`` (no length)."""
        n = len(self.dataset)
        k = max(1, self.dataloader.num_workers)
        size = int(self.dataloader.batch_size or 1)
        shares = [len(range(w, n, k)) for w in range(k)]
        if self._drop_below is not None:
            return sum(m // size for m in shares)
        return sum(-(-m // size) for m in shares)

    def __iter__(self) -> Generator[Any, None, None]:
        self.dataset._next_epoch_if_done()  # before DataLoader workers copy the dataset
        self.dataset._publish()  # and what persistent workers read at the pass's start
        self.dataset._shared.forget_passes()  # this pass consumes what it hands over: no repeat
        self._passes += 1
        this_pass = self._passes
        for k, v in self._pass_settings.items():
            setattr(self.dataset, k, v)
        try:
            yield from self._pass(this_pass)
        finally:  # not when a newer pass began (an old generator closed late): it runs under them
            if self._passes == this_pass:
                for k, v in self._outside.items():
                    setattr(self.dataset, k, v)

    def _pass(self, this_pass: int) -> Iterator[Any]:
        it = iter(self.dataloader)
        # the wait runs from the last batch handed over: through the batches consumed here without
        # a step (skip reports, a dropped partial batch) into the next one handed over, or, when
        # the pass ends after them, into the pass's total (the trainer waited for them all the same)
        t0 = time.perf_counter()
        stepless_until: float | None = None
        try:
            while True:
                try:
                    tracked: TrackedBatch = next(it)
                except StopIteration:
                    if stepless_until is not None:
                        self.dataset.stats.record_stepless_wait(stepless_until - t0)
                    return
                if tracked.skips_only:  # the skips that ended a worker's pass: no step
                    self.dataset.consume(tracked.tracking())
                    stepless_until = time.perf_counter()
                    continue
                if self._drop_below is not None and len(tracked.position) < self._drop_below:
                    # a worker's last, partial batch
                    self.dataset._resolve(tracked.tracking(), received=False)
                    stepless_until = time.perf_counter()
                    continue
                self.dataset.stats.record_wait(time.perf_counter() - t0)
                self.dataset.consume(tracked.tracking())
                yield tracked.batch
                t0, stepless_until = time.perf_counter(), None
        finally:  # workers waiting on the watermark (max_lag) end their pass: the DataLoader can stop
            # them. Not when a newer pass began (an old generator closed late, e.g. kept alive by a
            # traceback): that would end the running pass's workers, and the trainer's stream with them
            if self._passes == this_pass:
                self.dataset._publish()

    def state_dict(self) -> dict[str, Any]:
        return self.dataset.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.dataset.load_state_dict(state)
