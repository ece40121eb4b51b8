"""The reference training loop (``featurecache train``): the script users copy.

``make_batches`` is the only place that knows where batches come from: the client's
``FeatureDataset`` over a store or a lookup URL, or synthetic batches (no source given).
Each step logs its wall time, the part of it spent waiting for the batch (and, with the
prefetch on CUDA, how much of that wait the GPU's work on the step hid), the loss, the peak GPU
memory, the number of real tokens and of supervised pairs (a batch without any is skipped, not
trained on); the JSON log ends with a summary.

Checkpoints (``checkpoint=``, ``checkpoint_every=``) hold the model, the optimizer and the data
stream's position (the client's exact-resume state, or the number of synthetic batches drawn); a
run started with ``resume=`` continues from one as if it had never stopped: the same batches, the
same updates (bitwise on the CPU and with a single client worker; with several workers the
remaining samples arrive in the new run's ready-first order).

The log is written as the run goes (atomically, every few seconds) and a SIGTERM (what SLURM and
torchrun send on a timeout or preemption) stops the run after its current step with the log and a
final checkpoint written; so does a failure of the batch source mid-run. A non-finite loss, or a
non-finite gradient norm (logged per step, before clipping), stops the run with a :class:`TrainingError`
(no checkpoint of the parameters that gave it is kept); arguments it cannot train with are a
:class:`~featurecache.errors.UsageError` before anything is trained.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import inspect
import itertools
import json
import logging
import math
import os
import pickle
import re
import signal
import sys
import tempfile
import threading
import time
import zipfile
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from featurecache.auth import redact_url
from featurecache.client.assemble import DEFAULT_MAX_MSA_ROWS
from featurecache.client.crop import DEFAULT_CROP_WEIGHTS, DEFAULT_CROP_WHOLE_GROUPS
from featurecache.client.sampler import WEIGHTINGS
from featurecache.client.schema import MODEL_INPUT_KEYS
from featurecache.errors import (
    AuthenticationError,
    FeatureCacheError,
    InvalidRequest,
    LoaderError,
    TrainingError,
    UnfinishedBuildError,
    UsageError,
)
from featurecache.model.batches import check_batch, pad_msa_rows, pad_tokens, synthetic_batches
from featurecache.model.config import ModelConfig
from featurecache.model.trunk import Trunk, supervised_pairs
from featurecache.store.versions import FeaturizerChanged
from featurecache.strict_json import finite

log = logging.getLogger(__name__)

#: steps left out of the medians (Triton compilation, allocator warm-up)
WARMUP_STEPS = 1
#: token-axis padding on CUDA: a multiple of every kernel tile, so one compilation serves every N
DEFAULT_PAD_MULTIPLE = 128
#: the client's worker pools (``pool=``)
POOLS = ("process", "thread")
#: train's sampler weighting: AF3's weighted-PDB sampling of chains and interfaces (each sample
#: centred on the drawn chain or interface), which the script users copy is expected to do; the
#: client's ``FeatureDataset`` keeps ``"uniform"`` (every entry once per epoch, no reference chain).
#: Train sampled uniformly before session 25 (it had no option): a checkpoint that records no
#: weighting is of such a run (:func:`_check_data_settings`).
TRAIN_WEIGHTING = "af3"

#: the client's data settings a run records (log header and checkpoint) and a resume must repeat:
#: (key, train option, the value an older checkpoint that records none was trained with). Before
#: session 25 train passed none of them to ``FeatureDataset``: it sampled uniformly and took the
#: client's crop weights, MSA depth and pairing, whose defaults have not changed; its crops followed
#: the client's default of the time, whole groups (per token only from commit 5a0b339 of session 25
#: to 1892e34, which records the setting: minutes of that session), so whole groups it is.
_DATA_SETTINGS: tuple[tuple[str, str, Any], ...] = (
    ("weighting", "--weighting", "uniform"),
    ("crop_weights", "--crop-weights", list(DEFAULT_CROP_WEIGHTS)),
    ("max_msa_rows", "--max-msa-rows", DEFAULT_MAX_MSA_ROWS),
    ("pair_msa", "--pair-msa", True),
    ("crop_whole_groups", "--crop-whole-groups", True),
)
#: relative tolerance of the normalized crop weights a resume compares: 1,1,5 and 0.1,0.1,0.5 give
#: the same mix but normalize to floats an ulp apart (the Cropper draws with ``p = w / w.sum()``)
CROP_WEIGHTS_REL_TOL = 1e-9


def _same_data_setting(key: str, a: Any, b: Any) -> bool:
    """Whether two recorded values of data setting ``key`` are the same setting: crop weights
    within :data:`CROP_WEIGHTS_REL_TOL` of each other, the others equal."""
    if key != "crop_weights" or a is None or b is None:
        return bool(a == b)
    try:
        x, y = [float(v) for v in a], [float(v) for v in b]
    except (TypeError, ValueError):
        return False
    return len(x) == len(y) and all(
        math.isclose(u, v, rel_tol=CROP_WEIGHTS_REL_TOL) for u, v in zip(x, y, strict=True)
    )


def parse_crop_weights(text: str) -> tuple[float, float, float]:
    """``--crop-weights``'s value ``"C,S,I"`` as three numbers; anything else is a
    :class:`UsageError` naming the option (checked further by :func:`_check_data_options`)."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) != 3:
        raise UsageError(
            f"--crop-weights {text!r}: must be 3 comma-separated numbers (contiguous,spatial,spatial-interface), "
            "e.g. 0.2,0.4,0.4"
        )
    return values[0], values[1], values[2]


#: the "off" spelling of a train flag whose negative is not ``--no-<name>`` (cli.py)
_NEGATIVE_FLAGS = {"--crop-whole-groups": "--crop-per-token"}


def _option_value(option: str, value: Any) -> str:
    """How ``value`` of train option ``option`` is written on the command line."""
    if isinstance(value, bool):
        return option if value else _NEGATIVE_FLAGS.get(option, "--no-" + option.removeprefix("--"))
    if isinstance(value, list | tuple):  # repr: the shortest text that reads back as the same float
        return f"{option} {','.join(repr(float(v)) for v in value)}"
    return f"{option} {value}"


@dataclasses.dataclass
class BatchSource:
    """Where the loop's batches come from. ``state()``: the position of the stream after the
    batches handed out so far (for a checkpoint; None: the source cannot resume)."""

    batches: Iterator[dict[str, Any]]
    name: str
    close: Callable[[], None] = lambda: None
    state: Callable[[], dict[str, Any]] | None = None
    #: the most tokens of any entry the stream can draw from (None: unknown, e.g. synthetic batches)
    largest_entry: int | None = None
    #: the entries the stream draws from (:func:`source_identity`; None: synthetic or given batches)
    identity: dict[str, Any] | None = None
    #: the featurizer versions of the source's entries and MSAs (``store.versions.store_versions``;
    #: None: synthetic or given batches, or a source that cannot say)
    featurizer_versions: dict[str, Any] | None = None


def source_identity(entry_ids: Sequence[str]) -> dict[str, Any]:
    """What a checkpoint records of the entries its run drew from: how many, and a digest of their
    ids in the sampler's order (the order the stream's positions index). The same store read locally
    or through its lookup service has the same identity; a store extended, pruned or rebuilt from
    other inputs has another, whatever its path."""
    digest = hashlib.sha256("\n".join(entry_ids).encode()).hexdigest()
    return {"entries": len(entry_ids), "entry_ids_sha256": digest}


#: a warning when fewer than this share of a source's protein and RNA chains have an MSA of more than the query
FEW_MSAS_SHARE = 0.5


def _warn_few_msas(chains: Any, where: str) -> None:
    """One warning line when the source's protein / RNA chains (``chains``: its chains table) have
    no MSA beyond their query row, or most of them have none: such samples train on the query row
    only, which the loss shows only late (a store built without --msa-dir, or MSAs that did not join)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from featurecache.const import MolType

    if chains is None or chains.num_rows == 0 or "msa_depth" not in chains.column_names:
        return
    polymer = pa.array([int(MolType.PROTEIN), int(MolType.RNA)], type=chains.column("mol_type").type)
    kinds = pc.is_in(chains.column("mol_type"), value_set=polymer)
    depths = pc.filter(chains.column("msa_depth"), kinds)
    n = len(depths)
    with_msa = int(pc.sum(pc.greater(depths, 1)).as_py() or 0) if n else 0
    if n == 0 or with_msa >= FEW_MSAS_SHARE * n:
        return
    if with_msa == 0:
        log.warning("%s holds no MSAs (none of its %d protein/RNA chains has more than its query row): every sample "
                    "trains on its query row only; was it built without --msa-dir?", where, n)  # fmt: skip
    else:
        log.warning("%d of the %d protein/RNA chains in %s have no MSA beyond their query row: their samples train "
                    "on it only", n - with_msa, n, where)  # fmt: skip


def _code_identity() -> dict[str, str]:
    """Which code trained a run, for its log header and checkpoints: featurecache's version and the
    digest of its source files (:func:`featurecache.source_digest`, what a build's workers report:
    any edit changes it, the version does not)."""
    import featurecache

    return {
        "featurecache_version": featurecache.__version__,
        "featurecache_source": featurecache.source_digest(),
    }


#: the verb of --init-from's errors ("cannot initialise from CKPT: ...")
_INIT_VERB = "initialise from"

#: --init-from's words in a refusal of a resume on other entries
_START_ANEW = "start a new run from its weights with --init-from {ck} (its model parameters; a fresh optimizer and data stream)"


def _shown_source(source: Any) -> Any:
    """A run's source (a store path, a lookup-service URL, "synthetic", "given") as its log, its
    checkpoints and messages show it: a URL without its ``user:password@`` nor its query's values
    (:func:`~featurecache.auth.redact_url`; review R42c s52 #1: the password of ``--url
    http://user:pw@host`` was written to stderr, the log and every checkpoint), anything else as it is."""
    return redact_url(source) if isinstance(source, str) and "://" in source else source


def _url_key(url: str) -> str:
    """``url`` as :func:`_same_source` compares it: redacted (another password, or another token in
    its query, names the same service), its scheme and host in lower case, no trailing ``/``."""
    scheme, sep, rest = redact_url(url).partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme.lower()}{sep}{host.lower()}{slash}{path}".rstrip("/")


def _same_source(theirs: Any, ours: str) -> bool:
    """Whether a checkpoint's recorded source (the path as its run gave it; a URL redacted, or as
    given by an older featurecache's run) names ``ours``: URLs are compared redacted, so a rotated
    password or query token is the same source."""
    if not isinstance(theirs, str):
        return False
    if theirs == ours:
        return True
    if "://" in theirs or "://" in ours:
        return _url_key(theirs) == _url_key(ours)
    try:
        return Path(theirs).resolve() == Path(ours).resolve()
    except (OSError, RuntimeError):
        return False


def _check_same_source(ck: str | Path, saved: dict[str, Any], identity: dict[str, Any], where: str,
                       client_state: Any, source: str | None = None) -> None:  # fmt: skip
    """Refuse to continue the data position of checkpoint ``ck`` (``saved``: its contents) over
    entries other than its run's (``identity``: those of ``where``, the source as messages name it;
    ``source``: its path or URL as given): its positions index its run's entries, so other batches
    would follow silently. When the checkpoint's run drew from this very path or URL, the refusal
    says its entries changed (there is no other store to resume on)."""
    if "source_identity" not in saved:  # a checkpoint of an older featurecache
        theirs = client_state.get("epoch_length") if isinstance(client_state, dict) else None
        if isinstance(theirs, int) and theirs != identity["entries"]:
            raise UsageError(
                f"cannot resume from {ck}: {where} now has {identity['entries']} entries, its run drew from "
                f"{theirs}; an exact resume is impossible: " + _START_ANEW.format(ck=ck)
            )
        log.warning("%s records no identity of its run's store (an older checkpoint): resuming on %s without "
                    "checking that it is the same store", ck, where)  # fmt: skip
        return
    theirs = saved["source_identity"]
    if not isinstance(theirs, dict):  # None: a run on synthetic batches (its data position says so too)
        return
    if theirs.get("entries") != identity["entries"]:
        raise UsageError(
            f"cannot resume from {ck}: {where} now has {identity['entries']} entries, its run drew from "
            f"{theirs.get('entries')} (the store was extended or pruned since, or it is another one); an exact "
            "resume is impossible: " + _START_ANEW.format(ck=ck)
        )
    if theirs.get("entry_ids_sha256") != identity["entry_ids_sha256"]:
        if source is not None and _same_source(saved.get("source"), source):  # rebuilt or refilled in place
            raise UsageError(
                f"cannot resume from {ck}: {where} is the source its run drew from, but its entries changed "
                f"since ({identity['entries']} entries then and now, other ids: rebuilt or re-filled in place?); "
                "an exact resume is impossible: " + _START_ANEW.format(ck=ck)
            )
        raise UsageError(
            f"cannot resume from {ck}: {where} holds other entries than its run's store ({_shown_source(saved.get('source'))}; "
            f"{identity['entries']} entries both, other ids); resume on that store, or "
            + _START_ANEW.format(ck=ck)
        )


def _check_same_featurizer(
    ck: str | Path, saved: dict[str, Any], now: dict[str, Any] | None, where: str
) -> None:
    """Refuse to continue checkpoint ``ck``'s run (``saved``: its contents) on data of other
    featurizer versions than its run's (``now``: those of ``where``,
    :func:`featurecache.store.versions.store_versions`): a store rebuilt in place by another
    featurecache keeps its entry ids (:func:`_check_same_source` passes) while its features differ,
    so the run would go on over other inputs than it started on. A checkpoint that records no
    versions (an older featurecache's, or a source that could not say) or a source that cannot say
    them now (an older lookup service) is not compared."""
    from featurecache.store.versions import version_set

    theirs = saved.get("featurizer_versions")
    if not isinstance(theirs, dict):
        log.debug("%s records no featurizer versions of its run's data (an older checkpoint, or a source that "
                  "could not say): not compared with those of %s", ck, where)  # fmt: skip
        return
    if not isinstance(now, dict):
        log.debug("the featurizer versions of %s are unknown (an older lookup service): not compared with "
                  "those %s records", where, ck)  # fmt: skip
        return
    before, after = version_set(theirs), version_set(now)
    if not before or not after or before == after:
        return
    raise UsageError(
        f"cannot resume from {ck}: {where} holds data of featurizer {', '.join(after)}, its run trained on "
        f"featurizer {', '.join(before)} (the store was rebuilt or extended by another featurecache since; its "
        "features differ); an exact resume is impossible: " + _START_ANEW.format(ck=ck)
    )


def _check_same_stream(ck: str | Path, saved: dict[str, Any], client_state: Any, digest: str, where: str,
                       source: str | None = None) -> None:  # fmt: skip
    """Refuse to continue checkpoint ``ck``'s data position (``client_state``: the client's state it
    saved; ``saved``: its contents) over another sampling stream than its run's (``digest``: the
    ``stream_digest`` of ``where``'s sampler): the same entry ids (:func:`_check_same_source` passes)
    with other chains, interfaces or sampling weights (a store rebuilt with other
    ``--keep-cryst-aids``, CCD or clusters) map the same positions to other samples. A state that
    records no digest (an older client's) is not compared. ``FeatureDataset`` itself only warns,
    for its users who resume it on purpose."""
    from featurecache.client.dataset import K_STREAM

    theirs = client_state.get(K_STREAM) if isinstance(client_state, dict) else None
    if theirs is None or theirs == digest:
        return
    if source is not None and _same_source(saved.get("source"), source):
        what = f"{where} is the source its run drew from, but its entries' chains or sampling weights changed since"
    else:
        what = f"{where} holds its run's entries ({_shown_source(saved.get('source'))}: the same ids) with other chains or sampling weights"
    raise UsageError(
        f"cannot resume from {ck}: {what} (rebuilt, e.g. with another --keep-cryst-aids?): its positions draw "
        "other samples now; an exact resume is impossible: " + _START_ANEW.format(ck=ck)
    )


class _Synthetic:
    """Synthetic batches that count how many were drawn: their position for a checkpoint."""

    def __init__(self, batch_size: int, crop_size: int, seed: int, skip: int = 0) -> None:
        self._it = synthetic_batches(batch_size, crop_size, seed=seed)
        self.drawn = 0
        for _ in range(skip):  # the stream is seeded: drawing is the only way to its k-th batch
            next(self)

    def __iter__(self) -> _Synthetic:
        return self

    def __next__(self) -> dict[str, Any]:
        batch = next(self._it)
        self.drawn += 1
        return batch


def make_batches(
    store: str | Path | None,
    url: str | None,
    crop_size: int,
    batch_size: int,
    seed: int,
    workers: int,
    pool: str = "thread",
    state: dict[str, Any] | None = None,
    rank: int = 0,
    token: str | None = None,
    max_atoms: int | None = None,
    resume_from: tuple[str | Path, dict[str, Any]] | None = None,
    service_wait: float | None = None,
    data_options: dict[str, Any] | None = None,
    in_order: bool = False,
) -> BatchSource:
    """An endless stream of batch dicts following BATCH_SCHEMA: the client's over ``store`` or
    ``url``, synthetic batches when neither is given. ``state`` (a ``BatchSource.state()`` of an
    earlier run with the same source, seed, crop and batch size) continues that run's stream.
    ``rank``: synthetic batches of rank r are seeded ``seed + r`` (the client shards its stream by
    the process group's rank itself). ``token``: the lookup service's bearer token (``url`` only;
    default: FEATURECACHE_AUTH_TOKEN). ``max_atoms``: the client's atom budget per crop (None: none,
    crops hold ``min(N, crop_size)`` tokens; see ``FeatureDataset``). ``resume_from``: (the checkpoint
    ``state`` comes from, its contents): a source whose entries are not its run's is refused
    (:func:`_check_same_source`), naming the checkpoint. ``service_wait``: seconds the lookup client
    waits for a service that has not answered it yet (its ``first_contact_s``; None: the client's
    default), e.g. one starting at the same time (``url`` only). ``data_options``: more keyword
    arguments of ``FeatureDataset`` (train's: ``weighting``, ``crop_weights``, ``max_msa_rows``,
    ``pair_msa``, ``crop_whole_groups``; None: the client's defaults). ``in_order``: the client yields
    its samples in stream order (``FeatureDataset(window=0)``) instead of ready-first, so the batches
    do not depend on which of its ``workers`` finishes first.

    A local store whose first build has not finished is refused
    (:class:`~featurecache.errors.UnfinishedBuildError`), and a lookup service's refusal of
    the token (or of none) says how to give one."""
    if store is None and url is None:
        drawn = int((state or {}).get("synthetic_drawn", 0))
        synth = _Synthetic(batch_size, crop_size, seed + rank, skip=drawn)
        return BatchSource(synth, "synthetic", state=lambda: {"synthetic_drawn": synth.drawn})
    import pyarrow.compute as pc

    from featurecache.client import FeatureDataset, FeatureLoader

    source = str(store) if store is not None else str(url)
    # a lookup client raises FeaturizerChanged when its service moves to an index of other
    # featurizer versions (the store rebuilt under the run): the run stops on the data-failure path
    options: dict[str, Any] | None = None
    deadline_s = 60.0  # FeatureDataset's default, unless the client's budget needs more
    if store is None:
        options = {"on_featurizer_change": "raise"}
        if service_wait is not None:  # a longer wait than the restart budget raises that budget too
            from featurecache.client.http import DEFAULT_RETRY_BUDGET_S

            budget = max(DEFAULT_RETRY_BUDGET_S, service_wait)
            options.update(first_contact_s=service_wait, retry_budget_s=budget)
            # and the sample deadline (FeatureDataset's 60 s) past the budget, one more call (the
            # client's timeout, 20 s) and 10 s (review RF3 s24 #3): a sample retried through a long
            # restart is not abandoned at 60 s, nor warned about in settings train does not have
            deadline_s = max(deadline_s, budget + 30.0)
    window: dict[str, Any] = {"window": 0} if in_order else {}  # else the client's reorder window
    try:
        dataset = FeatureDataset(
            source, crop_size=crop_size, seed=seed, workers=workers, infinite=True, pool=pool,
            token=token if url is not None else None, max_atoms=max_atoms, client_options=options,
            deadline_s=deadline_s, **window, **(data_options or {}),
        )  # fmt: skip
    except UnfinishedBuildError as exc:  # without FeatureDataset's keyword to read it anyway
        raise UnfinishedBuildError(exc.reason) from None
    except AuthenticationError as exc:
        raise AuthenticationError(f"{exc}; {_token_advice(token)}") from None
    loader = FeatureLoader(dataset, batch_size=batch_size)
    identity = source_identity(dataset.sampler.entry_ids)
    if state is not None:
        try:
            if "client" not in state:
                raise UsageError(
                    f"the checkpoint's data position is not the client's (synthetic batches?): {sorted(state)}"
                )
            ck = resume_from[0] if resume_from is not None else "the checkpoint"
            if resume_from is not None:
                _check_same_source(
                    ck, resume_from[1], identity, dataset.source.describe(), state["client"], source
                )
                _check_same_featurizer(
                    ck,
                    resume_from[1],
                    getattr(dataset, "featurizer_versions", None),
                    dataset.source.describe(),
                )
                _check_same_stream(ck, resume_from[1], state["client"], dataset.sampler.stream_digest(),
                                   dataset.source.describe(), source)  # fmt: skip
            try:
                loader.load_state_dict(state["client"])
            except InvalidRequest as exc:  # the position does not fit this stream (seed, ranks, epoch)
                raise UsageError(f"cannot resume from {ck} on {dataset.source.describe()}: {exc}") from exc
        except BaseException:
            dataset.close()
            raise
    _warn_few_msas(dataset.source.get().chains, dataset.source.describe())
    counts = dataset.source.get().entries.column("token_count")  # the reader the dataset opened
    largest = pc.max(counts).as_py() if len(counts) else None
    versions = getattr(dataset, "featurizer_versions", None)  # FeatureDataset warns when mixed or old
    return BatchSource(iter(loader), source, dataset.close, state=lambda: {"client": loader.state_dict()},
                       largest_entry=largest, identity=identity, featurizer_versions=versions)  # fmt: skip


def _resharded(saved: list[Any], world: int, resume: Any) -> list[Any]:
    """The data positions ``saved`` of a checkpoint's ranks for a run of ``world`` ranks: the
    client's states resharded (:func:`~featurecache.client.dataset.reshard_states`: every position
    a rank of the run before drew is drawn by none of this run's, every other once); an
    ``InvalidRequest`` when they are not client states (synthetic batches) or cannot be."""
    if not all(isinstance(s, dict) and isinstance(s.get("client"), dict) for s in saved):
        raise InvalidRequest(f"cannot resume from {resume}: it holds the data positions of {len(saved)} "
                             f"rank(s), this run has {world}, and they are not the client's")  # fmt: skip
    from featurecache.client.dataset import reshard_states

    try:
        states = reshard_states([s["client"] for s in saved], world)
    except InvalidRequest as exc:
        raise InvalidRequest(f"cannot resume from {resume} on {world} rank(s) (it holds {len(saved)}'s "
                             f"data positions): {exc}") from None  # fmt: skip
    log.warning("%s: the data positions of %d rank(s) resharded for %d: no sample the run before drew is "
                "drawn again", resume, len(saved), world)  # fmt: skip
    return [{"client": st} for st in states]


def _token_advice(token: str | None) -> str:
    """What a user of train does about a lookup service that refused the token it was sent, or
    none (``token``: --token's; else the client read the environment's)."""
    from featurecache.auth import TOKEN_ENV, TOKEN_FILE_ENV, token_from_environment

    if token is None:
        try:
            token = token_from_environment()
        except FeatureCacheError:  # an unreadable token file: the client said so before any request
            token = None
    if token is None:
        return (f"no token was given: give the service's token with --token, or set {TOKEN_ENV} to it or "
                f"{TOKEN_FILE_ENV} to a file holding it")  # fmt: skip
    # read once, at start (DataLoader workers carry the value): a token file rotated since holds the
    # service's new token, which a resumed run reads (review R17 s40 #3)
    return (f"the token given (--token, else {TOKEN_ENV}, else the file {TOKEN_FILE_ENV} names, read when "
            "the run started) is not the service's: give the one it was started with (a token file "
            "rotated since the run started is read again by the resumed run)")  # fmt: skip


def _prepare(raw: dict[str, Any], device: torch.device, pad_multiple: int, crop_size: int,
             msa_rows_pow2: bool) -> dict[str, torch.Tensor]:  # fmt: skip
    """The model's inputs of a client batch on ``device``, padded there. The copies and the padding
    queue behind whatever the GPU is running, and neither blocks the host: a pageable copy returns
    once it is staged. (Padding on the host and copying from pinned memory, run 67, bought nothing.)"""
    batch = {k: raw[k].to(device, non_blocking=True) for k in MODEL_INPUT_KEYS}
    if pad_multiple > 1:
        batch = pad_tokens(batch, pad_multiple, cap=crop_size)
    if msa_rows_pow2:  # a graph per shape: a few MSA row counts instead of one per batch
        batch = pad_msa_rows(batch)
    return batch


class EagerAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` whose methods run without importing ``torch._dynamo``.

    torch wraps ``Optimizer.add_param_group``, ``zero_grad``, ``state_dict`` and
    ``load_state_dict`` in ``torch._disable_dynamo`` and ``Adam.step`` in
    ``_use_grad_for_differentiable``; both import ``torch._dynamo`` on their first call (with
    sympy: ~1.2 s of CPU, about a third of a one-step ``featurecache train`` on CPU) only so that
    ``torch.compile`` does not trace into them. Training never compiles the optimizer (``--compile``
    compiles the loss alone), so here those methods are torch's own functions without the wrappers
    (``inspect.unwrap``), and ``step`` sets grad mode as the wrapper does: the same update, bit for
    bit, and the same ``state_dict`` (tests/model/test_eager_adamw.py). Do not ``torch.compile`` a
    function that calls these methods."""

    add_param_group = inspect.unwrap(torch.optim.AdamW.add_param_group)
    zero_grad = inspect.unwrap(torch.optim.AdamW.zero_grad)
    state_dict = inspect.unwrap(torch.optim.AdamW.state_dict)
    load_state_dict = inspect.unwrap(torch.optim.AdamW.load_state_dict)
    _unwrapped_step = inspect.unwrap(torch.optim.AdamW.step)

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        enabled = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(self.defaults["differentiable"])
            return EagerAdamW._unwrapped_step(self, closure)  # type: ignore[no-any-return]
        finally:
            torch.set_grad_enabled(enabled)


def make_optimizer(model: torch.nn.Module, lr: float, capturable: bool = False) -> torch.optim.Optimizer:
    """AdamW (:class:`EagerAdamW`); on CUDA its fused implementation (one kernel for every
    parameter instead of a foreach kernel per step of the update: 1.1 ms of a 24 ms step at crop
    384, run 47). ``capturable``: safe to record in a CUDA graph (:class:`GraphedSteps`)."""
    cuda = next(model.parameters()).is_cuda
    return EagerAdamW(model.parameters(), lr=lr, fused=cuda, capturable=capturable and cuda)


#: (the client's batch, the model's inputs prepared from it on the training device, the source's
#: position right after this batch: what a checkpoint taken after training on it records)
_Fetched = tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any] | None]


class _Feed:
    """The loop's batches, and the time it spent waiting for them since the last ``settle()``.

    ``next(behind=event)`` fetches while the GPU still has the work before ``event`` queued: the
    wait is exposed only from the moment the GPU finished that work (CUDA events, resolved by
    ``settle()`` once the step has synchronised). Without ``behind`` the GPU is idle: all of the
    wait is exposed. The first batch is checked against BATCH_SCHEMA before it is prepared.
    ``position()`` is read right after each batch arrives: with the prefetch the next batch has
    arrived by the time a step ends, so the stream's position must be the one of the step's own."""

    def __init__(self, it: Iterator[dict[str, Any]],
                 prepare: Callable[[dict[str, Any]], dict[str, torch.Tensor]],
                 position: Callable[[], dict[str, Any]] | None = None) -> None:  # fmt: skip
        self._it, self._prepare, self._position = it, prepare, position
        self._wait = self._exposed = 0.0
        self._queued: list[tuple[torch.cuda.Event, torch.cuda.Event, float]] = []
        self._checked = False

    def next(self, behind: torch.cuda.Event | None = None) -> _Fetched | None:
        """(client batch, prepared model inputs), or None when the source has ended."""
        t = time.perf_counter()
        try:
            raw = next(self._it)
        except BaseException as exc:
            # the time blocked on a source that then ended or failed is data wait too: the step that
            # logs it (the last) showed it as compute (38 s on a paused service; review R17 s40 #2)
            waited = time.perf_counter() - t
            self._wait += waited
            self._exposed += waited
            if isinstance(exc, StopIteration):
                return None
            raise
        waited = time.perf_counter() - t
        position = self._position() if self._position is not None else None
        self._wait += waited
        if behind is None:
            self._exposed += waited
        else:  # on the stream after the queued work: the GPU timestamps it when done with that work
            arrived = torch.cuda.Event(enable_timing=True)
            arrived.record()
            self._queued.append((behind, arrived, waited))
        if not self._checked:
            check_batch(raw)
            self._checked = True
        return raw, self._prepare(raw), position

    def settle(self) -> tuple[float, float]:
        """(seconds blocked on the source, seconds of it the GPU sat idle) since the last call; the
        events it reads must have completed (call after synchronising)."""
        for done, arrived, waited in self._queued:
            self._exposed += min(waited, done.elapsed_time(arrived) / 1e3)
        out = (self._wait, self._exposed)
        self._wait = self._exposed = 0.0
        self._queued.clear()
        return out


LossFn = Callable[[dict[str, torch.Tensor]], torch.Tensor]


class _Ranks:
    """This process's place among the ranks of a multi-process run (``torchrun``: ``WORLD_SIZE``,
    ``RANK``, ``LOCAL_RANK`` in the environment). Starts the process group when torchrun launched
    the run and nobody started one (NCCL on CUDA, gloo on the CPU) and stops what it started. One
    process: rank 0 of 1, nothing started."""

    def __init__(self, dev: torch.device) -> None:
        self.started = False
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and dist.is_available() and not dist.is_initialized():
            if dev.type == "cuda":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
            self.started = True
        on = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        self.rank, self.world = (dist.get_rank(), dist.get_world_size()) if on else (0, 1)

    def device(self, dev: torch.device) -> torch.device:
        """``cuda`` without an index means this rank's GPU (``LOCAL_RANK``) in a multi-rank run."""
        if self.world > 1 and dev.type == "cuda" and dev.index is None:
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return dev

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (one process: ``[obj]``)."""
        if self.world == 1:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def sum(self, counts: list[int], dev: torch.device) -> list[int]:
        """``counts`` summed over the ranks, read on the host (one all-reduce on ``dev``, which
        NCCL needs; one process: ``counts``)."""
        if self.world == 1:
            return counts
        t = torch.tensor(counts, dtype=torch.int64, device=dev)
        dist.all_reduce(t)
        return [int(v) for v in t.tolist()]

    def stop(self) -> None:
        if self.started:
            dist.destroy_process_group()
            self.started = False


def _average_gradients(model: torch.nn.Module, loss: torch.Tensor, samples: int, total: int) -> torch.Tensor:
    """All-reduce every parameter's gradient (a missing one counts as zeros) and the loss as one
    fp32 buffer, each rank's weighed by ``samples`` (how many of its batch's samples have a
    supervised pair) and the sum divided by ``total`` (the ranks' ``samples`` summed): the loss
    being each rank's mean over such samples, every rank then holds the gradient of the mean over
    all ranks' such samples, as one process would over their samples in one batch (review R25c
    s43 #2; dividing by the number of ranks weighed a rank's samples by how few it had), and steps
    its optimizer to the same parameters. Returns that mean loss."""
    params = list(model.parameters())
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1).float() for g in grads] + [loss.detach().float().reshape(1)])
    if samples != 1:  # (× 1 changes nothing: the usual batch of one)
        flat *= samples
    dist.all_reduce(flat)
    flat /= max(total, 1)
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p).to(p.dtype)
        offset += p.numel()
    return flat[-1]


#: the gradient-norm clip of every step, by default (``clip_grad_norm``; train --clip-grad-norm):
#: AF3's value (its supplement's optimiser settings). It was 1.0 until session 43, which clipped every
#: step of a run (review R25c s43 #5): a checkpoint that records none was trained with
#: :data:`OLD_CLIP_GRAD_NORM`
DEFAULT_CLIP_GRAD_NORM = 10.0
OLD_CLIP_GRAD_NORM = 1.0

#: a step record's ``skip_reason``: its batch has no pair of tokens the distogram loss supervises
#: (ion-only or one-token entries, crops whose representative atoms are all unresolved: R25c s43 #1)
NO_PAIRS = "no supervised distogram pair in the batch"
#: ... with several ranks: no rank's batch has one (a rank whose batch has none steps with the others)
NO_PAIRS_ON_ANY_RANK = "no supervised distogram pair in any rank's batch"


class _SourceFailed(Exception):
    """The batch source raised ``cause`` while fetching a batch (the model is intact)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(_first_line(cause))
        self.cause = cause


def _fetch(feed: _Feed, behind: torch.cuda.Event | None = None) -> _Fetched | _SourceFailed | None:
    """``feed.next(behind)``, a failure of the source returned rather than raised: the loop raises it
    when it needs the batch, after the step it was fetched during is done, logged and checkpointed."""
    try:
        return feed.next(behind=behind)
    except Exception as exc:
        return _SourceFailed(exc)


def _finite_parameters(model: torch.nn.Module) -> bool:
    """Whether every parameter of ``model`` is finite (one host synchronisation)."""
    flags = [torch.isfinite(p).all() for p in model.parameters()]
    return bool(torch.stack(flags).all()) if flags else True


def _staged_path(path: Path) -> Path:
    """Where a checkpoint waits beside ``path`` until the next step's loss vouches for it."""
    return path.with_name(f".{path.name}.pending")


def _update(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn: LossFn,
            batch: dict[str, torch.Tensor], share: tuple[int, int] | None = None,
            clip_norm: float = DEFAULT_CLIP_GRAD_NORM) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Forward (bf16 autocast on CUDA), backward, gradient clipping (to total norm ``clip_norm``)
    and the optimizer step of one batch, into gradients that are None or are overwritten (not
    accumulated) by the backward.
    ``share`` (several ranks): (this rank's samples that have a supervised pair, every rank's): the
    gradients and the returned loss are then the mean over every rank's such samples
    (:func:`_average_gradients`). Returns (loss, the gradients' total L2 norm before clipping), both
    on the device, not synchronised: no host synchronisation, so the step can be recorded in a CUDA
    graph (a non-finite norm is the loop's to act on, after the step)."""
    dev = next(model.parameters()).device
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        loss = loss_fn(batch)
    loss.backward()
    if share is not None:
        loss = _average_gradients(model, loss, *share)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    opt.step()
    return loss, grad_norm


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn: LossFn,
                batch: dict[str, torch.Tensor], share: tuple[int, int] | None = None,
                clip_norm: float = DEFAULT_CLIP_GRAD_NORM) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One eager training step: (loss, gradient norm before clipping), as :func:`_update`."""
    opt.zero_grad(set_to_none=True)
    return _update(model, opt, loss_fn, batch, share, clip_norm)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn: LossFn,
               batch: dict[str, torch.Tensor], share: tuple[int, int] | None = None,
               clip_norm: float = DEFAULT_CLIP_GRAD_NORM) -> torch.Tensor:  # fmt: skip
    """One eager training step; returns the loss (not synchronised; with ``share``, the ranks' mean)."""
    return _train_step(model, opt, loss_fn, batch, share, clip_norm)[0]


@functools.cache
def _warmup_stream(device: int) -> torch.cuda.Stream:
    """One side stream per device for every recording's warm-up steps. cuBLAS keeps a workspace
    per stream it has run on, allocated from the caching allocator and never returned: a new stream
    per recording left ~65 MiB allocated per shape recorded (run 73, ``benchmarks/dev/graph_leak.py``;
    2 GiB after run 72's graph variants, which every later peak measurement in the process carried)."""
    return torch.cuda.Stream(device)


class GraphedSteps:
    """Whole training steps (forward, backward, clipping, AdamW) replayed as CUDA graphs.

    At crop 384 the eager step issues ~900 kernels and the host takes about as long to launch them
    as the GPU to run them; a graph replay launches them all at once. One graph per batch shape
    (with ``pad_multiple`` a handful: 128, 256, ... up to the crop), recorded on the first batch of
    that shape, all in one memory pool (they never run at the same time). Recording needs warm-up
    steps on a side stream (Triton compilation, cuBLAS workspaces, the optimizer's state); the
    parameters and optimizer state are copied before them and restored after, so training is the
    same as eager: a batch's step happens once, by the replay. The optimizer must be an
    AdamW/Adam with ``capturable=True`` and the model free of host synchronisation (the trunk is).

    ``peak_bytes(batch)``: the peak allocated memory of the recording, which is what the replays
    use (they do not allocate). Between replays ``p.grad`` holds the gradients of whichever graph
    was recorded last, not of the step just replayed: read gradients inside the loss, not after.
    :meth:`step` also returns the replayed step's gradient norm before clipping (a tensor the graph
    writes, like the loss: read on the host after the replay, never inside it)."""

    def __init__(self, model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn: LossFn,
                 warmup: int = 2, clip_norm: float = DEFAULT_CLIP_GRAD_NORM) -> None:  # fmt: skip
        if not isinstance(opt, torch.optim.Adam | torch.optim.AdamW) or not all(
            g.get("capturable") for g in opt.param_groups
        ):
            raise FeatureCacheError("CUDA-graph steps need an Adam/AdamW optimizer with capturable=True")
        self.model, self.opt, self.loss_fn, self.warmup = model, opt, loss_fn, warmup
        self.clip_norm = clip_norm  # a constant of the recorded graphs
        self._graphs: dict[
            tuple[Any, ...], tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]
        ] = {}
        self._peaks: dict[tuple[Any, ...], int] = {}
        self._pool: Any = None

    @staticmethod
    def _key(batch: dict[str, torch.Tensor]) -> tuple[Any, ...]:
        return tuple(sorted((k, tuple(v.shape), v.dtype) for k, v in batch.items()))

    def __len__(self) -> int:
        return len(self._graphs)

    def peak_bytes(self, batch: dict[str, torch.Tensor]) -> int | None:
        return self._peaks.get(self._key(batch))

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.step(batch)[0]

    def step(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay the step of ``batch``'s shape (recording it first if new): (loss, gradient norm
        before clipping), the graph's own output tensors, overwritten by the next replay of that shape."""
        key = self._key(batch)
        if key not in self._graphs:
            self._record(key, batch)
        graph, static, loss, grad_norm = self._graphs[key]
        for k, v in batch.items():
            static[k].copy_(v, non_blocking=True)
        graph.replay()
        return loss, grad_norm

    def _state_tensors(self) -> list[torch.Tensor]:
        out = [p.data for p in self.model.parameters()] + list(self.model.buffers())
        for p in self.model.parameters():
            out += [t for _, t in sorted(self.opt.state.get(p, {}).items()) if isinstance(t, torch.Tensor)]
        return out

    def _record(self, key: tuple[Any, ...], batch: dict[str, torch.Tensor]) -> None:
        static = {k: v.clone() for k, v in batch.items()}
        saved = [t.clone() for t in self._state_tensors()]
        side = _warmup_stream(torch.cuda.current_device())
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                train_step(self.model, self.opt, self.loss_fn, static, clip_norm=self.clip_norm)
        torch.cuda.current_stream().wait_stream(side)
        now = self._state_tensors()  # saved's tensors first, then any optimizer state the warm-up created
        with torch.no_grad():
            for t, s in zip(now, saved, strict=False):
                t.copy_(s)
            for t in now[
                len(saved) :
            ]:  # created from nothing: AdamW's "no step yet" is zero moments and count
                t.zero_()
        self.opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self._pool):
                loss, grad_norm = _update(
                    self.model, self.opt, self.loss_fn, static, clip_norm=self.clip_norm
                )
            torch.cuda.synchronize()
        except RuntimeError as exc:  # e.g. a host synchronisation inside the step
            shapes = ", ".join(f"{k} {list(shape)}" for k, shape, _ in key)
            raise FeatureCacheError(
                f"recording the training step as a CUDA graph failed for the batch shape ({shapes}): "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
                "the step must not synchronise with the host (.item(), .cpu(), data-dependent shapes). "
                "Train without --cuda-graphs"
            ) from exc
        self._peaks[key] = torch.cuda.max_memory_allocated()
        self._pool = graph.pool()
        self._graphs[key] = (graph, static, loss, grad_norm)


def rank_log_path(path: str | Path, rank: int) -> Path:
    """Where rank ``rank`` writes its log: ``path`` for rank 0, ``NAME.rank<r>.SUFFIX`` beside it
    for the others."""
    path = Path(path)
    return path if rank == 0 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


#: what ``run_training`` writes at ``checkpoint=``; ``load_checkpoint`` checks both
CHECKPOINT_FORMAT, CHECKPOINT_VERSION = "featurecache-train-checkpoint", 1


def checkpoint_path(template: str | Path, step: int) -> Path:
    """``template`` with ``{step}`` replaced by the number of steps done (no ``{step}``: one file,
    overwritten by each checkpoint)."""
    return Path(str(template).replace("{step}", str(step)))


def save_checkpoint(path: str | Path, *, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer,
                    data: dict[str, Any] | None, meta: dict[str, Any]) -> Path:  # fmt: skip
    """Write a checkpoint after ``step`` optimizer steps: model, optimizer, the data stream's
    position (``{"ranks": [each rank's BatchSource.state()]}``; a None position: that rank's
    source cannot continue the same stream) and
    ``meta`` (model config, source, seed, ...). Atomic: a temporary file beside ``path`` renamed
    over it, so an interrupted write leaves the previous checkpoint whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    doc = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "step": step, "model": model.state_dict(),
           "optimizer": opt.state_dict(), "data": data, **meta}  # fmt: skip
    try:
        torch.save(doc, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_checkpoint(path: str | Path, verb: str = "resume from") -> dict[str, Any]:
    """A checkpoint written by :func:`save_checkpoint`, tensors on the CPU; a missing, truncated,
    damaged (a member whose CRC-32 does not match: a flipped byte) or foreign file is a
    :class:`~featurecache.errors.UsageError` naming it and the reason in one line ("cannot ``verb``
    PATH: ...")."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"cannot {verb} {path}: a directory, not a checkpoint file")
    if not path.is_file():
        raise UsageError(f"cannot {verb} {path}: no such file")
    not_ours = f"cannot {verb} {path}: not a featurecache checkpoint"
    if not zipfile.is_zipfile(path):  # what torch.save writes; a torn copy lacks the zip's directory
        raise UsageError(f"{not_ours} (not a file torch.save wrote, or a truncated one)")
    # torch.load does not check the members' CRC-32: a flipped byte loaded silently as another
    # weight (review R28b s46 #3). Reading the file once more is little next to a resume.
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise UsageError(f"{not_ours} (damaged: {_first_line(exc)})") from exc
    if damaged is not None:
        raise UsageError(f"{not_ours} (damaged: its member {damaged} fails its checksum)")
    try:
        doc = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # the weights-only loader's refusal (a page of advice)
        raise UsageError(f"{not_ours} (it holds objects other than tensors and plain values)") from exc
    except Exception as exc:  # zip and torch errors all mean: not a readable checkpoint
        raise UsageError(f"{not_ours} (unreadable: {_first_line(exc)})") from exc
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        raise UsageError(f"{not_ours} (a PyTorch file without featurecache's format tag)")
    if doc.get("version") != CHECKPOINT_VERSION:
        raise UsageError(
            f"cannot {verb} {path}: checkpoint version {doc.get('version')}, this featurecache reads "
            f"{CHECKPOINT_VERSION}"
        )
    return doc


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _resume_config(path: str | Path, doc: dict[str, Any], given: ModelConfig | None, crop_size: int,
                   seed: int, batch_size: int, max_atoms: int | None = None, world: int = 1) -> ModelConfig:  # fmt: skip
    """The checkpoint's model config; a different one given explicitly is refused, and so is a
    different crop, seed, global batch or atom budget (the batches that follow would not be the ones
    the run would have seen; a checkpoint of an older featurecache records no atom budget: warned).
    The global batch is ``batch_size`` × ``world`` (this run's ranks) against the checkpoint's
    (:func:`_check_global_batch`): the same samples per optimizer step on another number of ranks
    is a reshard of the data positions, any other is refused rather than continued: the checkpoint's
    step count, the synthetic stream's position (batches drawn) and a carried-over log all count
    steps of its samples, and ``--lr`` was chosen for them."""
    saved = _checkpoint_config(path, doc, given, "resume from")
    for key, option, value in (("crop_size", "--crop", crop_size), ("seed", "--seed", seed)):
        if doc.get(key) is not None and doc[key] != value:
            raise UsageError(
                f"cannot resume from {path}: its run used {option} {doc[key]}, this one {option} {value} "
                "(the same batches follow only with the same value)"
            )
    _check_global_batch(path, doc, batch_size, world)
    if "max_atoms" not in doc:
        log.warning("%s records no --max-atoms (an older checkpoint): cannot check that its run used the same "
                    "atom budget as this one", path)  # fmt: skip
    elif doc["max_atoms"] != max_atoms:

        def budget(value: Any) -> str:
            return "no --max-atoms" if value is None else f"--max-atoms {value}"

        raise UsageError(
            f"cannot resume from {path}: its run used {budget(doc['max_atoms'])}, this one {budget(max_atoms)} "
            "(the same batches follow only with the same value)"
        )
    return saved


def checkpoint_world_size(doc: dict[str, Any]) -> int | None:
    """The number of ranks of the run that wrote checkpoint ``doc``: its ``world_size``, else (a
    checkpoint of a featurecache before session 46, which records none) the number of data positions
    it holds, one per rank (:func:`save_checkpoint`'s ``data``); None when it says neither."""
    world = doc.get("world_size")
    if isinstance(world, int) and not isinstance(world, bool) and world >= 1:
        return world
    data = doc.get("data")
    ranks = data.get("ranks") if isinstance(data, dict) else None
    return len(ranks) if isinstance(ranks, list) and ranks else None


def _ranks_text(n: int) -> str:
    return f"{n} rank{'' if n == 1 else 's'}"


def _check_global_batch(path: str | Path, doc: dict[str, Any], batch_size: int, world: int) -> None:
    """Refuse to resume checkpoint ``path`` (``doc``) with another global batch (samples per
    optimizer step: ``batch_size`` × ``world`` ranks) than its run's, in one line naming the
    ``--batch-size`` that keeps it on this number of ranks (or that none does), or ``--init-from``.
    The same global batch on another number of ranks (2 ranks of 1 sample, resumed on 1 rank of 2)
    is the same objective: its data positions are resharded (:func:`_resharded`). A checkpoint
    that says nothing of its ranks (:func:`checkpoint_world_size`) is taken as one rank's, warned."""
    theirs = doc.get("batch_size")
    if not isinstance(theirs, int):  # (every featurecache's checkpoint records it)
        return
    their_world = checkpoint_world_size(doc)
    if their_world is None:
        log.warning("%s records neither its run's number of ranks nor their data positions: taken as one "
                    "rank's (a global batch of %d)", path, theirs)  # fmt: skip
        their_world = 1
    before, now = theirs * their_world, batch_size * world
    if before == now:
        return
    if before % world == 0:
        keep = f"give --batch-size {before // world} to keep it on {_ranks_text(world)}"
    else:
        keep = f"no --batch-size keeps it on {_ranks_text(world)}: resume on a number of ranks that divides {before}"
    raise UsageError(
        f"cannot resume from {path}: its run trained {before} sample(s) per step (--batch-size {theirs} on "
        f"{_ranks_text(their_world)}), this one would train {now} (--batch-size {batch_size} on "
        f"{_ranks_text(world)}); {keep}, or start a new run from its weights with --init-from {path}"
    )


def _note_clip_change(path: str | Path, doc: dict[str, Any], clip_grad_norm: float, step: int) -> None:
    """Warn when a resume of checkpoint ``path`` (``doc``) clips at another norm than its run did: as
    ``--lr``, the value given applies from the resumed step on, but the default changed in session
    43 (1.0 -> 10.0), so an older run resumed as it was would go on at the new one unnoticed."""
    theirs = doc.get("clip_grad_norm", OLD_CLIP_GRAD_NORM)
    if theirs == clip_grad_norm:
        return
    older = (
        "" if "clip_grad_norm" in doc else " (an older checkpoint, which records none: clipped at 1.0 then)"
    )
    log.warning("%s was trained with --clip-grad-norm %s%s; this run clips at %s from step %d on (give "
                "--clip-grad-norm %s to go on as it did)", path, theirs, older, clip_grad_norm, step,
                theirs)  # fmt: skip


def _checkpoint_lr(doc: dict[str, Any]) -> float | None:
    """The learning rate checkpoint ``doc``'s run trained at: its ``lr``, or (a checkpoint that
    records none) its optimizer's first param group's; None when neither says."""
    theirs = doc.get("lr")
    if not isinstance(theirs, int | float):
        groups = (doc.get("optimizer") or {}).get("param_groups") or [{}]
        theirs = groups[0].get("lr") if isinstance(groups[0], dict) else None
    return float(theirs) if isinstance(theirs, int | float) and not isinstance(theirs, bool) else None


def _note_lr_change(path: str | Path, doc: dict[str, Any], lr: float, step: int) -> None:
    """Warn when a resume of checkpoint ``path`` (``doc``) trains at another ``--lr`` than its run
    did: the rate given applies from the resumed step on, and a resume that leaves ``--lr`` out
    takes the default, which changed the rate of a run trained at another one without a word
    (review R28b s46 #4). The log's records say each step's rate (``lr``). A checkpoint that records
    none says it in its optimizer's param groups."""
    theirs = _checkpoint_lr(doc)
    if theirs is None or theirs == lr:
        return
    log.warning("%s was trained with --lr %s; this run trains at %s from step %d on (give --lr %s to go on as "
                "it did)", path, theirs, lr, step, theirs)  # fmt: skip


def _check_data_settings(path: str | Path, doc: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """Refuse to resume checkpoint ``path`` (``doc``) with other client data settings (``data``:
    :func:`_check_data_options`'s) than its run's, in one line naming every option that differs
    with both values and the options that resume it: the data position indexes that run's stream
    of samples, crops and MSA rows. A checkpoint of an older featurecache records none: it is
    compared with the values its run used (:data:`_DATA_SETTINGS`). Crop weights are the same
    within :data:`CROP_WEIGHTS_REL_TOL`. Returns the settings the resumed run uses: ``data`` with
    the checkpoint's crop weights (the floats its run drew with, which the resumed run's log and
    checkpoints then record)."""
    differ = [
        (option, doc.get(key, older), data[key])
        for key, option, older in _DATA_SETTINGS
        if not _same_data_setting(key, doc.get(key, older), data[key])
    ]
    if differ:
        records_none = not any(key in doc for key, _, _ in _DATA_SETTINGS)
        note = (
            f" (an older checkpoint, which records none: train had no such option{'s' if len(differ) > 1 else ''} "
            "then)"
            if records_none
            else ""
        )
        theirs = " and ".join(_option_value(option, t) for option, t, _ in differ)
        ours = " and ".join(_option_value(option, v) for option, _, v in differ)
        give = " ".join(_option_value(option, t) for option, t, _ in differ)
        value = "values" if len(differ) > 1 else "value"
        raise UsageError(
            f"cannot resume from {path}: its run used {theirs}{note}, this one {ours} (the same batches follow "
            f"only with the same {value}: give {give}, or --init-from for a new run)"
        )
    if "crop_weights" not in doc:
        return data
    return {**data, "crop_weights": [float(v) for v in doc["crop_weights"]]}


def _checkpoint_config(
    path: str | Path, doc: dict[str, Any], given: ModelConfig | None, verb: str
) -> ModelConfig:
    """The model config of checkpoint ``path`` (``doc``); a different one given explicitly is refused."""
    saved = ModelConfig.from_dict(doc["model_config"])
    if given is not None and given != saved:
        theirs = given.to_dict()
        diff = {k: (v, theirs[k]) for k, v in saved.to_dict().items() if theirs[k] != v}
        raise UsageError(f"cannot {verb} {path}: its model config differs (checkpoint, given): {diff}")
    return saved


def _load_weights(model: torch.nn.Module, path: str | Path, doc: dict[str, Any], verb: str) -> None:
    """The parameters of checkpoint ``path`` (``doc``) into ``model``; a checkpoint whose parameters
    do not fit this trunk (written by a featurecache whose trunk had other parameters) is a
    :class:`UsageError` in one line, not torch's page of missing and unexpected keys."""
    mine, theirs = model.state_dict(), doc["model"]
    missing, unexpected = sorted(set(mine) - set(theirs)), sorted(set(theirs) - set(mine))
    shapes = sorted(k for k in set(mine) & set(theirs) if tuple(mine[k].shape) != tuple(theirs[k].shape))
    if missing or unexpected or shapes:
        said = [f"{what} {', '.join(keys[:3])}{' …' if len(keys) > 3 else ''}"
                for what, keys in (("missing", missing), ("unexpected", unexpected), ("other shapes", shapes))
                if keys]  # fmt: skip
        raise UsageError(
            f"cannot {verb} {path}: its model parameters do not fit this featurecache's trunk ({'; '.join(said)}): "
            "a checkpoint of a version whose trunk had other parameters"
        )
    model.load_state_dict(theirs)


_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def _check_device(device: str) -> torch.device:
    """``device`` as a torch device: ``cpu``, ``cuda`` or ``cuda:N`` of a GPU this machine has."""
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise UsageError(f"--device {device!r}: must be cpu, cuda or cuda:N")
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: no CUDA device is available (use --device cpu)")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise UsageError(
                f"--device {device}: this machine has {count} CUDA device(s), cuda:0 … cuda:{count - 1}"
            )
    return dev


def _check_output_path(path: Path, option: str, example: str) -> None:
    """``path`` can be written before training starts: not a directory, its parent directories
    created, a file creatable beside it (the temporary file it is written through)."""
    if path.is_dir():
        raise UsageError(f"{option} {path} is a directory; give a file path (e.g. {path / example})")
    # a file where a directory of the path must be: mkdir says "File exists" (not the reason)
    blocking = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise UsageError(f"{option} {path}: cannot write there ({blocking} is a file, not a directory)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.with_name(f".{path.name}.tmp")
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write there ({exc.strerror or exc})") from exc


def _same_directory(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one directory, by (st_dev, st_ino): also through a path that
    :meth:`Path.resolve` leaves apart (a bind mount of it elsewhere). Unreadable: compared as paths."""
    try:
        sa, sb = a.stat(), b.stat()
    except OSError:
        return a == b
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _written_names(name: str) -> tuple[str, ...]:
    """The names a checkpoint due at ``name`` is written under, in its directory: the name, its
    temporary file (:func:`save_checkpoint`), the staged file (:func:`_staged_path`) and the staged
    file's temporary file."""
    staged = _staged_path(Path(name)).name
    return name, f".{name}.tmp", staged, f".{staged}.tmp"


def _step_pattern(template: str) -> re.Pattern[str]:
    """``template`` as a pattern matching its ``{step}`` (every occurrence the same number)."""
    head, _, tail = template.partition("{step}")
    return re.compile(re.escape(head) + r"(\d+)" + re.escape(tail).replace(r"\{step\}", r"\1"))


def _steps_naming(template: Path, source: Path, steps: int) -> set[int]:
    """The step counts at which ``template`` (with ``{step}``) might name ``source``'s directory
    entry: read off ``source``'s name, or, when only the directories carry ``{step}``, off the
    entries of the directory above the first such one (a symlink below it included) and off
    ``source``'s directory path (``steps`` too when ``..`` takes the ``{step}`` back out of it).
    Candidates only: :func:`_check_init_kept` checks each."""
    found: set[int] = set()
    if "{step}" in template.name:
        for name in _written_names(template.name):
            if match := _step_pattern(name).fullmatch(source.name):
                found.add(int(match.group(1)))
        return found
    parts = template.parent.parts
    first = next(i for i, part in enumerate(parts) if "{step}" in part)
    above = Path(os.path.realpath(Path(*parts[:first]) if first else Path(".")))
    try:
        entries = [entry.name for entry in os.scandir(above)]
    except OSError:
        entries = []
    pattern = _step_pattern(parts[first])
    found.update(int(m.group(1)) for m in map(pattern.fullmatch, entries) if m)
    lexical = os.path.normpath(above.joinpath(*parts[first:]))
    if "{step}" not in lexical:  # run_{step}/..: one directory, unless run_N is a symlink (scanned above)
        found.add(steps)
    elif match := _step_pattern(lexical).fullmatch(str(source.parent)):
        found.add(int(match.group(1)))
    return found


def _check_init_kept(init_from: str | Path, template: str | Path, every: int | None, steps: int,
                     first_step: int = 0) -> None:  # fmt: skip
    """Refuse a run that would overwrite the checkpoint it is initialised from (``--init-from X
    --checkpoint X``): its step, optimizer state and data position would be lost without a word.

    A run may write a checkpoint after any number of steps done from ``first_step + 1`` to
    ``steps``, not only every ``every`` steps and at the end: a run stopped early (SIGTERM, Ctrl-C,
    the batch source ending or failing) checkpoints the steps done. Each is written through a
    temporary file and a staged one beside it (:func:`_written_names`), renamed over its path; the
    rename replaces that directory entry, so what is lost is the file at one of those names in the
    same directory, reached through any path (the directories resolved and compared by device and
    inode, so a symlinked or bind-mounted directory is caught). The name itself is not followed: a
    ``--checkpoint`` that is a symlink to X has the link replaced, X kept; and a hard link to X under
    another name keeps the old contents: neither is refused. Only rank 0 writes checkpoints, under
    the same names whatever the number of ranks; every rank checks, so all refuse alike."""
    source = Path(init_from).resolve()
    template = Path(template)
    if "{step}" in str(template):
        candidates = {at for at in _steps_naming(template, source, steps) if first_step < at <= steps}
    else:
        candidates = {steps} if first_step < steps else set()
    for at in sorted(candidates):
        path = checkpoint_path(template, at)
        for written in _written_names(path.name):
            if written != source.name or not _same_directory(path.parent.resolve(), source.parent):
                continue
            due = at == steps or bool(every and at % every == 0)
            when = f"after step {at - 1}" if due else (
                f"if it stops after step {at - 1} ({at} steps done: a signal or the end of the batch source stops "
                "a run early, and it checkpoints the steps done)"
            )  # fmt: skip
            through = (
                ""
                if written == path.name
                else f" (the file {written} a checkpoint {path.name} is written through)"
            )
            raise UsageError(
                f"--checkpoint {template} would overwrite {init_from}{through}, the checkpoint this run is "
                f"initialised from (--init-from), {when}: give another --checkpoint path (or --resume "
                f"{init_from} to continue its run)"
            )


def _check_keep_checkpoints(keep: int | None, checkpoint: str | Path | None) -> None:
    """``--keep-checkpoints`` needs at least 1 and a ``{step}`` checkpoint template (review R34a s48 #3)."""
    if keep is None:
        return
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise UsageError(f"--keep-checkpoints must be ≥ 1; got {keep}")
    if checkpoint is None or "{step}" not in str(checkpoint):
        given = (
            f"--checkpoint {checkpoint} has no {{step}}"
            if checkpoint is not None
            else "no --checkpoint given"
        )
        raise UsageError(
            f"--keep-checkpoints needs a --checkpoint with {{step}} in its name, one file per checkpoint ({given}; "
            "without {step} each checkpoint replaces the last)"
        )


def _file_identity(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _delete_checkpoint(
    entry: dict[str, Any], sources: tuple[str | Path | None, ...], identity: tuple[int, int] | None = None
) -> None:
    """Delete the checkpoint of the log's ``entry`` (one this run wrote, beyond --keep-checkpoints)
    and mark it ``deleted``; never one of ``sources`` (the --resume / --init-from file), nor, with
    ``identity`` (the file as this run kept it: :func:`_file_identity`), a file put at its path since
    (another run writing the same checkpoint names: it deleted that run's checkpoints, which that
    run's log lists as kept; review R34b s48 #2)."""
    path = Path(entry["path"])
    if identity is not None and _file_identity(path) != identity:
        log.warning("--keep-checkpoints: not deleting %s: another file is there now, not the one this run wrote "
                    "(another run writing the same checkpoint names?)", path)  # fmt: skip
        return
    for source in sources:
        if source is not None:
            with contextlib.suppress(OSError):
                if os.path.samefile(path, source):
                    return
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("--keep-checkpoints: cannot delete %s: %s", path, exc.strerror or exc)
        return
    entry["deleted"] = True
    log.info("deleted the checkpoint %s (--keep-checkpoints: older than the last ones kept)", path)


def _warn_pending(template: str | Path | None, resume: str | Path | None) -> None:
    """Warn about staged checkpoints (``.NAME.pending``) beside ``template``'s paths or the resumed
    one: a run that was killed (SIGKILL, OOM) between staging a checkpoint and moving it into place
    leaves one; it holds later steps than the file at its path, but no next step's loss vouched for it."""
    found: dict[Path, None] = {}
    template = Path(template) if template is not None else None
    if template is None:
        pass
    elif "{step}" in template.name:
        pattern = _staged_path(template.with_name(template.name.replace("{step}", "*"))).name
        found.update(dict.fromkeys(sorted(template.parent.glob(pattern))))
    else:
        found[_staged_path(template)] = None
    if resume is not None:
        found[_staged_path(Path(resume))] = None
    for pending in found:
        if not pending.is_file():
            continue
        real = pending.with_name(pending.name[1 : -len(".pending")])
        try:
            step: Any = torch.load(pending, map_location="cpu", weights_only=True).get("step")
        except Exception as exc:  # a torn or foreign file: still worth naming
            log.warning("%s is a staged checkpoint left by a run that ended before moving it to %s; it does not "
                        "read (%s)", pending, real, _first_line(exc))  # fmt: skip
            continue
        log.warning("%s is a staged checkpoint of step %s left by a run that ended (killed?) before moving it to "
                    "%s: no next step's loss checked its parameters; to continue from it, rename it to %s and "
                    "--resume it", pending, step, real, real)  # fmt: skip


def _launch_rank() -> int:
    """This process's rank before the process group is up (torchrun's ``RANK``)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0")) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else 0


def _launch_world() -> int:
    """The number of ranks of this run before the process group is up (torchrun's ``WORLD_SIZE``;
    what :class:`_Ranks` finds once it is)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return world if world > 1 and dist.is_available() else 1


def _earlier_log(path: Path, first_step: int, same: dict[str, Any],
                 same_if_recorded: dict[str, Any] | None = None,
                 global_batch: int | None = None) -> tuple[list[Any], list[Any], list[dict[str, Any]]]:  # fmt: skip
    """(step records, checkpoints, segments: :func:`_earlier_segments`) of the log at ``path``
    before step ``first_step``: what a run resumed at ``first_step`` with the same ``--log`` keeps. A file that is not a training log, or
    the log of another run (``same``: the fields that must match; ``same_if_recorded``: those that
    must match where the log records them, e.g. the data settings an older log lacks;
    ``global_batch``: its ``batch_size`` × ``world_size``), is refused: the resumed run would
    overwrite it."""
    advice = "resuming would overwrite it; give another --log or move it away"
    try:
        earlier = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(
            f"--log {path} exists and is not a training log ({_first_line(exc)}): {advice}"
        ) from exc
    if not isinstance(earlier, dict) or not isinstance(earlier.get("steps"), list):
        raise UsageError(f"--log {path} exists and is not a training log (no list of steps): {advice}")
    recorded = {k: v for k, v in (same_if_recorded or {}).items() if k in earlier}
    if global_batch is not None:  # the same samples per step on another number of ranks is the same run
        batch, world = earlier.get("batch_size"), earlier.get("world_size", 1)
        recorded["global_batch"] = global_batch
        earlier["global_batch"] = (
            batch * world if isinstance(batch, int) and isinstance(world, int) else batch
        )
    for key, value in {**same, **recorded}.items():
        if not _same_data_setting(key, earlier.get(key), value):
            raise UsageError(
                f"--log {path} is the log of another run (its {key} {earlier.get(key)!r}, this run's {value!r}): "
                f"{advice}"
            )
    steps = [r for r in earlier["steps"] if isinstance(r, dict) and isinstance(r.get("step"), int)]
    checkpoints = [c for c in earlier.get("checkpoints") or [] if isinstance(c, dict)]
    return (
        finite([r for r in steps if r["step"] < first_step]),
        [c for c in checkpoints if isinstance(c.get("step"), int) and c["step"] <= first_step],
        _earlier_segments(earlier, first_step),
    )


#: what each of a log's ``segments`` holds: the step a run (the first, or a resume) started at and
#: the code that trained from it on (:func:`_code_identity`)
SEGMENT_KEYS = ("start_step", "featurecache_version", "featurecache_source")


def _earlier_segments(earlier: dict[str, Any], first_step: int) -> list[dict[str, Any]]:
    """The ``segments`` of an earlier log (``earlier``) that start before ``first_step``: which code
    trained the steps a resume carries over (review R29b s46 #6). A log written before logs recorded
    them: one segment from its ``start_step`` on, of the code its header names, after one of unknown
    code (nulls) from step 0 when that log was itself a resume."""
    recorded = earlier.get("segments")
    if (
        isinstance(recorded, list)
        and recorded
        and all(isinstance(s, dict) and isinstance(s.get("start_step"), int) for s in recorded)
    ):
        segments = [{k: s.get(k) for k in SEGMENT_KEYS} for s in recorded]
    else:
        start = earlier.get("start_step")
        start = start if isinstance(start, int) and start > 0 else 0
        segments = [dict.fromkeys(SEGMENT_KEYS, None) | {"start_step": 0}] if start else []
        segments.append({"start_step": start, **{k: earlier.get(k) for k in SEGMENT_KEYS[1:]}})
    return [s for s in segments if s["start_step"] < first_step]


def _missing_steps(carried: list[dict[str, Any]], first_step: int) -> list[int]:
    """The steps before ``first_step`` that the carried-over records of an earlier log lack."""
    have = {r["step"] for r in carried}
    return [i for i in range(first_step) if i not in have]


def _ranges(steps: list[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"``."""
    out: list[str] = []
    for _, run in itertools.groupby(enumerate(steps), key=lambda p: p[1] - p[0]):
        r = [s for _, s in run]
        out.append(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]))
    return ", ".join(out)


#: what each record of the log's ``steps`` holds, with its unit: the log's ``fields`` block (the
#: ``summary`` block is :func:`summarize`'s)
LOG_FIELDS: dict[str, str] = {
    "step": "the step's number, 0-based (a resumed run continues the count; the header's segments say which "
    "featurecache trained the steps from each start_step on: start_step, featurecache_version, featurecache_source, "
    "null where an earlier log did not record it)",
    "step_time_s": "s of wall time from the end of the previous step to the end of this one (includes writing the "
    "log and a checkpoint due after the previous step)",
    "data_wait_s": "s of it the host was blocked on the batch source (with the prefetch: fetching the next batch)",
    "exposed_data_wait_s": "s of data_wait_s the GPU sat idle for (CUDA events; on the CPU all of it)",
    "compute_s": "s from issuing the step to reading its loss (with the prefetch it includes the next batch's fetch "
    "where that outlasts the GPU's work)",
    "gpu_s": "s the GPU spent on the step (CUDA events); null on the CPU",
    "loss": "the distogram loss of the batch: each sample's mean over its supervised pairs, averaged over the "
    "samples that have any (with several ranks: over every rank's such samples); null when not finite, or when "
    "the step was skipped (skip_reason)",
    "grad_norm": "the total L2 norm of the step's gradients (with several ranks: of their mean) before they are "
    "clipped to clip_grad_norm; null when not finite (the run then stops), or when the step was skipped",
    "lr": "the learning rate of the step's update (a resumed run's --lr applies from its first step on: a change "
    "of rate shows here; in a log written before featurecache recorded it, a resume fills it in for the steps "
    "of the run whose checkpoint it resumes, and leaves it null for the steps of earlier segments)",
    "clipped": "whether grad_norm was above clip_grad_norm (the header's), so that the step's gradients were "
    "scaled down to it; null when the step was skipped",
    "skip_reason": "why the step did not train (no forward, backward or optimizer step; it still counts toward "
    "--steps and the data position): no supervised distogram pair in the batch (with several ranks: in any "
    "rank's batch); null for a step that trained",
    "pairs": "token pairs i < j of this rank's batch that the distogram loss supervises (both tokens real, their "
    "representative atoms resolved)",
    "peak_mem_bytes": "bytes: peak GPU memory allocated in the step; null on the CPU",
    "tokens": "real (unpadded) tokens of this rank's batch",
    "world_tokens": "real tokens of every rank's batch (several ranks: filled in when the run ends)",
    "padded_tokens": "token length the model ran the batch at (after --pad-multiple)",
    "msa_rows": "MSA rows the model ran the batch with",
    "graphs": "CUDA graphs recorded so far (--cuda-graphs); else null",
    "entry_ids": "the batch's entries",
    "positions": "the batch's positions in the client's sample stream",
    "crop_methods": "per sample: the cropper that cut it (contiguous, spatial, spatial_interface; none: the "
    "entry fit the crop whole); null for synthetic batches",
    "reorder_depth": "per sample: how many earlier samples were still unfinished when it was handed out "
    "(the client's ready-first order)",
    "skipped": "samples the client skipped (failed) since the previous batch",
}

#: the log is rewritten at most this often ...
LOG_EVERY_S = 5.0
#: ... and, when it has grown big, rarely enough that writing it takes at most this share of the run
LOG_WRITE_SHARE = 0.01


#: the keys of the log that change as the run goes: written after ``steps`` (the log's tail, which
#: each write rewrites); the others (the header) are written once, before ``steps``
LOG_TAIL_KEYS = ("checkpoints", "status", "stop_signal", "error", "summary")


class _Summary:
    """:func:`summarize`, kept as the records come (:meth:`add`) instead of over a list of them: its
    sums, counts, peak and losses as running values, and of each record only what the medians and
    ``slow_steps`` need, in compact arrays (32 bytes a step: a million steps hold 32 MB, where the
    records themselves took ~1.6 KB a step; review R34a s48 #1). :meth:`result` is what
    :func:`summarize` gives for the same records, to the bit."""

    def __init__(self) -> None:
        self.n = 0
        self.step_time = array("d")
        self.compute = array("d")
        self.wait = array("d")
        self.tokens = array("q")
        # sums over the warm-up records (the first WARMUP_STEPS) and over the others (the timed ones):
        # step time, data wait, exposed wait, tokens, world tokens; and how many world tokens are None
        self._sums = ([0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0])
        self._peak: int | None = None
        self._first_loss: float | None = None
        self._last_loss: float | None = None
        self._clipped = [0, 0]  # (clipped, known)
        self._skipped = 0

    def add(self, r: dict[str, Any]) -> None:
        step_time, wait = r["step_time_s"], r["data_wait_s"]
        world = r.get("world_tokens", r["tokens"])
        sums = self._sums[self.n >= WARMUP_STEPS]
        sums[0] += step_time
        sums[1] += wait
        sums[2] += r.get("exposed_data_wait_s", wait)
        sums[3] += r["tokens"]
        if world is None:
            sums[5] += 1
        else:
            sums[4] += world
        self.step_time.append(step_time)
        self.compute.append(r["compute_s"])
        self.wait.append(wait)
        self.tokens.append(r["tokens"])
        peak = r["peak_mem_bytes"]
        if peak is not None and (self._peak is None or peak > self._peak):
            self._peak = peak
        loss = r.get("loss")
        if loss is not None:
            self._first_loss = loss if self._first_loss is None else self._first_loss
            self._last_loss = loss
        if r.get("clipped") is not None:
            self._clipped[0] += bool(r["clipped"])
            self._clipped[1] += 1
        self._skipped += bool(r.get("skip_reason"))
        self.n += 1

    def world_tokens_known(self, start: int, values: Sequence[int]) -> None:
        """The world tokens of the records from ``start`` on, None when they were added, are ``values``."""
        for i, v in enumerate(values, start=start):
            sums = self._sums[i >= WARMUP_STEPS]
            sums[4] += v
            sums[5] -= 1

    def result(self) -> dict[str, Any]:
        import numpy as np

        n = self.n
        if not n:
            return {"steps": 0}
        first = WARMUP_STEPS if n > WARMUP_STEPS else 0  # records[WARMUP_STEPS:] or records
        total, wait, exposed, tokens, world, world_none = self._sums[1] if first else self._sums[0]
        step_time = np.array(self.step_time, dtype=np.float64)[first:]  # (copies: the arrays grow on)
        median_step = float(np.median(step_time))
        rates = np.array(self.tokens, dtype=np.float64)[first:] / step_time if (step_time > 0).all() else None
        clipped, known = self._clipped
        return {
            "steps": n,
            "warmup_steps_excluded": first,
            "median_step_time_s": median_step,
            "median_compute_s": float(np.median(np.array(self.compute, dtype=np.float64)[first:])),
            "median_data_wait_s": float(np.median(np.array(self.wait, dtype=np.float64)[first:])),
            "data_wait_fraction": exposed / total if total > 0 else 0.0,
            "loader_wait_fraction": wait / total if total > 0 else 0.0,
            "peak_mem_bytes": self._peak,
            # of the steps that trained (a skipped step's loss is null, not a loss of 0)
            "first_loss": self._first_loss,
            "last_loss": self._last_loss,
            "skipped_steps": self._skipped,
            # the share of the trained steps whose gradient norm was above clip_grad_norm (None: no such
            # step, or a log older than the records' "clipped")
            "clipped_fraction": clipped / known if known else None,
            "tokens_per_s": tokens / total if total > 0 else None,
            # every rank's tokens over this rank's wall time (None when a run of several ranks stopped
            # before the ranks exchanged their counts)
            "world_tokens_per_s": world / total if total > 0 and not world_none else None,
            "median_tokens_per_s": float(np.median(rates)) if rates is not None else None,
            "slow_steps": [
                int(i) + first for i in np.flatnonzero(step_time > SLOW_STEP_FACTOR * median_step)
            ],
        }


#: the errors of ``os.link`` that say the filesystem has no hard links (the log is then copied at each
#: write for the rest of the run); any other error only fails the write it came in
_NO_LINKS_ERRNOS = frozenset(
    e for e in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS, errno.EXDEV) if e
)


class _LogFile:
    """One of the two files of a :class:`_RunLog` (the one at its path, or its twin): an open file
    descriptor, how many step lines it holds and the byte range they take."""

    def __init__(self, fd: int, n: int, start: int, end: int) -> None:
        self.fd, self.n, self.start, self.end = fd, n, start, end


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


def _lines_of(fd: int, start: int, end: int, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The step lines (JSON, without the separators) in bytes ``start``..``end`` of a log file,
    read a chunk at a time."""
    rest = b""
    while start < end:
        data = os.pread(fd, min(chunk, end - start), start)
        if not data:
            break
        start += len(data)
        *whole, rest = (rest + data).split(b"\n")
        yield from (line.strip().removesuffix(b",") for line in whole if line.strip())
    if rest.strip():
        yield rest.strip().removesuffix(b",")


class _RunLog:
    """The JSON log, written as the run goes: every ``every_s`` seconds (checked after each step),
    when a checkpoint is kept and at the end. Strict JSON: a non-finite number is written as null.
    ``path`` None: nothing is written, the summary is still kept in ``doc``.

    The file is the one JSON document it always was (``steps``: one record per line), its keys in
    two parts: the header (the run's settings, written once) before ``steps``, and the tail
    (:data:`LOG_TAIL_KEYS`: checkpoints, status, error, summary), which changes, after it. Neither
    the records nor the file are held in memory: each record is serialised once when it comes
    (:meth:`add`), the summary is kept as it goes (:class:`_Summary`), and a write costs the steps
    since the write before last and the tail, however long the run (it rewrote the whole log from
    every record held in memory: 3.5 s and ~1.6 KB of memory a step at 200k steps; review R34a s48
    #1).

    A write never changes the file a reader finds at ``path``: there are two files, the log and its
    twin (``.NAME.twin`` beside it, the log as of the write before). A write appends the new step
    lines to the twin in place, rewrites its tail and truncates it, then renames it over the log
    and gives the old log the twin's name (a hard link, then renames). A reader, or a run killed
    mid-write, always finds a whole log at ``path`` (as when each write was a whole new file renamed
    over it); the twin is removed at the end. The cost is the twin's disk space, as much again as the
    log. On a filesystem without hard links each write copies the log (a byte copy, not a re-encoding).
    A reader still reading the log it opened when the next write but one comes may see it change
    (it is the twin then)."""

    def __init__(self, path: Path | None, doc: dict[str, Any], every_s: float,
                 carried: Sequence[dict[str, Any]] = (), keep_steps: bool = True) -> None:  # fmt: skip
        self.path, self.doc, self.every_s = path, doc, every_s
        self._due = 0.0
        self.writes, self.write_s = 0, 0.0
        self.summary = _Summary()
        self.last: dict[str, Any] | None = None
        self.carried = len(carried)
        # the world tokens of this run's records, known at the end with several ranks
        self._world: list[int] | None = None
        # the JSON lines not in both files yet (from the twin's count on, or the log's without one)
        self._held: list[bytes] = []
        self._held_from = 0
        self._cur: _LogFile | None = None  # the file at path
        self._twin: _LogFile | None = None  # the twin: the log as of the write before
        self._head: bytes | None = None
        self._head_keys: list[str] | None = None
        self._links = True
        # path None: the lines go to an unnamed temporary file, for the records run_training returns
        self._spool = tempfile.TemporaryFile() if path is None and keep_steps else None  # noqa: SIM115 (close())
        self._tmp: Path | None = None  # the file each whole write is written to, then renamed
        self._twin_path: Path | None = None
        self._prev: Path | None = None  # the log's second name on the way to becoming the twin
        if path is not None:
            self._tmp = path.with_name(f".{path.name}.tmp")
            self._twin_path = path.with_name(f".{path.name}.twin")
            self._prev = path.with_name(f".{path.name}.prev")
        for r in carried:
            self.add(r)

    @property
    def added(self) -> int:
        """Records added after the carried ones: this run's steps."""
        return self.summary.n - self.carried

    def add(self, rec: dict[str, Any]) -> None:
        """A step's record (it must not change later, but for its world tokens: :meth:`world_tokens`)."""
        line = json.dumps(rec, default=str, allow_nan=False).encode()
        self.summary.add(rec)
        self.last = rec
        if self.path is not None:
            self._held.append(line)
        elif self._spool is not None:
            self._spool.write(line + b"\n")

    def this_run_tokens(self) -> list[int]:
        return list(self.summary.tokens[self.carried :])

    def world_tokens(self, values: list[int]) -> None:
        """The world tokens of this run's records, once the ranks exchanged them: the next write
        rewrites the log with them."""
        self._world = values
        self.summary.world_tokens_known(self.carried, values)
        if self._cur is not None:
            self._head = None  # a whole rewrite: the step lines change

    def _patched(self, lines: Iterator[bytes]) -> Iterator[bytes]:
        """``lines`` (from the first record on) with this run's world tokens filled in."""
        world = self._world
        for i, line in enumerate(lines):
            if world is not None and i >= self.carried and i - self.carried < len(world):
                rec = json.loads(line)
                rec["world_tokens"] = world[i - self.carried]
                line = json.dumps(rec, default=str, allow_nan=False).encode()
            yield line

    def _lines(self) -> Iterator[bytes]:
        """Every record's JSON line, in order, from the files (or the spool) and memory."""
        if self._spool is not None:
            self._spool.flush()
            yield from _lines_of(self._spool.fileno(), 0, self._spool.tell())
            return
        cur = self._cur
        n = 0
        if cur is not None:
            yield from _lines_of(cur.fd, cur.start, cur.end)
            n = cur.n
        yield from self._held[n - self._held_from :]

    def records(self) -> list[dict[str, Any]]:
        """Every record of the log (the carried ones too), read back: what ``run_training`` returns."""
        return [json.loads(line) for line in self._patched(self._lines())]

    def _parts(self) -> tuple[bytes, bytes]:
        """(header, tail) of the log as the document is now: the header ends with ``"steps": [``,
        the tail starts after the step lines (with the list's end)."""
        doc = self.doc
        if self._head_keys is None:
            self._head_keys = [k for k in doc if k not in LOG_TAIL_KEYS and k != "steps"]
        keys = set(self._head_keys)
        head = json.dumps(
            {k: doc[k] for k in self._head_keys if k in doc}, indent=2, default=str, allow_nan=False
        )
        tail = json.dumps({k: v for k, v in doc.items() if k not in keys and k != "steps"}, indent=2, default=str,
                          allow_nan=False)  # fmt: skip
        # head ends with "\n}", tail starts with "{"
        return f'{head[:-2]},\n  "steps": ['.encode(), f",{tail[1:]}\n".encode()

    @staticmethod
    def _joined(lines: Sequence[bytes], first: int) -> bytes:
        """``lines`` as they follow the ``first`` lines already in a file."""
        return b"".join((b",\n    " if i else b"\n    ") + line for i, line in enumerate(lines, start=first))

    @staticmethod
    def _closing(n: int) -> bytes:
        return b"\n  ]" if n else b"]"

    def write(self) -> None:
        t = time.perf_counter()
        self.doc["summary"] = finite(self.summary.result())
        if self.path is None:
            return
        head, tail = self._parts()
        n = self.summary.n
        twin = self._twin
        if twin is not None and head == self._head and self._twin_in_place(twin):
            # the fast way: the new lines and the tail onto the twin, which then becomes the log
            data = self._joined(self._held[twin.n - self._held_from :], twin.n) + self._closing(n) + tail
            _write_at(twin.fd, data, twin.end)
            os.ftruncate(twin.fd, twin.end + len(data))
            twin.end += len(data) - len(self._closing(n) + tail)
            twin.n = n
            self._swap(twin)
        else:
            self._rewrite(head, tail)
        self._head = head
        # the lines held are those the twin lacks
        keep_from = self._twin.n if self._twin is not None else n
        del self._held[: keep_from - self._held_from]
        self._held_from = keep_from
        cost = time.perf_counter() - t
        self.writes += 1
        self.write_s += cost
        if self.every_s > 0:  # 0: after every step, whatever it costs
            self._due = time.monotonic() + max(self.every_s, cost / LOG_WRITE_SHARE)

    def _rewrite(self, head: bytes, tail: bytes) -> None:
        """A whole new file, renamed over the log: the first write, a header that changed, the world
        tokens filled in, or no hard links. The step lines are copied from the log (re-encoded only
        to fill in world tokens), a chunk at a time."""
        assert self.path is not None and self._tmp is not None
        n = self.summary.n
        fd = os.open(self._tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            _write_at(fd, head, 0)
            at = len(head)
            cur = self._cur
            if cur is not None and self._world is None:  # the lines as they are: a byte copy
                offset = cur.start
                while offset < cur.end:
                    data = os.pread(cur.fd, min(1 << 22, cur.end - offset), offset)
                    if not data:
                        raise OSError(f"{self.path} is shorter than it was written")
                    _write_at(fd, data, at)
                    offset, at = offset + len(data), at + len(data)
                done = cur.n
                rest: Iterator[bytes] = iter(self._held[done - self._held_from :])
            else:
                done, rest = 0, self._patched(self._lines())
            batch: list[bytes] = []
            for line in rest:
                batch.append(line)
                if len(batch) == 1024:
                    data = self._joined(batch, done)
                    _write_at(fd, data, at)
                    at, done, batch = at + len(data), done + len(batch), []
            data = self._joined(batch, done)
            _write_at(fd, data, at)
            at += len(data)
            assert done + len(batch) == n, (done, len(batch), n)
            _write_at(fd, self._closing(n) + tail, at)
            patched, self._links = self._world is not None, self._links and self._world is None
            self._replace(_LogFile(fd, n, len(head), at))  # (world tokens filled in: the old log is no twin)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                self._tmp.unlink()
            raise
        if patched:  # the lines now hold them: read back as they are
            self._world = None

    def _twin_in_place(self, twin: _LogFile) -> bool:
        """Whether the twin's name (``.NAME.twin``) is still the twin's file: not when the log's
        directory was removed (and made again) or the twin deleted or replaced by someone else; the
        write is then a whole new file from the log's open file, not a swap that can never succeed
        again (every later write failed, the end's too: the run's log was lost; review R34b s48 #1)."""
        assert self._twin_path is not None
        held = os.fstat(twin.fd)
        return _file_identity(self._twin_path) == (held.st_dev, held.st_ino)

    def _link_prev(self) -> bool:
        """A second name (``.NAME.prev``) for the log as it is, to become the twin; False where the
        filesystem has no hard links (each write then copies the log)."""
        assert self.path is not None and self._prev is not None
        if not self._links:
            return False
        try:
            self._prev.unlink(missing_ok=True)
            os.link(self.path, self._prev)
        except OSError as exc:
            if exc.errno in _NO_LINKS_ERRNOS:
                log.debug("%s: no hard link (%s): the log is copied at each write", self.path, exc)
                self._links = False
            # (any other error, e.g. the log or its directory removed, or a directory read-only for a
            # while: this write only; hard links are tried again at the next one, review R34b s48 #1)
            return False
        return True

    def _replace(self, new: _LogFile) -> None:
        """The new file (at the temporary path) over the log; the old log becomes the twin."""
        assert self.path is not None and self._tmp is not None
        linked = self._cur is not None and self._link_prev()
        os.replace(self._tmp, self.path)
        if self._twin is not None:
            os.close(self._twin.fd)
            self._twin = None
        self._installed(new, linked)

    def _swap(self, twin: _LogFile) -> None:
        """The twin, now up to date, over the log; the old log becomes the twin."""
        assert self.path is not None and self._twin_path is not None
        linked = self._link_prev()
        os.replace(self._twin_path, self.path)
        self._twin = None
        self._installed(twin, linked)

    def _installed(self, new: _LogFile, linked: bool) -> None:
        """``new`` is the file at the path now; the old one becomes the twin where it was linked
        (raises nothing: the log is in place)."""
        assert self._twin_path is not None and self._prev is not None
        old, self._cur = self._cur, new
        if old is None:
            with contextlib.suppress(OSError):
                self._twin_path.unlink(missing_ok=True)  # an earlier run's, killed
            return
        if linked:
            try:
                os.replace(self._prev, self._twin_path)
            except OSError:
                pass
            else:
                self._twin = old
                return
        os.close(old.fd)
        with contextlib.suppress(OSError):
            self._twin_path.unlink(missing_ok=True)

    def start(self) -> None:
        """The first write, before the first step: a path that cannot be written is refused now."""
        try:
            self.write()
        except OSError as exc:
            raise UsageError(f"--log {self.path}: cannot write it ({exc.strerror or exc})") from exc

    def step(self) -> None:
        """After a step: write when due; a failed write is a warning (the run goes on)."""
        if self.path is None or time.monotonic() < self._due:
            return
        self.now()

    def now(self) -> None:
        """Write at once, e.g. when a checkpoint was kept: a run killed later (SIGKILL, the OOM killer,
        a preemption) then leaves a log that holds every step of its last checkpoint, which a run
        resumed from it with the same ``--log`` carries over. A failed write is a warning."""
        if self.path is None:
            return
        try:
            self.write()
        except OSError as exc:
            log.warning("cannot write the log %s: %s (training goes on; trying again later)", self.path, exc)
            self._due = time.monotonic() + self.every_s

    def finish(self, raise_errors: bool, keep_steps: bool) -> None:
        """The last write; then ``doc["steps"]`` is every record read back (``keep_steps``) or the
        last one only, and the files are closed (the twin removed)."""
        try:
            self.write()
        except OSError as exc:
            if raise_errors:
                raise TrainingError(f"cannot write the log {self.path}: {exc.strerror or exc}") from exc
            log.error("cannot write the log %s: %s", self.path, exc)
        finally:
            try:
                if keep_steps:
                    self.doc["steps"] = self.records()
                else:
                    self.doc["steps"] = [] if self.last is None else [self.last]
            finally:
                self.close()

    def close(self) -> None:
        for f in (self._cur, self._twin):
            if f is not None:
                os.close(f.fd)
        self._cur = self._twin = None
        if self._spool is not None:
            self._spool.close()
            self._spool = None
        for p in (self._twin_path, self._prev):
            if p is not None:
                with contextlib.suppress(OSError):
                    p.unlink()
        self._held = []


class _StoppedBeforeStart(BaseException):
    """A SIGTERM came while the run was setting up (the store opening, a ``--service-wait``, the
    model): raised from the handler, so the set-up ends at once (a BaseException, like
    ``KeyboardInterrupt``: no ``except Exception`` on the way swallows it)."""


class _StopSignals:
    """While entered (in the main thread only: Python's rule for handlers), SIGTERM and SIGINT
    (Ctrl-C) ask the loop to stop after its current step (``requested``) instead of ending the
    process mid-step. On exit the previous handlers are back; :meth:`hand_on` then re-raises a
    received signal to them, so a process with the default handlers ends as an uncaught SIGTERM
    ends it (exit status 143), or raises ``KeyboardInterrupt`` for SIGINT, only after the log and
    the checkpoint are written. A second signal hands on at once (a second Ctrl-C: a
    ``KeyboardInterrupt`` mid-step). A signal that was ignored stays ignored (the convention for a
    job started in the background: ``cmd &`` in a script, ``nohup``; an ignored signal is
    inherited across exec), and the log says so: Ctrl-C sent to such a run does not stop it.

    :meth:`arm` installs the handlers before the loop, for its set-up: until the loop enters, a
    SIGTERM raises :class:`_StoppedBeforeStart` at once (there is no step to finish; without a
    handler the process ended with no word of why: review R28b s46 #6) and SIGINT goes to the
    handler that was there (``KeyboardInterrupt``, as without these); :meth:`disarm` puts the
    previous handlers back if the loop was never entered."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}
        self._starting = False
        #: called on a second signal before it is handed on (the loop's staged checkpoint is kept)
        self.on_second: Callable[[], None] | None = None

    @property
    def requested(self) -> bool:
        return self.received is not None

    def arm(self) -> None:
        self._install()
        self._starting = True

    def disarm(self) -> None:
        if self._starting:
            self._starting = False
            self._restore()

    def __enter__(self) -> _StopSignals:
        if not self._starting:
            self._install()
        self._starting = False
        return self

    def _install(self) -> None:
        from featurecache.signals import ignored_signal_note

        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                previous = signal.getsignal(sig)
                if previous is signal.SIG_IGN:
                    log.info("%s", ignored_signal_note(sig, "the run"))
                    continue
                self._previous[sig] = signal.SIG_DFL if previous is None else previous
                signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._starting and signum == signal.SIGTERM:
            self.received = signum
            raise _StoppedBeforeStart(signum)
        if self._starting:  # SIGINT: what it did before the handlers (KeyboardInterrupt by default)
            previous = self._previous.get(signum)
            if callable(previous):
                previous(signum, frame)
                return
            self._restore()
            signal.raise_signal(signum)
            return
        if self.received is not None:  # asked twice: stop now
            if self.on_second is not None:
                self.on_second()
            self._restore()
            signal.raise_signal(signum)
            return
        self.received = signum
        if signum == signal.SIGINT:
            log.warning("Ctrl-C: stopping after this step (press it again to stop at once)")
        else:
            log.warning(
                "%s: stopping after this step (send it again to stop at once)", signal.Signals(signum).name
            )

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def hand_on(self) -> None:
        """Re-raise the signal received (if any) to the handler that was there before."""
        if self.received is None:
            return
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.raise_signal(self.received)


#: ``featurecache train``'s log when no --log is given (``run_training`` itself writes none unless
#: given a ``log_path``: a caller's cwd is not its to write in; review R35b s49 #11)
TRAIN_LOG = "train_log.json"


@contextlib.contextmanager
def _own_rng(seed: int, dev: torch.device) -> Iterator[None]:
    """torch's global RNG seeded ``seed`` for a run (the CPU generator, which initialises the
    model's weights, and on CUDA the run's device's), the caller's states put back when the block
    ends however it ends (``torch.random.fork_rng``): ``torch.manual_seed`` left a caller's stream
    reseeded (review R35b s49 #11). The run draws the same numbers as it did with
    ``torch.manual_seed(seed)``, which seeded every GPU: the run uses one."""
    cuda = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        torch.random.default_generator.manual_seed(seed)
        for index in cuda:
            with torch.cuda.device(index):
                torch.cuda.manual_seed(seed)
        yield


def run_training(
    store: str | Path | None,
    url: str | None,
    steps: int,
    crop_size: int = 384,
    device: str = "cuda",
    batch_size: int = 1,
    fused: bool = True,
    log_path: str | Path | None = None,
    seed: int = 0,
    workers: int = 4,
    *,
    config: ModelConfig | None = None,
    lr: float = 1e-3,
    clip_grad_norm: float = DEFAULT_CLIP_GRAD_NORM,
    batches: Iterator[dict[str, Any]] | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    pad_multiple: int | None = None,
    compile: bool = False,
    cuda_graphs: bool = False,
    prefetch: bool = True,
    pool: str | None = None,
    checkpoint: str | Path | None = None,
    checkpoint_every: int | None = None,
    resume: str | Path | None = None,
    log_every_s: float = LOG_EVERY_S,
    token: str | None = None,
    max_atoms: int | None = None,
    init_from: str | Path | None = None,
    before_signal: Callable[[dict[str, Any]], None] | None = None,
    service_wait: float | None = None,
    weighting: str = TRAIN_WEIGHTING,
    crop_weights: Sequence[float] = DEFAULT_CROP_WEIGHTS,
    max_msa_rows: int = DEFAULT_MAX_MSA_ROWS,
    pair_msa: bool = True,
    crop_whole_groups: bool = DEFAULT_CROP_WHOLE_GROUPS,
    in_order: bool = False,
    return_steps: bool = True,
    keep_checkpoints: int | None = None,
) -> dict[str, Any]:
    """Train the trunk for ``steps`` optimizer steps; write the JSON log (``log_path``, none by
    default); return it (its ``steps`` read back at the end; ``return_steps`` False: the last record
    only, e.g. for a long run's summary line: the records are not held in memory as the run goes).
    ``seed`` seeds torch's global RNG for the run only (:func:`_own_rng`): the caller's RNG state is
    as it was when the function returns or raises.

    ``fused`` selects the Triton kernels (CUDA only; on CPU the torch references run). On CUDA the
    forward runs under bf16 autocast with fp32 weights. ``batches`` overrides the source (tests).

    ``pad_multiple``: pad each batch's token axis up to a multiple of this, capped at the crop
    (:func:`~featurecache.model.batches.pad_tokens`), so the Triton kernels compile once for
    every crop length instead of once per new length class mid-training (measured on the H200:
    4–9 s stalls at 4 of 60 steps without it). Default: 128 on CUDA, 1 (off) on the CPU.

    ``compile``: run the loss under ``torch.compile`` (the fused kernels stay opaque custom ops;
    inductor fuses the elementwise work around them). Measured on the H200 (run 47,
    ``benchmarks/dev/step_profile.py``): step 26.3 -> 24.2 ms at crop 384 and 102.4 -> 92.6 ms at
    768, after a first step that compiles for 15-25 s (again for each new padded length).

    ``cuda_graphs`` (CUDA only): each step is a replay of a CUDA graph of the whole step
    (:class:`GraphedSteps`), recorded on the first batch of each padded shape; the same updates
    as eager steps without the host's ~900 kernel launches per step. The MSA-row axis is padded to
    a power of two (:func:`~featurecache.model.batches.pad_msa_rows`) so that there are a handful of
    shapes, each recorded once.

    ``prefetch``: fetch, pad and copy the next batch while the GPU runs this step (the loss is read
    after the fetch), so the loader's latency hides behind the step instead of adding to it. Each
    record's ``data_wait_s`` is the time its wall interval spent blocked on the loader (with the
    prefetch: the next batch's fetch), ``exposed_data_wait_s`` the part of it the GPU sat idle
    for (CUDA events: from the end of the GPU's previous work to the batch's arrival; on the CPU
    all of it), which is what ``data_wait_fraction`` sums. Off: fetch, then step, then sync.
    ``compute_s`` runs from issuing the step to reading its loss (with the prefetch it includes
    the next fetch where that outlasts the GPU's work); ``gpu_s`` is the GPU's time on the step.

    ``max_atoms``: the client's atom budget per crop (None, the default: no budget, each crop holds
    ``min(N, crop_size)`` tokens; with one, a crop holds fewer tokens when their atoms exceed it).

    The client's data settings (``FeatureDataset``'s arguments of the same names; recorded in the
    log header and the checkpoints): ``weighting`` (``"af3"``, the default here, :data:`TRAIN_WEIGHTING`:
    AF3's weighted-PDB sampling of chains and interfaces; ``"uniform"``: every entry once per
    epoch, ``FeatureDataset``'s default and train's before session 25), ``crop_weights``
    (contiguous, spatial, spatial-interface; AF3's 0.2 / 0.4 / 0.4 by default; normalized),
    ``max_msa_rows`` (1024), ``pair_msa`` (True: AF3's species pairing) and ``crop_whole_groups``
    (False: per token, as AF3). A ``resume`` with another value of any of them is refused.

    ``pool``: the client's workers, ``"process"`` (default on CUDA) or ``"thread"`` (default on
    the CPU). The client computes ``workers`` samples at once and hands them over ready-first: which
    samples a step trains on, and in which order, then depends on which finishes first, so two runs
    of the same seed see other batches. ``in_order``: in the stream's order instead
    (``FeatureDataset(window=0)``: a sample waits for the slower ones before it), so a run is
    repeatable with any ``workers`` (on the CPU, bitwise; a sample skipped past its deadline still
    depends on timing). Worker threads hold the GIL when the training thread wakes from the loss's
    synchronisation, which then waits up to the interpreter's 5 ms switch interval to run again:
    on the H200 (run 69, ``benchmarks/dev/feed_ab.py``, CUDA graphs, crop 384) 128-token steps
    took 7.7 ms with threads and the prefetch against 4.4 ms with processes (GPU: 4.0 ms), and the
    run's wall-time rate was 6801 against 8401 tokens/s (threads without the prefetch: 5817).

    ``checkpoint``: write a checkpoint (:func:`save_checkpoint`) there every ``checkpoint_every``
    steps and at the end of the run (``checkpoint_every`` None: only at the end); ``{step}`` in the
    path is replaced by the number of steps done, otherwise each checkpoint replaces the last.
    ``keep_checkpoints`` (with ``{step}`` only): after each checkpoint is kept, delete the oldest
    ones this run wrote beyond that many (the log's ``checkpoints`` mark them ``deleted``); never a
    file it did not write (an earlier run's, the ``resume`` or ``init_from`` source).
    ``resume``: start from a checkpoint: its model config (a different ``config`` is refused),
    parameters, optimizer state and data position; ``steps`` counts the checkpoint's steps too, and
    the log's step numbers continue from them. ``lr`` and ``clip_grad_norm`` apply from the resumed
    step on (a different rate than the checkpoint's is warned about, and each step record holds its
    rate; so is a different clip: its default was 1.0 before session 43, and a checkpoint that
    records none clipped at that); a different
    crop or seed is refused (the same batches would not follow), and so is another global batch
    (``batch_size`` × the number of ranks, against the checkpoint's ``world_size``): the same
    global batch on another number of ranks continues with the data positions resharded. When ``log_path`` already holds the
    log of the run being continued (same model config, seed, crop and batch size), its steps before
    the checkpoint are carried over (``steps_from_earlier_log``), so the log covers the whole run;
    a file there that is not that run's log is refused rather than overwritten. A resume on a source
    whose entries are not those of the checkpoint's run (another store, or the store extended or
    pruned since: :func:`source_identity`, recorded in the checkpoint; the same store read locally or
    through its lookup service is the same), whose entries' chains or sampling weights differ (the
    client's stream digest, saved with the data position: a store rebuilt with other
    ``--keep-cryst-aids``), or with another ``max_atoms`` or data setting is refused: its data
    position indexes that run's stream of samples.

    ``init_from``: start a new run (step 0, a fresh optimizer and data stream) from the model
    parameters of a checkpoint, e.g. when the store has grown since it was written; its model config
    is taken (a different ``config`` is refused). Not together with ``resume``.

    The log (``log_path``; ``None``, the default: none; ``featurecache train`` writes
    :data:`TRAIN_LOG` unless told otherwise) is written before the first step, then at most every
    ``log_every_s`` seconds as the run goes (0: after every step), when a checkpoint is kept and at
    the end; each write renames a whole file over it (:class:`_RunLog`: it appends the new steps to
    a twin of the log, ``.NAME.twin`` beside it while the run goes), so a run that is killed leaves
    its last whole log, and a write costs the steps since the last writes, not the whole log. ``status`` says how the run ended: ``running``,
    ``completed``, ``stopped`` (a signal), ``failed`` (``error``: why) or ``interrupted`` (a second
    Ctrl-C, or a ``KeyboardInterrupt`` raised otherwise); ``steps_requested`` is ``steps``.
    Strict JSON: a non-finite loss is null. A non-finite loss at step k stops the run with a
    :class:`TrainingError` naming the step and the last checkpoint kept: it was computed on the
    parameters after step k - 1, so the checkpoint due after step k - 1 is not kept (each checkpoint
    is written beside its path and moved into place once the next step's loss is finite, or the run
    ends first), and no checkpoint is written of non-finite parameters. Each step logs the total
    gradient norm before clipping to ``clip_grad_norm`` (``grad_norm``; ``clipped``: whether it was
    above; the CUDA-graph and compiled steps
    too: the norm is a device tensor read after the step, with the loss); a non-finite one with a
    finite loss stops the run the same way (the step's update already applied it; the checkpoint
    due after step k - 1, whose parameters gave that gradient, is not kept). A failure of the batch source
    (the client's ``LoaderError``, the service or the store unreadable) after some steps ends the run
    with a checkpoint of the steps done (with ``checkpoint``; one rank) and a :class:`TrainingError`
    naming it and the source's error.

    A batch without a pair of tokens the distogram loss supervises (both real, their representative
    atoms resolved: ion-only or one-token entries, crops whose representative atoms are all
    unresolved) is not trained on: decided on the host from the client's batch
    (:func:`~featurecache.model.trunk.supervised_pairs`), so the CUDA-graph and compiled steps are
    simply not run; its record has ``pairs`` 0, a null loss and gradient norm and a ``skip_reason``,
    and it counts toward ``steps`` and the data position (a resume stays bitwise). With several
    ranks a step is skipped when no rank's batch has a pair. The summary's first and last loss are
    of steps that trained (``skipped_steps`` counts the others).

    SIGTERM (SLURM's and torchrun's way to end a job) and SIGINT (Ctrl-C), handled when the run is
    in the main thread, stop the run after its current step: the log and, with ``checkpoint``, a
    checkpoint of the steps done are written, then the signal is handed on to the handler that was
    installed before (by default: SIGTERM ends the process as killed by it, exit status 143;
    SIGINT raises ``KeyboardInterrupt`` from this function). With several ranks they all stop
    after the same step. A second signal stops at once (a second Ctrl-C: ``interrupted``, the log
    only). A SIGTERM before the first step (the store opening, a ``service_wait``, the model being
    built) ends the set-up at once with the warning "stopped by SIGTERM before the first step",
    then is handed on likewise (nothing trained: no checkpoint; an earlier log is left as it was). ``before_signal(doc)`` is called with the log's contents of a run a signal stopped, right
    before the signal is handed on (the CLI prints its summary line there). ``service_wait``
    (``url`` only): seconds to wait for a lookup service that has not answered yet (train
    --service-wait; None: the client's default, :data:`~featurecache.client.http.DEFAULT_FIRST_CONTACT_S`).

    Several ranks (launched by ``torchrun``, or inside a process group the caller started): each
    rank draws its share of the client's stream (synthetic batches: seed + rank); before each
    step the ranks sum how many of their samples have a supervised pair (and their requests to
    stop) in one small all-reduce, and after the backward the gradients and the loss go through
    another, weighed by those counts: the mean over every rank's samples, as one process would take
    it over one batch of them (:func:`_average_gradients`), so every rank takes the same step from
    rank 0's initial parameters; each record's ``world_tokens`` counts
    every rank's tokens (exchanged once, when the run ends: None in ``on_step``). Rank 0 writes
    ``log_path`` and the checkpoints (with every rank's data position), rank r > 0 its log beside it
    (:func:`rank_log_path`). CUDA graphs are refused.

    ``clip_grad_norm``: the total gradient norm each step's gradients are clipped to (AF3's 10 by
    default; :data:`DEFAULT_CLIP_GRAD_NORM`), recorded in the log header and the checkpoints; each
    record says whether its step was clipped (``clipped``), the summary the share of the trained
    steps that were (``clipped_fraction``).

    Arguments it cannot train with (a count below 1, an unknown device or pool, ``lr`` ≤ 0 or
    ``clip_grad_norm`` ≤ 0, a URL
    without http(s)://, a log or checkpoint path that is a directory or cannot be written, a
    checkpoint that is not one) are a :class:`~featurecache.errors.UsageError` naming the option,
    raised before anything is trained; missing parent directories of the paths are created.
    """
    dev = _check_arguments(
        store, url, steps, crop_size, device, batch_size, lr, pad_multiple, cuda_graphs, pool, checkpoint,
        checkpoint_every, log_every_s, seed, workers, clip_grad_norm,
    )  # fmt: skip
    if url is not None:  # the scheme is case-insensitive (RFC 3986 §3.1); the client takes it in lower case
        scheme, sep, rest = str(url).partition("://")
        url = f"{scheme.lower()}{sep}{rest}"
    _check_keep_checkpoints(keep_checkpoints, checkpoint)
    data_settings = _check_data_options(weighting, crop_weights, max_msa_rows, pair_msa, crop_whole_groups)
    client = batches is None and (store is not None or url is not None)  # (synthetic batches have none)
    if fused and dev.type != "cuda":
        log.info("fused Triton kernels need CUDA: running the torch references on %s", dev)
        fused = False
    if resume is not None and init_from is not None:
        raise UsageError(
            "give --resume or --init-from, not both (--init-from starts a new run from a checkpoint's weights)"
        )
    resumed = load_checkpoint(resume) if resume is not None else None
    initial = load_checkpoint(init_from, _INIT_VERB) if init_from is not None else None
    first_step = int(resumed["step"]) if resumed is not None else 0
    if first_step >= steps:
        raise UsageError(
            f"{resume} is at step {first_step}: --steps {steps} (the total) leaves nothing to train"
        )
    cfg = config or ModelConfig()
    if resumed is not None:
        assert resume is not None
        cfg = _resume_config(resume, resumed, config, crop_size, seed, batch_size, max_atoms, _launch_world())
        if client:
            data_settings = _check_data_settings(resume, resumed, data_settings)
    elif initial is not None:
        assert init_from is not None
        cfg = _checkpoint_config(init_from, initial, config, _INIT_VERB)
    if pad_multiple is None:
        pad_multiple = DEFAULT_PAD_MULTIPLE if dev.type == "cuda" else 1
    # the paths, before anything is trained (and before a process group is up)
    rank = _launch_rank()
    log_file = rank_log_path(log_path, rank) if log_path is not None else None
    if log_file is not None:
        _check_output_path(log_file, "--log", TRAIN_LOG)
    if checkpoint is not None and init_from is not None:  # before the probes below write beside it
        _check_init_kept(init_from, checkpoint, checkpoint_every, steps, first_step)
    if checkpoint is not None and rank == 0:
        first_save = (
            first_step + checkpoint_every - first_step % checkpoint_every if checkpoint_every else steps
        )
        for at in sorted({min(first_save, steps), steps}):
            _check_output_path(checkpoint_path(checkpoint, at), "--checkpoint", "ckpt.pt")
    if (checkpoint is not None or resume is not None) and rank == 0:
        _warn_pending(checkpoint, resume)
    carried: list[Any] = []
    carried_checkpoints: list[Any] = []
    carried_segments: list[dict[str, Any]] = []
    if resumed is None and log_file is not None and log_file.is_file() and rank == 0:
        log.warning("%s exists: this new run's log replaces it (give another --log to keep it)", log_file)
    if resumed is not None and log_file is not None and log_file.exists():  # the run it continues
        # the fields of the earlier log that must match for this run to carry its steps over
        same = {"model_config": cfg.to_dict(), "seed": seed, "crop_size": crop_size}
        carried, carried_checkpoints, carried_segments = _earlier_log(
            log_file, first_step, same, data_settings if client else None, batch_size * _launch_world()
        )
        # a record of a log written before records said their rate: the rate the checkpoint's run
        # trained at (review R29b s46 #6), for that run's steps only (from the start of the last
        # segment before this run); an earlier segment's rate is not known: null (review R30 s46 #4)
        ck_lr = _checkpoint_lr(resumed)
        since = carried_segments[-1]["start_step"] if carried_segments else 0
        carried = [r if r.get("lr") is not None or r["step"] < since else {**r, "lr": ck_lr} for r in carried]
    if (
        resume is not None
        and first_step > 0
        and not any(c["step"] >= first_step for c in carried_checkpoints)
    ):
        # the checkpoint this run starts from is one of the run's (an earlier log killed before it
        # recorded it, or none: the log's last line names it, not an older one)
        carried_checkpoints.append({"step": first_step, "path": str(resume)})
    ranks = _Ranks(dev)  # after the checks: a refused run starts no process group
    dev = ranks.device(dev)
    stop = _StopSignals()
    stop.arm()  # a SIGTERM while the run sets up (the store opening, a --service-wait) ends it now
    stopped_before_start = False
    callers_rng = contextlib.ExitStack()  # the caller's global RNG states, back when the run ends
    try:
        if cuda_graphs and ranks.world > 1:
            raise UsageError(
                "CUDA graphs with several ranks are not supported: each rank records a graph when its own "
                "batch shape is new, and a recording's warm-up steps would run all-reduces the other ranks "
                "do not; train with several ranks without --cuda-graphs"
            )
        callers_rng.enter_context(_own_rng(seed, dev))
        model = Trunk(cfg, fused=fused).to(dev)
        if initial is not None:  # its weights only: the optimizer and the data stream start afresh
            assert init_from is not None
            _load_weights(model, init_from, initial, _INIT_VERB)
            log.info("starting from the weights of %s (its step %d), a new run", init_from, initial["step"])
        if ranks.world > 1 and resumed is None:  # every rank starts from rank 0's parameters
            for t in model.state_dict().values():
                dist.broadcast(t, 0)
        opt = make_optimizer(model, lr, capturable=cuda_graphs)
        if resumed is not None:  # before any graph is recorded: the graphs read these very tensors
            assert resume is not None
            _load_weights(model, resume, resumed, "resume from")
            opt.load_state_dict(resumed["optimizer"])
            for group in opt.param_groups:
                group["lr"] = lr
            _note_clip_change(resume, resumed, clip_grad_norm, first_step)
            _note_lr_change(resume, resumed, lr, first_step)
        loss_fn = torch.compile(model.loss) if compile else model.loss
        graphed = GraphedSteps(model, opt, loss_fn, clip_norm=clip_grad_norm) if cuda_graphs else None
        if pool is None:
            pool = "process" if dev.type == "cuda" else "thread"
        data_state = None
        if resumed is not None:  # one data position per rank of the run that wrote it
            saved = resumed["data"]["ranks"]
            if len(saved) != ranks.world:
                saved = _resharded(saved, ranks.world, resume)
            data_state = saved[ranks.rank]
        if batches is not None:
            src = BatchSource(batches, "given")
        else:
            if resumed is not None and data_state is None:
                log.warning(
                    "%s holds no data position: the batches start from the stream's beginning", resume
                )
            src = make_batches(store, url, crop_size, batch_size, seed, workers, pool, state=data_state,
                               rank=ranks.rank, token=token, max_atoms=max_atoms, service_wait=service_wait,
                               data_options=data_settings, in_order=in_order,
                               resume_from=(resume, resumed) if resumed is not None and resume is not None else None)  # fmt: skip
            if dev.type == "cpu":
                try:
                    _check_cpu_memory(cfg, src.largest_entry, crop_size, batch_size)
                except UsageError:
                    src.close()
                    raise
        source = _shown_source(src.name)  # what the log, the checkpoints and stderr show: no password
        if resumed is not None:  # (an older featurecache's checkpoint holds its URL as given)
            log.info("resuming from %s at step %d (its source: %s)", resume, first_step,
                     _shown_source(resumed.get("source")))  # fmt: skip
        if carried:
            log.info("%s: keeping the %d steps before step %d of the run this one continues", log_file,
                     len(carried), first_step)  # fmt: skip
        gap = _missing_steps(carried, first_step) if log_file is not None and log_file.exists() else []
        if gap:
            log.warning("%s holds no record of steps %s of the run this one continues (the run that wrote it "
                        "ended between two writes of its log); the log goes on from step %d", log_file,
                        _ranges(gap), first_step)  # fmt: skip
        cuda = dev.type == "cuda"
        log.info("training %d steps, crop %d, batch %d, %s, fused=%s, compiled=%s, CUDA graphs=%s, source %s", steps,
                 crop_size, batch_size, dev, fused, compile, cuda_graphs, source)  # fmt: skip

        doc: dict[str, Any] = {
            "source": source, "device": str(dev), "fused": fused, "crop_size": crop_size, "max_atoms": max_atoms,
            **(data_settings if client else dict.fromkeys(data_settings)), "batch_size": batch_size,
            "seed": seed, "lr": lr, "clip_grad_norm": clip_grad_norm, "pad_multiple": pad_multiple, "compiled": compile,
            "cuda_graphs": cuda_graphs, "prefetch": prefetch, "pool": pool if client else None,
            "workers": workers if client else None, "in_order": in_order if client else None,
            "model_config": cfg.to_dict(), "resumed_from": str(resume) if resume is not None else None,
            "initialized_from": str(init_from) if init_from is not None else None,
            "start_step": first_step, "steps_requested": steps, "steps_from_earlier_log": len(carried),
            "checkpoints": carried_checkpoints,
            "checkpoint": str(checkpoint) if checkpoint is not None else None, "checkpoint_every": checkpoint_every,
            "keep_checkpoints": keep_checkpoints,
            "world_size": ranks.world, "rank": ranks.rank, **_code_identity(), "torch": torch.__version__,
            "segments": [*carried_segments, {"start_step": first_step, **_code_identity()}],
            "featurizer_versions": src.featurizer_versions,
            "gpu": torch.cuda.get_device_name(dev) if cuda else None, "status": "running", "stop_signal": None,
            "error": None, "fields": LOG_FIELDS,
        }  # fmt: skip
        meta = {"model_config": cfg.to_dict(), "source": source, "seed": seed, "crop_size": crop_size,
                "batch_size": batch_size, "world_size": ranks.world, "lr": lr, "clip_grad_norm": clip_grad_norm, "fused": fused,
                "max_atoms": max_atoms, "workers": workers if client else None,
                **(data_settings if client else {}),
                "source_identity": src.identity, "featurizer_versions": src.featurizer_versions, **_code_identity(),
                "initialized_from": str(init_from) if init_from is not None else None}  # fmt: skip
        feed = _Feed(
            src.batches, lambda raw: _prepare(raw, dev, pad_multiple, crop_size, cuda_graphs), src.state
        )
        # the records: in the log (and its summary), not in memory (review R34a s48 #1)
        runlog = _RunLog(log_file, doc, log_every_s, carried, keep_steps=return_steps)
        carried = []
        saved_at = first_step  # the steps done of the last checkpoint kept (the resumed one's: the start)
        kept_here = 0  # checkpoints this run kept
        # (--keep-checkpoints) the log's entries of those not deleted, with the files' identities as kept
        written_here: list[tuple[dict[str, Any], tuple[int, int] | None]] = []
        # A checkpoint due after step k is written beside its path (``_staged_path``) and moved into
        # place once step k+1's loss, computed on its parameters, is finite (or the run ends first):
        # the loss of step k+1 is the first sign that the update of step k diverged, and a checkpoint
        # holding such parameters fails again at once when resumed, whatever the --lr. A step skipped
        # for want of a supervised pair computes no loss: the checkpoints staged before it wait on
        # (the parameters are the same; a checkpoint after it is staged beside them).
        staged: list[tuple[int, Path]] = []

        def save(done: int, position: dict[str, Any] | None, vouched: bool) -> None:
            nonlocal staged
            assert checkpoint is not None
            path = checkpoint_path(checkpoint, done)
            if vouched:  # the run ends here: the staged ones are kept first, as on any other end
                commit()
            if not _finite_parameters(model):  # every rank has the same parameters: all refuse alike
                discard()
                raise TrainingError(
                    f"the parameters after step {done - 1} are not finite: training diverged (a lower --lr?); "
                    f"not checkpointed; {last_good(done)}"
                )
            data = {"ranks": ranks.gather(position)}
            target = path if vouched else _staged_path(path)
            if ranks.rank == 0:  # the ranks' parameters and optimizer states are equal
                try:
                    save_checkpoint(target, step=done, model=model, opt=opt, data=data, meta=meta)
                except OSError as exc:
                    raise TrainingError(f"cannot write the checkpoint {path}: {exc.strerror or exc}") from exc
                if vouched:
                    log.info("checkpoint after step %d (%d steps done): %s", done - 1, done, path)
                else:
                    log.info("checkpoint after step %d (%d steps done) staged as %s: moved to %s once step %d's "
                             "loss is finite or the run ends", done - 1, done, target, path, done)  # fmt: skip
            if vouched:
                keep(done, path)
            else:  # one without {step} in its name replaced the one staged at the same path
                staged = [(d, p) for d, p in staged if p != path] + [(done, path)]

        def keep(done: int, path: Path) -> None:
            nonlocal saved_at, kept_here
            entry = {"step": done, "path": str(path)}
            doc["checkpoints"].append(entry)
            saved_at, kept_here = done, kept_here + 1
            if keep_checkpoints is not None and ranks.rank == 0:
                written_here.append((entry, _file_identity(path)))
                while len(written_here) > keep_checkpoints:
                    old_entry, identity = written_here.pop(0)
                    _delete_checkpoint(old_entry, (resume, init_from), identity)
            runlog.now()  # the log never lags behind a checkpoint (it did by up to log_every_s of steps)

        def commit() -> None:
            """Move the staged checkpoints into place: their parameters gave a finite loss, or the run ends."""
            nonlocal staged
            waiting, staged = staged, []
            for done, path in waiting:
                if ranks.rank == 0:
                    try:
                        os.replace(_staged_path(path), path)
                    except OSError as exc:
                        raise TrainingError(
                            f"cannot write the checkpoint {path}: {exc.strerror or exc}"
                        ) from exc
                    log.info("kept the checkpoint after step %d (%d steps done): %s", done - 1, done, path)
                keep(done, path)

        def commit_on_end(exc: BaseException) -> None:
            """The run ends on ``exc`` (an interrupt, an error other than a non-finite loss): the staged
            checkpoint's parameters were checked finite when it was written, so it is kept; a failure to
            move it is logged, not raised over ``exc``."""
            try:
                commit()
            except BaseException as during:  # a second Ctrl-C included: exc is what ends the run
                log.error("%s; then: %s", _first_line(exc), _first_line(during))

        def commit_on_second_signal() -> None:
            """A second SIGTERM ends the process at once (no exception to catch): keep the staged one first."""
            try:
                commit()
            except Exception as exc:  # in a signal handler: the signal must still be handed on
                log.error("%s", _first_line(exc))

        stop.on_second = commit_on_second_signal

        def discard() -> None:
            nonlocal staged
            if ranks.rank == 0:
                for _, path in staged:
                    _staged_path(path).unlink(missing_ok=True)
            staged = []

        def last_good(step: int) -> str:
            """Where to go on from after the parameters used by ``step`` (those after step - 1) diverged."""
            if kept_here:
                ck = doc["checkpoints"][-1]
                return (
                    f"the last checkpoint kept is {ck['path']} (after step {ck['step'] - 1}, its parameters gave a "
                    f"finite loss): continue from it with {resume_arguments(doc, ck['path'], steps, log_path, lr=False)} "
                    "and a lower --lr"
                )
            if resumed is not None and step > first_step:
                return (
                    f"no checkpoint was kept since this run resumed from {resume} (step {first_step}): continue "
                    f"from it with a lower --lr"
                )
            if resumed is not None:
                return (
                    f"the parameters it was computed on are those of {resume}, which this run resumed from: "
                    "resume from an earlier checkpoint, or start again with a lower --lr"
                )
            if checkpoint is not None:
                return "no checkpoint was kept before it: start again with a lower --lr"
            return "start again with a lower --lr"

        def data_failure(cause: Exception) -> Exception:
            """What to raise when the batch source fails after the steps done: the model is intact, so
            those steps are checkpointed (with ``checkpoint``, on one rank) and the error names it. A
            service that refused the token mid-run (restarted with a rotated one) gets the advice a
            refusal at the first contact gets."""
            if isinstance(cause, LoaderError) and cause.error_class == "AuthenticationError":
                cause = LoaderError(f"{_first_line(cause)}; {_token_advice(token)}", cause.error_class)
            done = first_step + runlog.added
            commit()  # the run ends here: no next loss will vouch for it
            if checkpoint is None or done == first_step:
                return cause
            if (
                ranks.world > 1
            ):  # the other ranks wait in the step's all-reduces: no collective to gather with
                kept = f"; the last checkpoint is {doc['checkpoints'][-1]['path']}" if kept_here else ""
                return TrainingError(
                    f"{_first_line(cause)} (several ranks: no checkpoint of the steps done{kept})"
                )
            if saved_at < done:
                save(done, position, vouched=True)
            path = doc["checkpoints"][-1]["path"]
            if isinstance(cause, FeaturizerChanged):  # other features from now on: not a resume on them
                return TrainingError(
                    f"{_first_line(cause)}; the {done} steps done are checkpointed in {path}: "
                    + _START_ANEW.format(ck=path)
                    + f", or {resume_arguments(doc, path, steps, log_path)} once a store of the run's featurizer "
                    "is served"
                )
            return TrainingError(
                f"{_first_line(cause)}; the {done} steps done are checkpointed in {path}: continue with "
                f"{resume_arguments(doc, path, steps, log_path)} once the source serves again"
            )

        position: dict[str, Any] | None = None
        status = "failed"
        try:
            runlog.start()
            stopped = False
            with stop:
                t_prev = time.perf_counter()
                pending = _fetch(feed)
                for step in range(first_step, steps):
                    if isinstance(pending, _SourceFailed):  # raised now: after the step before it is done
                        raise pending
                    if pending is None:
                        log.warning("the batch source ended after %d steps", step)
                        break
                    raw, batch, position = pending
                    pending = None
                    # read on the host from the client's batch: a batch without a supervised pair is
                    # not trained on (no forward, backward or optimizer step: AdamW's momentum and
                    # weight decay would move every parameter on no data), which the CUDA-graph and
                    # compiled steps could not decide from device values
                    pairs = supervised_pairs(raw)
                    skip_reason = None if sum(pairs) else NO_PAIRS
                    # several ranks: each one's samples with a supervised pair (the weights of their
                    # gradients) and request to stop, summed, so that all stop after the same step
                    # and all skip a step none of them has a pair for
                    share: tuple[int, int] | None = None
                    votes = 0
                    if ranks.world > 1:
                        mine = sum(1 for n in pairs if n)
                        total, votes = ranks.sum([mine, int(stop.requested)], dev)
                        share = (mine, total)
                        skip_reason = None if total else NO_PAIRS_ON_ANY_RANK
                    t_issue = time.perf_counter()
                    if cuda:
                        torch.cuda.reset_peak_memory_stats(dev)
                        start, end = (
                            torch.cuda.Event(enable_timing=True),
                            torch.cuda.Event(enable_timing=True),
                        )
                        start.record()
                    if skip_reason is None:
                        loss, grad_norm = (
                            graphed.step(batch)
                            if graphed is not None
                            else _train_step(model, opt, loss_fn, batch, share, clip_grad_norm)
                        )
                    if cuda:
                        end.record()
                    last = step + 1 == steps  # (global step numbers: a resumed run continues the count)
                    if prefetch and not last:
                        pending = _fetch(feed, behind=end if cuda else None)  # while the GPU runs this step
                    loss_value = norm_value = math.nan
                    if skip_reason is None:
                        loss_value = float(loss.item())  # synchronises (with several ranks: their mean)
                        norm_value = float(grad_norm.item())  # computed before the loss was read: no wait
                    tokens = int(raw["token_mask"].sum())
                    if cuda:
                        torch.cuda.synchronize(dev)
                    t_end = time.perf_counter()
                    wait, exposed = feed.settle()
                    peak = torch.cuda.max_memory_allocated(dev) if cuda else None
                    if graphed is not None:  # a replay allocates nothing: its recording's peak is the step's
                        peak = max(peak or 0, graphed.peak_bytes(batch) or 0)
                    finite = math.isfinite(loss_value) or skip_reason is not None
                    finite_norm = math.isfinite(norm_value) or skip_reason is not None
                    rec = {
                        "step": step, "step_time_s": t_end - t_prev, "data_wait_s": wait, "exposed_data_wait_s": exposed,
                        "compute_s": t_end - t_issue, "gpu_s": start.elapsed_time(end) / 1e3 if cuda else None,
                        "loss": loss_value if math.isfinite(loss_value) else None,
                        "grad_norm": norm_value if math.isfinite(norm_value) else None, "lr": lr,
                        "clipped": norm_value > clip_grad_norm if skip_reason is None else None,
                        "skip_reason": skip_reason, "peak_mem_bytes": peak, "pairs": sum(pairs),
                        "tokens": tokens, "world_tokens": tokens if ranks.world == 1 else None, "padded_tokens": int(batch["token_mask"].shape[1]),
                        "msa_rows": int(batch["msa"].shape[1]), "graphs": len(graphed) if graphed is not None else None,
                        "entry_ids": raw.get("entry_id"), "positions": _int_list(raw.get("position")),
                        "crop_methods": _str_list(raw.get("crop_method")),
                        # the client's ready-first stats for this batch (absent for synthetic batches)
                        "reorder_depth": _int_list(raw.get("reorder_depth")),
                        "skipped": len(raw.get("skipped") or []),
                    }  # fmt: skip
                    runlog.add(rec)
                    if skip_reason is None:
                        log.info("step %d  loss %.4f  grad norm %.4g%s  step %.3fs  data wait %.3fs (exposed %.3fs)  "
                                 "tokens %d  pairs %d", step, loss_value, norm_value,
                                 " (clipped)" if rec["clipped"] else "", rec["step_time_s"], wait, exposed,
                                 rec["tokens"], rec["pairs"])  # fmt: skip
                    else:
                        log.info("step %d  skipped: %s  step %.3fs  data wait %.3fs (exposed %.3fs)  tokens %d  "
                                 "entries %s", step, skip_reason, rec["step_time_s"], wait, exposed, rec["tokens"],
                                 rec["entry_ids"])  # fmt: skip
                    # the loss is computed on the parameters after step - 1: a checkpoint of them is not kept
                    if not finite:
                        discard()
                        raise TrainingError(
                            f"the loss is {loss_value} at step {step}: training diverged (a lower --lr?); "
                            f"{last_good(step)}"
                        )
                    # a finite loss with a non-finite gradient: the same policy. This step's update
                    # applied it (the check is after the step: a host synchronisation inside it would
                    # stall the prefetch and cannot be recorded in a CUDA graph), so its parameters
                    # are never checkpointed; nor are those after step - 1 that gave the gradient
                    if not finite_norm:
                        discard()
                        log.warning("step %d: the gradient norm is %s (the loss %.4g is finite): stopping",
                                    step, norm_value, loss_value)  # fmt: skip
                        raise TrainingError(
                            f"the gradient norm is {norm_value} at step {step} (its loss, {loss_value:.4g}, is "
                            f"finite): training diverged (a lower --lr?); {last_good(step)}"
                        )
                    if skip_reason is None:
                        commit()  # the staged checkpoints' parameters gave this step a finite loss and gradient
                    runlog.step()
                    if on_step is not None:
                        on_step(rec)
                    t_prev = t_end
                    if checkpoint is not None and (
                        last or (checkpoint_every and (step + 1) % checkpoint_every == 0)
                    ):
                        save(step + 1, position, vouched=last)
                    stopped = votes > 0 if share is not None else stop.requested
                    if stopped and not last:
                        log.warning("stopping after step %d (%d steps done) on a signal", step, step + 1)
                        break
                    if not prefetch and not last:
                        pending = _fetch(feed)
                done = first_step + runlog.added
                commit()  # the run ends here: no next loss will vouch for it
                if checkpoint is not None and saved_at < done:  # the source ended early, or a signal came
                    save(done, position, vouched=True)
            if ranks.world > 1:  # once per run, not a collective per step: every rank's tokens
                per_rank = ranks.gather(runlog.this_run_tokens())
                runlog.world_tokens([sum(counts) for counts in zip(*per_rank, strict=True)])
            status = "stopped" if stopped and done < steps else "completed"
        except _StoppedBeforeStart:  # (while the first log was written: a log of no steps, stopped)
            status = "stopped"
            raise
        except KeyboardInterrupt as interrupt:
            status, doc["error"] = "interrupted", "KeyboardInterrupt"
            commit_on_end(interrupt)
            raise
        except _SourceFailed as failed:
            try:
                exc = data_failure(failed.cause)
            except BaseException as during:  # the checkpoint could not be written: say both
                doc["error"] = f"{_first_line(failed.cause)}; then: {_first_line(during)}"
                raise TrainingError(doc["error"]) from failed.cause
            doc["error"] = _first_line(exc)
            if exc is failed.cause:
                raise exc from None
            raise exc from failed.cause
        except BaseException as exc:
            doc["error"] = _first_line(exc)
            commit_on_end(exc)  # a non-finite loss or non-finite parameters discarded it already
            raise
        finally:
            src.close()
            doc["status"] = status
            if stop.received is not None:
                doc["stop_signal"] = signal.Signals(stop.received).name
            runlog.finish(raise_errors=status in ("completed", "stopped"), keep_steps=return_steps)
            log.debug("log %s: %d writes, %.3f s in all", log_file, runlog.writes, runlog.write_s)
    except _StoppedBeforeStart:
        stopped_before_start = True
    finally:
        stop.disarm()
        ranks.stop()
        callers_rng.close()
    if stopped_before_start:
        assert stop.received is not None
        name = signal.Signals(stop.received).name
        log.warning("stopped by %s before the first step", name)
        stop.hand_on()  # the signal's own effect (the default: the process ends, status 143), now
        return {"status": "stopped", "stop_signal": name, "start_step": first_step, "steps_requested": steps,
                "steps": [], "summary": {"steps": 0}}  # fmt: skip
    if stop.received is not None and before_signal is not None:
        before_signal(doc)  # e.g. the CLI's summary line: SIGTERM's default effect ends the process
    stop.hand_on()  # the signal's own effect (the default: the process ends, status 143), now
    return doc


#: MSA rows assumed by the CPU memory check (the client samples at most this many per step)
CPU_CHECK_MSA_ROWS = 1024
#: the share of the memory available now that a CPU step may take
CPU_MEMORY_SHARE = 0.9


def _available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (``MemAvailable``), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _check_cpu_memory(cfg: ModelConfig, largest_entry: int | None, crop_size: int, batch_size: int) -> None:
    """Refuse a CPU run whose step cannot fit in the machine's memory, before anything is trained.

    On the CPU the torch references run in fp32 (no autocast); their peak grows with N² per
    attention head and step (the memory planner's ledger, :func:`featurecache.plan.memory.estimate_step`,
    checked against traced CPU steps in ``tests/plan/test_memory.py``): 0.9 GiB at 96 tokens, 8.9 at
    256, 25.7 at 384 with the default model. N is the crop, or the source's largest entry
    (``largest_entry``, from the index the client already read) when that is smaller. Without the
    check such a run is killed by the kernel's OOM killer mid-run, its log left saying ``running``."""
    available = _available_memory()
    if available is None:
        return
    from featurecache.plan.ledger import Precision
    from featurecache.plan.memory import estimate_step, max_tokens_within

    n = min(crop_size, largest_entry) if largest_entry else crop_size
    fp32 = Precision.fp32()
    need = estimate_step(cfg, n, CPU_CHECK_MSA_ROWS, batch_size, fused=False, precision=fp32,
                         overhead_bytes=0).peak_bytes  # fmt: skip
    budget = int(available * CPU_MEMORY_SHARE)
    if need <= budget:
        return
    fits = max_tokens_within(budget, cfg, CPU_CHECK_MSA_ROWS, batch_size, fused=False, precision=fp32)
    gib = 2**30
    raise UsageError(
        f"--crop {crop_size} on the CPU: a step of {n} tokens (batch {batch_size}) with the torch references "
        f"(fp32) needs about {need / gib:.1f} GiB (featurecache.plan's prediction), and {available / gib:.1f} GiB "
        f"is available; give --crop {fits} or less"
        + (" or a smaller --batch-size" if batch_size > 1 else "")
        + ", or train on a GPU (--device cuda)"
    )


def _check_arguments(store: str | Path | None, url: str | None, steps: int, crop_size: int, device: str,
                     batch_size: int, lr: float, pad_multiple: int | None, cuda_graphs: bool, pool: str | None,
                     checkpoint: str | Path | None, checkpoint_every: int | None,
                     log_every_s: float, seed: int = 0, workers: int = 1,
                     clip_grad_norm: float = DEFAULT_CLIP_GRAD_NORM) -> torch.device:  # fmt: skip
    """The training device; an argument ``run_training`` cannot train with is a :class:`UsageError`
    naming the option (the CLI's: exit status 2)."""
    if steps < 1:
        raise UsageError(f"steps (--steps) must be ≥ 1; got {steps}")
    if crop_size < 2:
        raise UsageError(f"crop_size (--crop) must be ≥ 2 tokens; got {crop_size}")
    if batch_size < 1:
        raise UsageError(f"batch_size (--batch-size) must be ≥ 1; got {batch_size}")
    if not 0 <= seed < 2**32:  # the client's SeedSequence keys alias above (review R41b s51 #2)
        raise UsageError(f"seed (--seed) must be ≥ 0 and < 2**32 ({2**32}); got {seed}")
    if workers < 1:
        raise UsageError(f"workers (--workers) must be ≥ 1; got {workers}")
    if not isinstance(lr, int | float) or not math.isfinite(lr) or lr <= 0:
        raise UsageError(f"lr (--lr) must be a finite number > 0; got {lr}")
    if (
        isinstance(clip_grad_norm, bool)
        or not isinstance(clip_grad_norm, int | float)
        or not math.isfinite(clip_grad_norm)
        or clip_grad_norm <= 0
    ):
        raise UsageError(
            f"clip_grad_norm (--clip-grad-norm) must be a finite number > 0; got {clip_grad_norm}"
        )
    if pad_multiple is not None and pad_multiple < 1:
        raise UsageError(f"pad_multiple (--pad-multiple) must be ≥ 1; got {pad_multiple}")
    if checkpoint_every is not None and checkpoint is None:
        raise UsageError(
            "checkpoint_every (--checkpoint-every) needs a checkpoint path (checkpoint, --checkpoint)"
        )
    if checkpoint_every is not None and checkpoint_every < 1:
        raise UsageError(f"checkpoint_every (--checkpoint-every) must be ≥ 1 step; got {checkpoint_every}")
    if pool is not None and pool not in POOLS:
        raise UsageError(f"pool (--pool) {pool!r}: must be one of {', '.join(POOLS)}")
    if store is not None and url is not None:
        raise UsageError("give one of store (--store) or url (--url), not both")
    if url is not None and not str(url).lower().startswith(("http://", "https://")):  # HTTPS:// too
        raise UsageError(
            f"url (--url) {redact_url(str(url))!r}: must start with http:// or https:// (a local store is --store)"
        )
    if not log_every_s >= 0:
        raise UsageError(f"log interval must be ≥ 0 s; got {log_every_s}")
    dev = _check_device(device)
    if cuda_graphs and dev.type != "cuda":
        raise UsageError("CUDA graphs need --device cuda")
    return dev


def _check_data_options(weighting: str, crop_weights: Sequence[float], max_msa_rows: int, pair_msa: bool,
                        crop_whole_groups: bool) -> dict[str, Any]:  # fmt: skip
    """The client's data settings of a run as it records them (log header, checkpoint) and passes
    them to ``FeatureDataset``: the crop weights normalized to sum 1, as the client uses them. A
    value it cannot train with is a :class:`UsageError` naming the option (exit status 2)."""
    if weighting not in WEIGHTINGS:
        raise UsageError(f"weighting (--weighting) {weighting!r}: must be one of {', '.join(WEIGHTINGS)}")
    try:
        w = [float(v) for v in crop_weights]
    except (TypeError, ValueError):
        w = []
    # a finite sum too: 1e308,1e308,1e308 sums to inf, which would normalize to 0,0,0
    if len(w) != 3 or not all(math.isfinite(v) and v >= 0 for v in w) or not 0 < sum(w) < math.inf:
        given = ",".join(repr(v) for v in w) if w else repr(crop_weights)
        raise UsageError(
            f"crop_weights (--crop-weights) {given}: must be 3 finite non-negative numbers (contiguous, spatial, "
            "spatial-interface) with a positive, finite sum, e.g. 0.2,0.4,0.4"
        )
    if isinstance(max_msa_rows, bool) or not isinstance(max_msa_rows, int) or max_msa_rows < 1:
        raise UsageError(
            f"max_msa_rows (--max-msa-rows) must be ≥ 1 (the query row counts); got {max_msa_rows}"
        )
    total = sum(w)
    return {"weighting": weighting, "crop_weights": [v / total for v in w], "max_msa_rows": max_msa_rows,
            "pair_msa": bool(pair_msa), "crop_whole_groups": bool(crop_whole_groups)}  # fmt: skip


def _int_list(value: Any) -> list[int] | None:
    """A tensor / array / list / scalar of ints as a list (None stays None)."""
    if value is None:
        return None
    if hasattr(value, "tolist"):
        value = value.tolist()
    return [int(v) for v in value] if isinstance(value, list | tuple) else [int(value)]


def _str_list(value: Any) -> list[str] | None:
    """A list of strings as a list of ``str`` (None stays None)."""
    return None if value is None else [str(v) for v in value]


#: a step slower than this many median steps is listed in ``slow_steps`` (in practice: a Triton
#: compilation for a new specialisation, e.g. a crop length that changes a divisibility flag)
SLOW_STEP_FACTOR = 3.0


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Median step / compute / data-wait time after the warm-up steps, and the data-wait fraction;
    the first and last loss of the steps that trained, how many steps were skipped (no supervised
    pair: ``skip_reason``) and the share of the trained ones whose gradients were clipped.

    ``data_wait_fraction``: the share of wall time the step waited for data with nothing else to
    do (the exposed waits; all of it without the prefetch); ``loader_wait_fraction``: the share the
    host spent blocked on the loader, hidden or not.

    ``tokens_per_s`` is tokens over wall time of the timed steps, so one-off stalls count
    (``world_tokens_per_s``: the tokens of all ranks' steps over this rank's wall time);
    ``median_tokens_per_s`` is the steady-state rate; ``slow_steps`` lists the steps (0-based) that
    took more than ``SLOW_STEP_FACTOR`` median steps, which explains a gap between the two."""
    summary = _Summary()
    for r in records:
        summary.add(r)
    return summary.result()


#: the options of a run (log key, train option) a resume is refused without when they differ from
#: train's defaults (:func:`_resume_config`, :func:`_check_data_settings`), then --lr and
#: --clip-grad-norm (not checked: a resume applies its own, the default unless given)
_RESUMED_OPTIONS: tuple[tuple[str, str], ...] = (
    ("crop_size", "--crop"), ("seed", "--seed"), ("batch_size", "--batch-size"), ("max_atoms", "--max-atoms"),
    *((key, option) for key, option, _ in _DATA_SETTINGS), ("lr", "--lr"), ("clip_grad_norm", "--clip-grad-norm"),
)  # fmt: skip


def resume_arguments(doc: dict[str, Any], ck: str | Path, steps: int, log_path: str | Path | None = None,
                     lr: bool = True) -> str:  # fmt: skip
    """The arguments of ``featurecache train`` that continue the run logged in ``doc`` from its
    checkpoint ``ck`` to ``steps`` steps: ``--resume CK --steps N``, then each option a resume
    checks against the checkpoint whose value differs from train's default (a resume without it is
    refused), ``--lr`` likewise (``lr`` False: the caller says which rate to take) and
    ``--clip-grad-norm``, the run's ``--workers`` where it is not the default (with one worker, or
    ``--in-order``, the resume is bitwise; the default's four hand samples over ready-first),
    ``--in-order`` when the run used it, and the run's source (``--store`` or ``--url``; its token
    is never shown), ``--device cpu``, ``--log`` (the run's log, ``log_path``, where it is not the
    default; rank 0's) and the run's ``--checkpoint`` / ``--checkpoint-every`` (the steps after the
    resume go on being checkpointed as before: without them the line trained on with no checkpoint
    at all; review R13 s39 L3) so that the line runs as it is. A run of several ranks is continued
    on as many: the line is then a whole ``torchrun --nproc-per-node W -m featurecache.cli train``
    command, its log given as ``--log-file`` (torchrun takes ``--log`` for its own ``--log-dir``)."""
    import shlex

    defaults = {name: p.default for name, p in inspect.signature(run_training).parameters.items()}
    args = [f"--resume {shlex.quote(str(ck))}", f"--steps {steps}"]
    for key, option in _RESUMED_OPTIONS:
        value, default = doc.get(key), defaults[key]  # (the log's keys are run_training's parameters)
        if (key == "lr" and not lr) or (value is None and default is not None):  # synthetic: no data settings
            continue
        if not _same_data_setting(key, value, list(default) if key == "crop_weights" else default):
            args.append(_option_value(option, value))
    workers = doc.get("workers")
    if isinstance(workers, int) and workers != defaults["workers"]:
        args.append(f"--workers {workers}")
    if doc.get("in_order"):
        args.append("--in-order")
    source = doc.get("source")
    if isinstance(source, str) and source not in ("synthetic", "given"):
        url = "://" in source
        args.append(f"{'--url' if url else '--store'} {shlex.quote(redact_url(source) if url else source)}")
    if str(doc.get("device", "")).startswith("cpu"):
        args.append("--device cpu")
    world = doc.get("world_size")
    world = world if isinstance(world, int) and not isinstance(world, bool) else 1
    # (another rank's log is NAME.rank<r>.json of rank 0's --log, which rank 0's line names)
    if log_path is not None and Path(log_path) != Path(TRAIN_LOG) and not doc.get("rank"):
        args.append(f"{'--log-file' if world > 1 else '--log'} {shlex.quote(str(log_path))}")
    if isinstance(doc.get("checkpoint"), str):
        args.append(f"--checkpoint {shlex.quote(doc['checkpoint'])}")
        if isinstance(doc.get("checkpoint_every"), int):
            args.append(f"--checkpoint-every {doc['checkpoint_every']}")
        if isinstance(doc.get("keep_checkpoints"), int):
            args.append(f"--keep-checkpoints {doc['keep_checkpoints']}")
    if world > 1:  # on as many ranks: on fewer or more the global batch would change (refused)
        return f"torchrun --nproc-per-node {world} -m featurecache.cli train {' '.join(args)}"
    return " ".join(args)


def describe_run(doc: dict[str, Any], log_path: str | Path | None = None) -> str:
    """One line on how a run (its log ``doc``) went, for the end of ``featurecache train``: how it
    ended, its steady rate, the data wait, the loss, where the log and the last checkpoint are, and
    (a run that did not complete) how to continue it. Rank r > 0 of several (``doc``'s ``rank``):
    its rank instead of the checkpoint and the way to continue, which rank 0 wrote and its line says."""
    from featurecache.report.timeline import unfinished

    records = doc.get("steps") or []
    last_step = records[-1].get("step") if records and isinstance(records[-1], dict) else None
    # the steps the run has done: a resumed run's log may lack some (an earlier log written before
    # them), so the last record's number counts them, not the number of records
    n = last_step + 1 if isinstance(last_step, int) else len(records)
    requested = doc.get("steps_requested")
    status = doc.get("status")
    # the report's words for a run that did not complete
    parts = [unfinished(doc, n) or f"trained {n} step{'' if n == 1 else 's'}"]
    start = doc.get("start_step")
    if isinstance(start, int) and 0 < start <= n:
        parts[0] += f" ({n - start} in this run, resumed at step {start})"
    s = doc.get("summary") or {}
    if s.get("median_step_time_s") is not None:
        rate = s.get("median_tokens_per_s")
        parts.append(
            f"median step {s['median_step_time_s'] * 1e3:.1f} ms"
            + (f" ({rate:.0f} tokens/s)" if rate is not None else "")
            + f", data wait {100 * s.get('data_wait_fraction', 0.0):.1f} % of step time"
        )
    first, last = s.get("first_loss"), s.get("last_loss")
    if isinstance(first, float) and isinstance(last, float):
        parts.append(f"loss {first:.3f} -> {last:.3f}")
    frac = s.get("clipped_fraction")
    if isinstance(frac, float):
        parts.append(f"gradients clipped on {100 * frac:.0f} % of the steps trained")
    skipped = s.get("skipped_steps")
    if isinstance(skipped, int) and skipped:
        parts.append(f"{skipped} step{'' if skipped == 1 else 's'} skipped (no supervised distogram pair)")
    if log_path is not None:
        parts.append(f"log {log_path}")
    checkpoints = [c for c in doc.get("checkpoints") or [] if isinstance(c, dict)]
    rank, world = doc.get("rank"), doc.get("world_size")
    if isinstance(rank, int) and rank > 0:  # rank 0 alone writes the checkpoints, and its line names them
        parts.append(
            f"rank {rank} of {world}"
            + (
                " (rank 0 wrote the checkpoints; its line names them and how to continue)"
                if checkpoints
                else ""
            )
        )
    elif checkpoints:
        ck, ck_steps = checkpoints[-1].get("path"), checkpoints[-1].get("step")
        behind = n - ck_steps if isinstance(ck_steps, int) and ck_steps < n else 0
        parts.append(
            f"checkpoint {ck}"
            + (f" (of {ck_steps} steps: the {behind} after them are in none)" if behind else "")
        )
        if status != "completed" and isinstance(requested, int):
            parts.append(f"continue with {resume_arguments(doc, str(ck), requested, log_path)}")
    return "; ".join(parts)


def describe_log(log_path: str | Path) -> str | None:
    """:func:`describe_run` of the log at ``log_path`` (this process's rank's), or None when there is
    no readable log there (a run stopped before its first write)."""
    path = rank_log_path(log_path, _launch_rank())
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return describe_run(doc, path) if isinstance(doc, dict) else None
