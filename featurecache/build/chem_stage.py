"""Build stage ``chem``: reference conformers for every component the structure parts use.

Runs after the structure parts are written:

1. **scan** (one Dask task per structure part not scanned before, and per part whose entries use
   a component computed again, step 2): the residues of every entry, grouped by ``ref_space_uid``,
   as signatures ``(code, sorted (atom name, element))``. Standard residues whose atoms all belong
   to their packaged definition are only counted, per entry.
2. **plan** (driver): definitions for all codes seen, in one pass over the CCD (file or directory,
   then the packaged standard residues). A code whose CCD definition does not parse
   (:func:`load_definitions`) does not stop the build: a standard residue gets its packaged
   definition, which its entries were tokenized with (a warning and its component's ``reason``
   name the CCD file); any other code is stored as a ``failed`` component whose reason names the
   file, never perceived from the residue's atoms, and the entries using it get chem warnings. A
   CCD file the OS does not let the driver read (EIO, a stale NFS handle: :func:`load_definitions`'s
   ``unread``) is no broken definition: no ``failed`` component is stored for it (one stored earlier
   is kept; a standard residue new to the store gets its packaged definition for now, stored
   without a definition hash so that the next build computes it again), this run has a
   failure row keyed "" (exit 1), and the structure parts whose entries use the code are not
   recorded as scanned, so the next build scans them again and reads the file again (review R42b
   s52 #2). A ``components.cif`` the driver cannot read stops the build (exit 3, one line). A
   defined code's key is the code; an undefined one's is ``code#hash`` of its signature
   (:func:`~featurecache.chem.conformer.perceived_key`), perceived from the occurrence with the
   smallest entry id whose atoms are all resolved — or, when the code has a definition whose atom
   names are not the residue's, the definition's conformer for the residue's heavy atoms matched
   onto it by graph (:func:`~featurecache.chem.conformer.conformer_for_renamed`; perceived when
   no unambiguous match exists). Keys already in the store with the same
   definition hash are skipped — a component is computed once, not per entry and not per build —
   unless an older conformer code computed them (:func:`stored_version` below
   :data:`~featurecache.chem.conformer.CONFORMER_VERSION`: then every structure part that this
   version has not scanned is scanned again and every component in use computed anew), or they failed for want of time
   (:func:`retry_under`): an embedding
   timed out under a smaller ``--conformer-timeout`` than this build's. Those are computed again,
   and the structure parts whose chem warnings name their code are scanned again, so their
   warnings (step 4) describe the new result and a perceived key has its occurrence. A failure
   more time cannot change (a definition RDKit cannot embed or sanitise, a crashed task) stays.
3. **conformers** (Dask tasks, one component part each): :mod:`featurecache.chem.conformer`. The
   jobs, sorted by key, are cut into parts of :func:`components_per_part` — a function of their
   number only, so the parts are the same whatever the worker count. A part whose task fails is
   computed again one component at a time (one that fails alone is stored as ``failed``); one
   whose embedding a SIGINT interrupted (:class:`~featurecache.errors.EmbeddingInterrupted`) is
   computed again whole, never stored as a fallback or a failure.
4. **check** (driver): atoms that will get ``ref_mask = False`` (name not in the definition,
   component failed, a standard residue's included) become ``chem_warnings`` rows per entry; the
   entries themselves stay built.

The scan and check results go into one more component part (no components, only index files),
which also records the structure parts scanned, so the next build scans only new parts.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from featurecache.build.progress import stage_bar
from featurecache.chem.conformer import (
    CONFORMER_VERSION,
    STRATEGIES,
    ReferenceConformer,
    conformer_for_component,
    conformer_for_perceived,
    conformer_for_renamed,
    perceived_key,
    rdkit_timeout_s,
    timed_out_bound_s,
)
from featurecache.chem.library import ComponentLibrary, get_library
from featurecache.chem.reference import residue_reference_mask
from featurecache.chem.standard import standard_component, standard_components, standard_heavy_atoms
from featurecache.const import decode_atom_name, decode_res_name
from featurecache.errors import CCDError, EmbeddingInterrupted, StoreError
from featurecache.parse.ccd import CCDReadError, ComponentDef
from featurecache.store.components import (
    chem_warnings_in_parts,
    component_rows_in_parts,
    load_component_table,
    scanned_structure_parts,
    write_component_part,
)
from featurecache.store.index import complete_parts, read_table
from featurecache.store.layout import COMPONENT_PART_PREFIX, PART_INDEX_DIR, STRUCTURE_PART_PREFIX, part_name
from featurecache.store.root import record_dtype
from featurecache.types import Atom, Token

if TYPE_CHECKING:
    from featurecache.build.tasks import StoreWriteFailed

log = logging.getLogger(__name__)

__all__ = [
    "ChemStageResult",
    "components_per_part",
    "load_definitions",
    "parse_strategy_counts",
    "retry_under",
    "run_chem_stage",
    "scan_part_task",
    "scan_structure_part",
    "stored_version",
]

#: (code, ((atom name, atomic number), ...) sorted)
Signature = tuple[str, tuple[tuple[str, int], ...]]
#: Components per conformer part (:func:`components_per_part`): about TARGET_COMPONENT_PARTS
#: parallel tasks, never fewer than MIN (tiny parts) or more than MAX components in one.
MIN_COMPONENTS_PER_PART = 8
MAX_COMPONENTS_PER_PART = 64
TARGET_COMPONENT_PARTS = 32


@dataclass
class Occurrence:
    """One residue in one entry: what perception needs (coordinates are used for bonds only)."""

    entry_id: str
    uid: int
    names: list[str]
    elements: list[int]
    charges: list[int]
    coords: np.ndarray  # float32 [n, 3]
    all_present: bool

    def order(self) -> tuple[bool, str, int]:
        return (not self.all_present, self.entry_id, self.uid)


@dataclass
class ScanResult:
    part: str
    n_entries: int = 0
    n_residues: int = 0
    #: standard code -> {(entry_id, source path): [residues, atoms]}: the residues of the code the
    #: scan met, and what a failed component of the code leaves without a reference position (step 4)
    standard_entries: dict[str, dict[tuple[str, str], list[int]]] = field(default_factory=dict)
    #: signature -> {(entry_id, source path): residues of the entry with this signature}
    entries: dict[Signature, Counter[tuple[str, str]]] = field(default_factory=dict)
    first: dict[Signature, Occurrence] = field(default_factory=dict)
    #: why the part could not be scanned (set by :func:`scan_part_task`), else None
    error: str | None = None
    #: why its scan task failed (its worker died: :func:`_scan_parts`), else None; the part is not
    #: recorded as scanned, so the next build scans it again
    crashed: str | None = None


@dataclass
class ChemStageResult:
    """What the stage did (``summary()`` gives the build-summary rows)."""

    scanned_parts: int = 0
    n_codes: int = 0
    computed: list[dict[str, Any]] = field(default_factory=list)  # component rows of this run
    retried: list[str] = field(default_factory=list)  # failed keys computed again (retry_under)
    store_strategies: Counter[str] = field(default_factory=Counter)  # latest row per key, whole store
    n_components: int = 0
    n_warnings: int = 0
    n_entries_with_masked_atoms: int = 0
    n_atoms_masked: int = 0
    seconds: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)
    #: code -> the CCD file whose definition of it does not parse (:func:`load_definitions`)
    broken_definitions: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Build-summary rows; strategy counts read ``"etkdg 40, random_coords 0, …"``."""
        run = Counter(r["strategy"] for r in self.computed)
        again = set(self.retried)
        retried_ok = sum(1 for r in self.computed if r["key"] in again and r["strategy"] != "failed")

        def counts(c: Counter[str]) -> str:
            return ", ".join(f"{s} {c.get(s, 0)}" for s in STRATEGIES)

        out: dict[str, Any] = {
            "components (store / this run)": f"{self.n_components} / {len(self.computed)}",
            "strategies (store)": counts(self.store_strategies),
            "strategies (this run)": counts(run),
            "failed components retried": f"{len(self.retried)} ({retried_ok} with a conformer now)",
            "structure parts scanned": self.scanned_parts,
        }
        secs = [r["seconds"] for r in self.computed]
        if secs:
            out["conformer seconds (sum / max)"] = f"{sum(secs):.2f} / {max(secs):.2f}"
        out["atoms without ref_pos"] = f"{self.n_atoms_masked} in {self.n_entries_with_masked_atoms} entries"
        if self.broken_definitions:
            out["broken CCD definitions"] = ", ".join(
                f"{code} ({path}: {'packaged definition used' if standard_component(code) else 'failed'})"
                for code, path in self.broken_definitions.items()
            )
        out["stage seconds"] = round(self.seconds, 2)
        return out


def parse_strategy_counts(text: str) -> dict[str, int]:
    """Inverse of the ``strategies`` rows of :meth:`ChemStageResult.summary`."""
    return {name: int(n) for name, n in (part.rsplit(" ", 1) for part in text.split(", "))}


# --- 1. scan ---------------------------------------------------------------------------------------


def _read_records(part: Path, group: str, dtype: np.dtype) -> np.ndarray:
    """Every record of the array ``group`` of the structure part ``part``; StoreError naming the
    part and the array when it is missing or cannot be read."""
    import zarr

    try:
        arr = zarr.open_array(str(part / group), mode="r")
        # a part of an older featurizer may lack fields added since (store.root.record_dtype)
        width = int(arr.shape[1]) if len(arr.shape) == 2 else -1
        dtype = record_dtype(
            arr.attrs.get("record_dtype"), width, dtype, f"structure part {part.name}: {group}"
        )
        return np.ascontiguousarray(arr[...]).view(dtype).reshape(-1)
    except Exception as exc:  # zarr/numcodecs raise OSError, ValueError, KeyError, RuntimeError, ...
        raise StoreError(
            f"structure part {part.name}: its array {group} ({part / group}) is missing or unreadable: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def scan_structure_part(part_dir: str) -> ScanResult:
    """Residue signatures of every entry in one structure part (a Dask task; reads only).

    StoreError naming the part when it does not exist, has no ``_index/entries.arrow``, or an
    array it needs cannot be read (a damaged part, never an empty scan recorded as done)."""
    part = Path(part_dir)
    res = ScanResult(part.name)
    if not part.is_dir():
        raise StoreError(f"structure part {part.name}: {part} does not exist")
    f = part / PART_INDEX_DIR / "entries.arrow"
    if not f.is_file():
        raise StoreError(f"structure part {part.name}: its entry table {f} is missing")
    entries = read_table(f, memory_map=False).to_pydict()
    if not entries.get("id"):
        return res
    atoms_all = _read_records(part, "atoms", Atom)
    tokens_all = _read_records(part, "tokens", Token)
    std_names = {c: {n for n, _ in standard_heavy_atoms(c, leaving=True)} for c in standard_components()}
    for k, entry_id in enumerate(entries["id"]):
        res.n_entries += 1
        a0, na = int(entries["atom_start"][k]), int(entries["atom_count"][k])
        t0, nt = int(entries["token_start"][k]), int(entries["token_count"][k])
        atoms, tokens = atoms_all[a0 : a0 + na], tokens_all[t0 : t0 + nt]
        if na == 0:
            continue
        uniq, inv = np.unique(tokens["res_name"], axis=0, return_inverse=True)
        code_of_token = np.asarray(inv).reshape(-1)
        codes = [decode_res_name(u) for u in uniq]
        atom_code = code_of_token[atoms["token_index"]]
        order = np.lexsort((np.arange(na), atoms["ref_space_uid"]))
        uids = atoms["ref_space_uid"][order]
        bounds = np.flatnonzero(np.diff(uids)) + 1
        path = str(entries["source_path"][k])
        for group in np.split(order, bounds):
            res.n_residues += 1
            code = codes[int(atom_code[group[0]])]
            names = [decode_atom_name(x) for x in atoms["name"][group]]
            std = std_names.get(code)
            if std is not None and std.issuperset(names):
                counts = res.standard_entries.setdefault(code, {}).setdefault((entry_id, path), [0, 0])
                counts[0] += 1
                counts[1] += len(group)
                continue
            elements = [int(z) for z in atoms["element"][group]]
            sig: Signature = (code, tuple(sorted(zip(names, elements, strict=True))))
            res.entries.setdefault(sig, Counter())[(entry_id, path)] += 1
            occ = Occurrence(
                entry_id=entry_id,
                uid=int(atoms["ref_space_uid"][group[0]]),
                names=names,
                elements=elements,
                charges=[int(q) for q in atoms["charge"][group]],
                coords=np.asarray(atoms["coords"][group], dtype=np.float32),
                all_present=bool(atoms["is_present"][group].all()),
            )
            best = res.first.get(sig)
            if best is None or occ.order() < best.order():
                res.first[sig] = occ
    return res


def scan_part_task(part_dir: str) -> ScanResult:
    """:func:`scan_structure_part` as a Dask task: a damaged part comes back as a result with
    ``error`` set (the driver raises one StoreError naming every such part) rather than as a
    task failure, which the worker would log with a traceback."""
    try:
        return scan_structure_part(part_dir)
    except StoreError as exc:
        return ScanResult(Path(part_dir).name, error=str(exc))


#: the chem stage's part tasks, as :func:`~featurecache.build.tasks.run_part` names them
SCAN_TASK = "featurecache.build.chem_stage:scan_part_task"
COMPONENT_TASK = "featurecache.build.chem_stage:build_component_part"


def _raise_damaged(scans: list[ScanResult]) -> None:
    bad = [r for r in scans if r.error is not None]
    if bad:
        rest = f" (and {len(bad) - 1} more damaged structure part(s): {', '.join(r.part for r in bad[1:])})"
        raise StoreError(f"{bad[0].error}{rest if len(bad) > 1 else ''}")


# --- 3. conformers (Dask task) -------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    key: str
    source: str  # "ccd" | "packaged" | "perceived:<entry>"
    definition: ComponentDef | None = None
    occurrence: Occurrence | None = None
    why: str = "no CCD definition"
    #: the definition of the code of a residue whose atom names are not its own: its heavy atoms
    #: are matched onto it by graph (:func:`~featurecache.chem.conformer.conformer_for_renamed`)
    renamed: ComponentDef | None = None
    #: why the CCD's own definition was not used (:func:`load_definitions`), first in ``reason``;
    #: without ``definition`` or ``occurrence`` the component is stored as failed for it
    broken: str = ""
    #: ``definition`` stands in for a CCD file the driver could not read (:func:`_unread_job`): the
    #: component is stored without a definition hash, so the next build that reads the file
    #: computes it again from the CCD's definition
    provisional: bool = False


def _compute(job: Job, timeout_s: float) -> ReferenceConformer:
    if job.definition is not None:
        conf = conformer_for_component(job.definition, timeout_s=timeout_s)
        if job.broken:
            conf = dataclasses.replace(conf, reason="; ".join(x for x in (job.broken, conf.reason) if x))
        if job.provisional:
            conf = dataclasses.replace(conf, source_sha="")
        return conf
    if job.occurrence is None and job.broken:
        return _failed(job.key, [], [], job.broken)
    occ = job.occurrence
    assert occ is not None
    if not occ.all_present:
        return _failed(job.key, occ.names, occ.elements, f"{job.why}; no occurrence with every atom resolved")
    if job.renamed is not None:
        return conformer_for_renamed(
            job.renamed, occ.names, occ.elements, occ.coords, occ.charges, timeout_s=timeout_s, why=job.why
        )
    code = job.key.split("#", 1)[0]
    return conformer_for_perceived(
        code, occ.names, occ.elements, occ.coords, occ.charges, timeout_s=timeout_s, why=job.why
    )


def _failed(key: str, names: list[str], elements: list[int], reason: str) -> ReferenceConformer:
    n = len(names)
    return ReferenceConformer(
        key=key,
        code=key.split("#", 1)[0],
        atom_names=tuple(names),
        elements=np.asarray(elements, dtype=np.uint8),
        charges=np.zeros(n, dtype=np.int8),
        positions=np.zeros((n, 3), np.float32),
        mask=np.zeros(n, dtype=bool),
        bonds=np.zeros((0, 3), np.int32),
        strategy="failed",
        reason=reason,
        source_sha="",
        seconds=0.0,
    )


def build_component_part(
    root: str, name: str, jobs: list[Job], timeout_s: float, versions: dict[str, str] | None = None
) -> list[dict[str, Any]] | StoreWriteFailed:
    """Compute the conformers of ``jobs`` and write them as component part ``name`` (``versions``:
    the driver's, checked against this worker's before anything is computed or written). A write
    the OS refused: ``tasks.StoreWriteFailed``, nothing of the part committed."""
    from featurecache.build.tasks import StoreWriteFailed, check_versions

    check_versions(versions)
    conformers = [_compute(j, timeout_s) for j in jobs]
    try:
        write_component_part(Path(root), name, conformers, {j.key: j.source for j in jobs})
    except StoreError as exc:
        return StoreWriteFailed(str(exc))
    return [
        {"key": c.key, "strategy": c.strategy, "reason": c.reason, "seconds": c.seconds, "n_heavy": c.n_atoms}
        for c in conformers
    ]


# --- driver ----------------------------------------------------------------------------------------


def heavy_names(d: ComponentDef) -> set[str]:
    return {n for n, z in zip(d.atom_names, d.atomic_numbers, strict=True) if z != 1}


def _merge(
    results: list[ScanResult],
) -> tuple[
    dict[str, list[tuple[str, str, str, int, int]]],
    dict[Signature, list[tuple[str, str, str, int]]],
    dict[Signature, Occurrence],
]:
    """The scans as one: standard code -> [(entry id, path, part, residues, atoms)], signature ->
    [(entry id, path, part, residues)], and each signature's first occurrence."""
    std: dict[str, list[tuple[str, str, str, int, int]]] = {}
    entries: dict[Signature, list[tuple[str, str, str, int]]] = {}
    first: dict[Signature, Occurrence] = {}
    for r in results:
        for code, per_entry in r.standard_entries.items():
            std.setdefault(code, []).extend((e, p, r.part, n, a) for (e, p), (n, a) in per_entry.items())
        for sig, lst in r.entries.items():
            entries.setdefault(sig, []).extend((e, p, r.part, n) for (e, p), n in lst.items())
        for sig, occ in r.first.items():
            if sig not in first or occ.order() < first[sig].order():
                first[sig] = occ
    return std, entries, first


def _next_number(root: Path) -> int:
    nums = [
        int(p.name[2:])
        for p in complete_parts(root)
        if p.name.startswith(COMPONENT_PART_PREFIX) and p.name[2:].isdigit()
    ]
    return max(nums, default=-1) + 1


def components_per_part(n_jobs: int) -> int:
    """How many components go into one conformer part, given how many are to be computed.

    A function of the job count only — never of the worker count — so the same inputs (and the
    same store) give the same parts byte for byte on any cluster.
    """
    return min(
        MAX_COMPONENTS_PER_PART, max(MIN_COMPONENTS_PER_PART, math.ceil(n_jobs / TARGET_COMPONENT_PARTS))
    )


def _run_jobs(
    client: Any,
    root: Path,
    jobs: list[Job],
    timeout_s: float,
    result: ChemStageResult,
    progress: bool = False,
) -> None:
    """Compute ``jobs`` (sorted by key) in parts of :func:`components_per_part` consecutive jobs."""
    from distributed import as_completed

    if not jobs:
        return
    per_part = components_per_part(len(jobs))
    number = _next_number(root)
    batches: dict[str, list[Job]] = {}
    futures = []
    from featurecache.build.tasks import run_part, stage_guard

    # each task checks its worker (versions, the store's token) before the part's signature matters
    guard = stage_guard(root)
    for i in range(0, len(jobs), per_part):
        name = part_name(COMPONENT_PART_PREFIX, number)
        number += 1
        batches[name] = jobs[i : i + per_part]
        futures.append(client.submit(run_part, guard, COMPONENT_TASK, str(root.resolve()), name, batches[name],
                                     timeout_s, key=f"component-part-{name}-{time.time_ns()}", pure=False,
                                     retries=0))  # fmt: skip
    with stage_bar("conformers", len(jobs), progress) as advance:
        # the build's client's loop: it is not the process's default client (review R35b s49 #2)
        queue = as_completed(futures, loop=client.loop)
        _collect(client, root, queue=queue, batches=batches, number=number, timeout_s=timeout_s, result=result,
                 advance=advance, guard=guard)  # fmt: skip


#: how many component parts of one stage may be computed again after a SIGINT interrupted them
INTERRUPTED_RETRIES = 8


def _collect(
    client: Any, root: Path, *, queue: Any, batches: dict[str, list[Job]], number: int, timeout_s: float,
    result: ChemStageResult, advance: Any, guard: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    """Gather component parts as they finish; a failed part's components are retried one by one.
    A part whose embedding a SIGINT interrupted (nothing of it was written) is computed again as
    it was, up to :data:`INTERRUPTED_RETRIES` times; then the stage fails (a resume computes it).
    A part task's TypeError, AttributeError or ImportError is a worker of another featurecache
    (``run.other_code_error``: the build ends, exit 3), not the components' failure. ``guard``: the
    :func:`~featurecache.build.tasks.part_guard` each task is submitted with (``run_part``)."""
    from featurecache.build.run import part_outcome
    from featurecache.build.tasks import run_part

    interrupted = 0
    for fut in queue:
        name = "-".join(fut.key.split("-")[2:4])
        computed, exc = part_outcome(client, fut, name)
        if exc is None:
            result.computed.extend(computed)
            advance(len(batches[name]))
            continue
        if isinstance(exc, EmbeddingInterrupted):  # not the components' fault: never stored as a fallback
            interrupted += 1
            if interrupted > INTERRUPTED_RETRIES:
                raise EmbeddingInterrupted(
                    f"{exc}; {interrupted} component parts were interrupted, the build stops: run it again to "
                    "compute the parts not stored"
                ) from exc
            log.warning("component part %s: %s; computing it again", name, exc)
            again = part_name(COMPONENT_PART_PREFIX, number)
            number += 1
            batches[again] = batches[name]
            queue.add(client.submit(run_part, guard, COMPONENT_TASK, str(root.resolve()), again, batches[again],
                                    timeout_s, key=f"component-part-{again}-{time.time_ns()}", pure=False))  # fmt: skip
            continue
        # a worker died (RDKit crash, memory) or the task raised
        batch = batches[name]
        if len(batch) > 1:
            log.warning("component part %s failed (%s: %s); retrying its %d components one by one",
                        name, type(exc).__name__, exc, len(batch))  # fmt: skip
            for job in batch:
                sub = part_name(COMPONENT_PART_PREFIX, number)
                number += 1
                batches[sub] = [job]
                queue.add(client.submit(run_part, guard, COMPONENT_TASK, str(root.resolve()), sub, [job],
                                        timeout_s, key=f"component-part-{sub}-{time.time_ns()}", pure=False))  # fmt: skip
            continue
        job = batch[0]
        names = (
            list(job.definition.atom_names)
            if job.definition
            else list(job.occurrence.names if job.occurrence else [])
        )
        elems = (
            list(job.definition.atomic_numbers)
            if job.definition
            else list(job.occurrence.elements if job.occurrence else [])
        )
        keep = [i for i, z in enumerate(elems) if z != 1]
        reason = f"conformer task crashed: {type(exc).__name__}: {exc}"[:500]
        conf = _failed(job.key, [names[i] for i in keep], [elems[i] for i in keep], reason)
        failure = {"path": f"component:{job.key}", "entry_id": "", "stage": "chem",
                   "error_class": type(exc).__name__, "message": reason, "key": job.key}  # fmt: skip
        write_component_part(root, name, [conf], {job.key: job.source}, failures=[failure])
        result.failures.append(failure)
        result.computed.append(
            {"key": job.key, "strategy": "failed", "reason": reason, "seconds": 0.0, "n_heavy": len(keep)}
        )
        advance(1)


def retry_under(row: dict[str, Any], timeout_s: float) -> bool:
    """Whether the stored component ``row`` (the latest of its key) is computed again by a build
    with ``--conformer-timeout`` ``timeout_s``: it failed, an embedding attempt of it timed out, and
    RDKit would give an attempt more seconds now (:func:`~featurecache.chem.conformer.rdkit_timeout_s`:
    a failure under 0.5 is not retried under 0.9, both are 1 s). A row written before components
    recorded ``timed_out_s`` has its timeout bounded from the times its ``reason`` gives
    (:func:`~featurecache.chem.conformer.timed_out_bound_s`): retried only when ``timeout_s`` is
    surely more, so a build with the same settings never recomputes it."""
    if row.get("strategy") != "failed":
        return False
    before = row.get("timed_out_s")
    if before is None:
        before = timed_out_bound_s(str(row.get("reason") or ""))
    return before is not None and rdkit_timeout_s(timeout_s) > rdkit_timeout_s(before)


def stored_version(row: dict[str, Any]) -> int:
    """The :data:`~featurecache.chem.conformer.CONFORMER_VERSION` that computed the stored
    component ``row``: 1 for a row written before components recorded it."""
    v = row.get("conformer_version")
    return 1 if v is None else int(v)


def _parts_using(root: Path, keys: set[str]) -> set[str]:
    """Structure parts whose chem warnings name the code of one of ``keys``: the parts whose entries
    use a component that failed (every atom of it is a warning), scanned again when it is retried."""
    if not keys:
        return set()
    codes = {k.split("#", 1)[0] for k in keys}
    cw = chem_warnings_in_parts(root).select(["key", "entry_part"]).to_pydict()
    return {s for k, s in zip(cw["key"], cw["entry_part"], strict=True) if k and k.split("#", 1)[0] in codes}


def _scan_parts(client: Any, root: Path, parts: Sequence[Path], progress: bool) -> list[ScanResult]:
    """:func:`scan_part_task` over ``parts`` (results in their order), with the stage progress the
    other stages give ("chem scan": a bar, or log lines): a first build of a whole-PDB store scans
    ~12.5k parts, minutes without a word before (review R26a s44 #4).

    A scan task that fails (its worker died: KilledWorker; or it raised) does not end the build
    (review R27c s45 #4: a raw traceback before): its result is empty with ``crashed`` set, a
    warning names the part, and the part is not recorded as scanned (:func:`run_chem_stage`), so
    the next build scans it again. Each future is released once read (no list is kept: a finished
    scan held to the end was run again when its worker died). Each task goes through
    ``tasks.run_part`` with the guard of the store ``root``: a worker of another featurecache or one
    that does not see the store refuses it (StoreError, exit 3); a TypeError, AttributeError or
    ImportError of the task is such a worker too (``run.other_code_error``), not a scan failure."""
    from distributed import as_completed

    from featurecache.build.run import part_outcome
    from featurecache.build.tasks import run_part, stage_guard

    if not parts:
        return []
    results: list[ScanResult | None] = [None] * len(parts)
    index_of: dict[str, int] = {}
    guard = stage_guard(root)

    def submit(i: int) -> Any:
        fut = client.submit(run_part, guard, SCAN_TASK, str(parts[i]),
                            key=f"chem-scan-{parts[i].name}-{time.time_ns()}", pure=False)  # fmt: skip
        index_of[fut.key] = i
        return fut

    with stage_bar("chem scan", len(parts), progress) as advance:
        for fut in as_completed([submit(i) for i in range(len(parts))], loop=client.loop):
            i = index_of.pop(fut.key)
            results[i], exc = part_outcome(client, fut, f"chem scan of {parts[i].name}")
            if exc is not None:
                why = f"{type(exc).__name__}: {exc}"[:500]
                log.warning("chem scan of structure part %s failed (%s; often its worker's memory limit: see the "
                            "worker's log); the next build scans it again, computing the components only its "
                            "entries use", parts[i].name, why)  # fmt: skip
                results[i] = ScanResult(parts[i].name, crashed=why)
            fut.release()
            advance(1)
    return [
        r if r is not None else ScanResult(p.name, crashed="no result")
        for r, p in zip(results, parts, strict=True)
    ]


def run_chem_stage(
    client: Any, root: Path, ccd: Path | str | None, timeout_s: float, progress: bool = False
) -> ChemStageResult:
    """Scan new structure parts, compute missing components and those that failed for want of
    time, record warnings. See module doc."""
    t0 = time.perf_counter()
    root = Path(root)
    result = ChemStageResult()
    existing = component_rows_in_parts(root).to_pylist()
    latest = {r["key"]: r for r in existing}  # later parts win
    have = {key: r["source_sha256"] for key, r in latest.items()}
    retry = {key for key, r in latest.items() if retry_under(r, timeout_s)}
    stale = {key for key, r in latest.items() if stored_version(r) < CONFORMER_VERSION}
    redo = retry | stale
    # an older conformer code computed some component: every structure part not scanned by this
    # version is scanned again, so every code in use (and each perceived key's occurrence) is met
    # and computed anew; a stale key no entry uses stays, and rescans nothing once that is done
    done = scanned_structure_parts(root, at_version=CONFORMER_VERSION if stale else None)
    again = _parts_using(root, retry)
    s_parts = [
        p
        for p in complete_parts(root)
        if p.name.startswith(STRUCTURE_PART_PREFIX) and (p.name not in done or p.name in again)
    ]
    result.scanned_parts = len(s_parts)
    scans = _scan_parts(client, root, s_parts, progress)
    _raise_damaged(scans)
    for r in scans:
        if r.crashed is not None:
            result.failures.append({"path": f"structure part {r.part}", "entry_id": "", "stage": "chem",
                                    "error_class": r.crashed.split(":", 1)[0],
                                    "message": f"chem scan failed ({r.crashed}); the next build scans it again",
                                    "key": ""})  # fmt: skip
    std_entries, sig_entries, first = _merge(scans)
    codes = sorted(set(std_entries) | {code for code, _ in sig_entries})
    result.n_codes = len(codes)
    library = get_library(ccd)
    defs, broken, unread = load_definitions(library, codes)

    jobs: list[Job] = []
    for code in codes:
        if code in unread:
            jobs.extend(_unread_job(code, unread[code], defs, have, result))
        elif code in broken:
            jobs.extend(_broken_job(code, broken[code], defs, have, redo))
        elif code in defs:
            d = defs[code]
            if have.get(code) != d.sha256 or code in redo:
                jobs.append(Job(code, library.source(code), definition=d))
    job_keys = {j.key for j in jobs}  # a set: one scan over jobs per signature was quadratic
    # A residue whose atoms the definition does not all name (or whose code has none) gets a
    # perceived component of its own atoms, keyed code#hash (the reader falls back to it).
    perceived_of: dict[Signature, str] = {}
    for sig in sorted(sig_entries):
        code = sig[0]
        defined = defs.get(code)
        if defined is not None and heavy_names(defined).issuperset(n for n, _ in sig[1]):
            continue
        if defined is None and (code in broken or code in unread):
            continue  # a broken or unread definition is not "no definition": not perceived (parse.ccd)
        key = perceived_key(code, list(sig[1]))
        perceived_of[sig] = key
        # the key names the atoms, not the definition they were matched against: a component stored
        # against another definition (a CCD updated, --ccd given where it was left out, or left out
        # where it was given) is computed again (review R22 s41 #2)
        against = defined.sha256 if defined is not None else ""
        if (key not in have or key in redo or have[key] != against) and key not in job_keys:
            job_keys.add(key)
            occ = first[sig]
            why = (
                "no CCD definition" if defined is None else f"atom names differ from the definition of {code}"
            )
            jobs.append(Job(key, f"perceived:{occ.entry_id}", occurrence=occ, why=why, renamed=defined))
    jobs.sort(key=lambda j: j.key)
    result.retried = [j.key for j in jobs if j.key in retry]
    log.info(
        "chem: %d structure parts scanned, %d codes, %d components to compute (%d of them failed before, "
        "timed out under a --conformer-timeout below %s; %d computed by an older conformer code)",
        len(s_parts),
        len(codes),
        len(jobs),
        len(result.retried),
        f"{timeout_s:g}",
        sum(1 for j in jobs if j.key in stale),
    )
    _run_jobs(client, root, jobs, timeout_s, result, progress)

    # 4. check: which atoms of which entries will have no reference position, and why
    stored = component_rows_in_parts(root).select(["key", "reason"]).to_pydict()
    reasons = dict(zip(stored["key"], stored["reason"], strict=True))

    def comp_reason(key: str) -> str:
        return str(reasons.get(key, ""))[:300]

    table = load_component_table(root, index=component_rows_in_parts(root))
    warnings: list[dict[str, Any]] = []
    masked_entries: set[str] = set()
    for sig, where in sorted(sig_entries.items()):
        code = sig[0]
        # the component a client's reference_features takes, and the atoms it leaves masked
        key, ref_mask = residue_reference_mask(code, sig[1], table)
        bad = [n for (n, _z), m in zip(sig[1], ref_mask, strict=True) if not m]
        alt = perceived_of.get(sig)
        if key in table:
            comp = table.component(key)
            if comp["strategy"] == "failed":
                why = f"component {key} has no reference conformer ({comp_reason(key)})"
            else:
                why = f"atom name(s) not in the definition of {key}"
                if alt is not None and alt != key:
                    why += f"; perceived {alt} failed ({comp_reason(alt)})"
        else:
            why = f"no reference conformer stored for {code}{_unread_note(code, unread)}"
        if not bad:
            continue
        for entry_id, path, s_part, n_res in where:
            warnings.append({"entry_id": entry_id, "path": path, "stage": "chem", "key": key, "n_atoms": len(bad) * n_res,
                             "message": f"{len(bad)} atom(s) of {sig[0]} (x{n_res}) get ref_mask=False ({' '.join(bad[:12])}): {why}",
                             "entry_part": s_part})  # fmt: skip
            masked_entries.add(entry_id)
    # standard residues were only counted in the scan: their atoms all belong to the definition, so
    # only a component that failed (or is not stored) leaves them without a reference position
    for code, where_std in sorted(std_entries.items()):
        if code in table and table.component(code)["strategy"] != "failed":
            continue
        why = (
            f"component {code} has no reference conformer ({comp_reason(code)})"
            if code in table
            else f"no reference conformer stored for {code}{_unread_note(code, unread)}"
        )
        for entry_id, path, s_part, n_res, n_atoms in sorted(where_std):
            warnings.append({"entry_id": entry_id, "path": path, "stage": "chem", "key": code, "n_atoms": n_atoms,
                             "message": f"{n_atoms} atom(s) of standard residue {code} (x{n_res}) get ref_mask=False: "
                                        f"{why}", "entry_part": s_part})  # fmt: skip
            masked_entries.add(entry_id)
    result.n_warnings = len(warnings)
    result.n_entries_with_masked_atoms = len(masked_entries)
    result.n_atoms_masked = sum(w["n_atoms"] for w in warnings)
    if s_parts:
        scan_rows = [
            {"structure_part": r.part, "n_entries": r.n_entries, "n_residues": r.n_residues,
             "conformer_version": CONFORMER_VERSION}
            for r in scans
            # scanned again by the next build: a crashed scan, and a part whose entries use a code
            # whose CCD file could not be read (the next build's plan reads it again)
            if r.crashed is None and not _uses_any(r, unread)
        ]  # fmt: skip
        write_component_part(
            root, part_name(COMPONENT_PART_PREFIX, _next_number(root)), [], warnings=warnings, scans=scan_rows
        )

    rows = component_rows_in_parts(root).select(["key", "strategy"]).to_pydict()
    latest = dict(zip(rows["key"], rows["strategy"], strict=True))
    result.store_strategies = Counter(latest.values())
    result.n_components = len(latest)
    result.broken_definitions = {code: str(exc.path) for code, exc in broken.items()}
    result.seconds = time.perf_counter() - t0
    return result


def load_definitions(
    library: ComponentLibrary, codes: list[str]
) -> tuple[dict[str, ComponentDef], dict[str, CCDError], dict[str, CCDReadError]]:
    """The definitions of ``codes``; apart from them the codes whose CCD definition does not
    parse, each with its :class:`~featurecache.errors.CCDError` (naming the CCD file and the code);
    and the codes whose file in a CCD directory the OS did not let this process read (EIO, a stale
    NFS handle: :class:`~featurecache.parse.ccd.CCDReadError`), which say nothing of the definition.
    ``library.load`` raises at the first such code it meets; it is asked again without that code,
    from its cache, until none is left. A CCD that cannot be read at all (``component`` None: a
    ``components.cif``) raises: a CCDReadError as one naming the file, the OS's reason and that the
    build can be run again (exit 3), since no definition can be had from it."""
    wanted = list(codes)
    broken: dict[str, CCDError] = {}
    unread: dict[str, CCDReadError] = {}
    while True:
        try:
            return library.load(wanted), dict(sorted(broken.items())), dict(sorted(unread.items()))
        except CCDReadError as exc:
            if exc.component is None or exc.component not in wanted:
                raise CCDReadError(
                    f"{exc}; the build stopped before computing reference conformers (every part written is "
                    "kept): run it again once the file reads",
                    path=str(exc.path),
                    os_error=exc.os_error,
                    component=exc.component,
                ) from exc
            unread[exc.component] = exc
            wanted.remove(exc.component)
        except CCDError as exc:
            if exc.component is None or exc.component not in wanted:
                raise
            broken[exc.component] = exc
            wanted.remove(exc.component)


def _unread_job(
    code: str, exc: CCDReadError, defs: dict[str, ComponentDef], have: dict[str, str], result: ChemStageResult
) -> list[Job]:
    """What a code whose CCD file the OS did not let the driver read gets (review R42b s52 #2): a
    failure row of this run keyed "" (exit 1; not stored: the parts whose entries use the code are
    not recorded as scanned, so the next build reads the file again and computes the component
    from it, :func:`run_chem_stage`), never a ``failed`` component kept for good. A component the
    store has for it already is kept; a standard residue new to the store gets its packaged
    definition (with which its entries would be tokenized without ``--ccd``: its atoms keep their
    reference positions), stored with no definition hash (``Job.provisional``) so that the next
    build computes it again from the CCD's (the packaged text is often the CCD's own: an equal
    hash would keep the stand-in, its source and reason, for good); any other code gets nothing
    this run (its atoms get ``ref_mask = False``, with chem warnings)."""
    std = standard_component(code)
    jobs: list[Job] = []
    if code in have:
        what = f"the component {code} stored earlier is kept"
    elif std is not None:
        defs[code] = std
        what = f"the packaged standard definition of {code} is used for now"
        note = f"{exc}; {what}"
        jobs.append(Job(code, "packaged", definition=std, broken=note[:500], provisional=True))
    else:
        what = f"no component of {code} is computed (its atoms get ref_mask=False)"
    message = f"{exc}: a read error of the CCD, not a fault of the definition; {what}; the next build reads it again"
    log.warning("%s", message)
    result.failures.append({"path": str(exc.path), "entry_id": "", "stage": "chem", "error_class": type(exc).__name__,
                            "message": message[:1000], "key": ""})  # fmt: skip
    return jobs


def _unread_note(code: str, unread: dict[str, CCDReadError]) -> str:
    """What a chem warning of ``code`` adds when its CCD file could not be read this run."""
    return f" ({unread[code]}; the next build reads it again)" if code in unread else ""


def _uses_any(scan: ScanResult, codes: dict[str, CCDReadError]) -> bool:
    """Whether an entry of the scanned part ``scan`` has a residue of one of ``codes``."""
    if not codes:
        return False
    return any(c in codes for c in scan.standard_entries) or any(sig[0] in codes for sig in scan.entries)


def _broken_job(
    code: str, exc: CCDError, defs: dict[str, ComponentDef], have: dict[str, str], retry: set[str]
) -> list[Job]:
    """What a code whose CCD definition is broken gets (the build goes on; a warning names the
    file). A standard residue: its packaged definition (added to ``defs``), with which its entries
    were tokenized, so the CCD's broken file does not make it worse than a build without ``--ccd``.
    Any other code: a ``failed`` component (its entries' atoms get ``ref_mask = False`` and chem
    warnings) unless the store has one for it already (from a sound definition: kept)."""
    std = standard_component(code)
    if std is not None:
        defs[code] = std
        note = f"{exc}; the packaged standard definition of {code} is used instead"
        log.warning("%s", note)
        if have.get(code) == std.sha256 and code not in retry:
            return []
        return [Job(code, "packaged", definition=std, broken=note[:500])]
    log.warning("%s; its component fails: the atoms of %s get no reference conformer", exc, code)
    return [] if code in have else [Job(code, "ccd", broken=str(exc)[:500])]
