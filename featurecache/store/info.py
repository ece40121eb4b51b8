"""`featurecache info`: counts, sizes, versions and a failures summary."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from featurecache.const import MOL_TYPE_NAMES, MolType
from featurecache.store.layout import INDEX_DIR, PARTS_DIR
from featurecache.store.leftovers import leftover_note
from featurecache.store.versions import (
    MSA_STAGES_KEY,
    VERSIONS_KEY,
    msa_stage_notes,
    msa_stages,
    store_versions,
    version_notes,
)

if TYPE_CHECKING:
    from featurecache.store.reader import LocalStore


#: part directory path -> (its ``part.json``'s inode, size, mtime and ctime, bytes of the files under
#: the part). A committed part is never written again (the build writes a new part under
#: ``parts/.tmp-*`` and renames it into place), so its size is known once its ``part.json`` is: a
#: part removed and written again under the same name (a rebuild after ``rm -rf``) has a new
#: ``part.json``, with a new ctime (and inode, unless the file system reuses it).
_part_bytes: dict[str, tuple[tuple[int, ...], int]] = {}
_part_bytes_lock = threading.Lock()


#: what :func:`store_bytes` counts: ``({"total", "parts", "index"} -> bytes, parts per kind)``
StoreSizes = tuple[dict[str, int], Counter[str]]


def store_bytes(path: Path) -> StoreSizes:
    """``({"total", "parts", "index"}, parts per kind)`` of the store at ``path``.

    One ``stat`` per part, not one per file: a committed part's bytes are the ones the index's last
    rebuild recorded for it (``index.recorded_part_bytes``, the numbers ``index.store_bytes`` and a
    build's summary use), or that this process counted, while its ``part.json`` is the same file; a
    part neither knows is walked once (``index.dir_bytes``, the one rule for a directory's bytes).
    Everything else (``parts/zarr.json``, parts being written in ``parts/.tmp-*`` and parts with no
    ``part.json``, the index, the root's own files) is walked every time: a few files. A 198k-entry
    store (12.5k parts, 218k files) was walked whole by every ``featurecache info`` (review R26a s44
    #6: 3.2 of its 5 s).
    """
    from featurecache.store.index import dir_bytes, file_stamp, recorded_part_bytes
    from featurecache.store.layout import PART_DONE_FILE, PART_INDEX_DIR

    root = Path(path)
    parts_dir = root / PARTS_DIR
    recorded = recorded_part_bytes(root)
    kinds: Counter[str] = Counter()
    known: dict[str, int] = {}  # part name -> bytes, not walked
    seen: set[str] = set()
    with contextlib.suppress(OSError), os.scandir(parts_dir) as it:
        for e in it:
            with contextlib.suppress(OSError):
                if e.name.startswith(".") or not e.is_dir(follow_symlinks=False):
                    continue  # parts being written: walked below, they still change
                kinds[e.name.split("-")[0]] += 1
                done = os.stat(os.path.join(e.path, PART_INDEX_DIR, PART_DONE_FILE))  # none: walked below
                stamp = file_stamp(done)
                key = (*stamp, done.st_ctime_ns)
                seen.add(e.path)
                cached = _part_bytes.get(e.path)
                if cached is not None and cached[0] == key:
                    known[e.name] = cached[1]
                    continue
                rec = recorded.get(e.name)
                size = rec[1] if rec is not None and rec[0] == stamp else dir_bytes(Path(e.path))
                with _part_bytes_lock:
                    _part_bytes[e.path] = (key, size)
                known[e.name] = size
    prefix = str(parts_dir) + os.sep
    with _part_bytes_lock:  # forget parts of this store that are gone
        for gone in [k for k in _part_bytes if k.startswith(prefix) and k not in seen]:
            del _part_bytes[gone]
    parts = dir_bytes(parts_dir, known, parts_dir)
    index = dir_bytes(root / INDEX_DIR)
    total = dir_bytes(root, {PARTS_DIR: parts, INDEX_DIR: index}, root)
    return {"total": total, "parts": parts, "index": index}, kinds


def _column_sum(table: pa.Table, column: str) -> int:
    if not table.num_rows:
        return 0
    total = pc.sum(table.column(column)).as_py()
    return int(total or 0)


def _value_counts(table: pa.Table, column: str) -> dict[str, int]:
    if not table.num_rows:
        return {}
    counts = pc.value_counts(table.column(column))
    values, n = counts.field("values").to_pylist(), counts.field("counts").to_pylist()
    return {v: int(c) for v, c in zip(values, n, strict=True)}


#: the store's root attribute in which each build records what it read: ``pdb_dir``, ``msa_dir``
#: (None: no ``--msa-dir``) and ``ccd`` (``{"path", "fingerprint"}``; None: no ``--ccd``), paths
#: absolute as given (``featurecache.build.run.build_inputs`` writes it; the latest build's stays)
BUILD_INPUTS_KEY = "build_inputs"


def recorded_build_inputs(attributes: dict[str, Any]) -> dict[str, Any]:
    """The store's record of what its latest build read (:data:`BUILD_INPUTS_KEY`), as ``info``
    shows it: ``{"recorded", "pdb_dir", "msa_dir", "ccd"}``; ``recorded`` False (the rest None)
    for a store built before builds recorded it."""
    rec = attributes.get(BUILD_INPUTS_KEY)
    if not isinstance(rec, dict):
        return {"recorded": False, "pdb_dir": None, "msa_dir": None, "ccd": None}
    ccd = rec.get("ccd")
    if not (isinstance(ccd, dict) and isinstance(ccd.get("path"), str)):
        ccd = None
    return {
        "recorded": True,
        "pdb_dir": rec.get("pdb_dir") if isinstance(rec.get("pdb_dir"), str) else None,
        "msa_dir": rec.get("msa_dir") if isinstance(rec.get("msa_dir"), str) else None,
        "ccd": {"path": ccd["path"], "fingerprint": str(ccd.get("fingerprint") or "")} if ccd else None,
    }


def removed_counts(store: LocalStore) -> dict[str, int]:
    """The removals in effect (``index/removed.arrow``: entries and MSAs that ``prune --sources-gone``
    or ``verify --repair`` took out of the index, or a build whose index listed them in a part deleted
    by hand; not built again since), by kind."""
    from featurecache.store.index import REMOVED

    table = store.table(REMOVED)  # none: an empty table
    kinds = _value_counts(table, "kind") if "kind" in table.column_names else {}
    return {"entries": kinds.get("entry", 0), "msas": kinds.get("msa", 0)}


def held_parts(store: LocalStore) -> dict[str, Any]:
    """The structure parts held back from the published index (``index/entries.arrow`` names them:
    an extension build writes them but publishes them only once its MSA and chem stages have run
    after them; a build that was stopped leaves them so, and the next ``featurecache build``
    publishes them), as ``info`` shows them: ``{"parts": [names, sorted], "entries": N, "new": n,
    "updated": u}``. N counts the distinct entry ids the held parts hold (two held versions of one
    entry, from two stopped builds, count once: the next build publishes the latest); ``new``: those
    not in the published index (publishing adds them to ``counts``), ``updated``: those it already
    serves in an older version. A held part whose own index rows do not read: N from the parts'
    ``part.json`` counts, ``new`` and ``updated`` None (``verify`` names the part)."""
    from featurecache.errors import StoreError
    from featurecache.store.index import gather_part_rows

    names = sorted(store.unpublished_parts)
    parts_dir = store.path / PARTS_DIR
    if not names:
        return {"parts": [], "entries": 0, "new": 0, "updated": 0}
    try:
        rows = gather_part_rows([parts_dir / n for n in names])[0]["entries"]
    except StoreError:
        return {"parts": names, "entries": sum(_part_entries(parts_dir / n) for n in names), "new": None,
                "updated": None}  # fmt: skip
    ids = set(rows.column("id").to_pylist()) if rows.num_rows else set()
    published = set(store.ids)
    return {"parts": names, "entries": len(ids), "new": len(ids - published), "updated": len(ids & published)}


def store_info(store: LocalStore) -> dict[str, Any]:
    """Counts, versions, parts per kind, bytes (:func:`store_bytes`) and failures per stage/class."""
    return info_document(store, store_bytes(store.path))


def info_document(store: LocalStore, sizes: StoreSizes | None) -> dict[str, Any]:
    """:func:`store_info`'s document with ``sizes`` as :func:`store_bytes` counted them (the lookup
    service counts them in the background); everything else comes from the index and the root
    attributes, which are read at once.

    ``sizes`` None: not counted yet. ``parts`` and ``bytes`` are then None and ``sizes_pending`` is
    True (the key is only there while the sizes are pending, so a document with them is the same as
    :func:`store_info`'s).
    """
    e = store.entries
    failures = store.failures
    by_stage = _value_counts(failures, "stage")
    by_class = _value_counts(failures, "error_class")
    counts = {
        "entries": e.num_rows,
        "chains": store.chains.num_rows,
        "interfaces": store.interfaces.num_rows,
        "atoms": _column_sum(e, "atom_count"),
        "tokens": _column_sum(e, "token_count"),
        "bonds": _column_sum(e, "bond_count"),
        "failures": failures.num_rows,
        "warnings": store.warnings.num_rows,
        "msas": store.msas.num_rows,
        "components": store.components.num_rows,
    }
    doc: dict[str, Any] = {
        "path": str(store.path),
        "versions": {
            k: store.attributes.get(k) for k in ("format_version", "schema_version", "featurizer_version")
        },
        "config_hash": store.attributes.get("config_hash"),
        "updated": store.attributes.get("updated"),
        "counts": counts,
        "parts": dict(sizes[1]) if sizes is not None else None,
        "bytes": dict(sizes[0]) if sizes is not None else None,
        "failures_by_stage": dict(by_stage),
        "failures_by_error": dict(by_class),
        "warnings_by_stage": dict(sorted(_value_counts(store.warnings, "stage").items())),
        "removed": removed_counts(store),
        "held_parts": held_parts(store),
        "build_inputs": recorded_build_inputs(store.attributes),
        VERSIONS_KEY: store_versions(store),
        MSA_STAGES_KEY: msa_stages(store),
    }
    if sizes is None:
        doc["sizes_pending"] = True
    return doc


def index_lag(store: LocalStore, held_doc: dict[str, Any] | None = None) -> list[str]:
    """What the store's index does not yet say, one line each (empty: it is up to date with the
    parts as of its last rebuild's record): its first build has not finished, and the entries of
    structure parts committed after the index was last rebuilt. ``held_doc``: the store's
    :func:`held_parts` when the caller has it already (the info document's), read when None.

    Cheap on a big store: the parts the index covers are those its rebuild recorded
    (``index/.part-rows/manifest.json``); only the parts it does not list are looked at, each by its
    ``part.json`` (``n_entries``), no array or index row is read. Without that record (a store from
    before it), a structure part counts as unindexed when it holds entries, sorts after every part
    the entries index names, and none of its entries is there."""
    from featurecache.store.index import PART_ROWS_DIR, PART_ROWS_MANIFEST
    from featurecache.store.layout import PART_DONE_FILE, PART_INDEX_DIR, STRUCTURE_PART_PREFIX

    out: list[str] = []
    if not store.finished:
        out.append(f"{store.path}: its first build has not finished: the index lists the {len(store)} entries "
                   "written so far (the lookup service answers 503 until the build ends; if no build is "
                   "running, run the same `featurecache build` again to finish it)")  # fmt: skip
    parts_dir = store.path / PARTS_DIR
    structure: list[str] = []  # names only: a Path per part cost ~0.1 s per 5,000 parts
    with contextlib.suppress(OSError), os.scandir(parts_dir) as it:
        structure = sorted(e.name for e in it if e.name.startswith(STRUCTURE_PART_PREFIX) and e.is_dir())
    try:
        manifest = json.loads((store.path / INDEX_DIR / PART_ROWS_DIR / PART_ROWS_MANIFEST).read_text())
        covered = set(manifest["parts"])
    except (OSError, ValueError, KeyError, TypeError):
        named = set(pc.unique(store.entries.column("part")).to_pylist()) if store.entries.num_rows else set()
        last = max(named, default="")
        covered = {name for name in structure if name <= last or name in named}
    shown = held_parts(store) if held_doc is None else held_doc
    held = set(shown["parts"])
    if held:
        n_held = shown["entries"]
        held_text = f"{n_held} entr{'y' if n_held == 1 else 'ies'}"
        if shown["new"] is not None and shown["updated"]:
            held_text += f" ({shown['new']} new, {shown['updated']} a newer version of a served one)"
        out.append(f"{store.path}: {held_text} in {len(held)} structure "
                   f"part{'' if len(held) == 1 else 's'} ({', '.join(sorted(held))}) written but not yet published: "
                   f"the build that wrote {'it' if len(held) == 1 else 'them'} has not run its MSA and chem stages "
                   "after it (a build is running, or was stopped; run `featurecache build` on the store to finish "
                   f"{'it' if len(held) == 1 else 'them'})")  # fmt: skip
    n_entries, n_parts = 0, 0
    for name in structure:
        if name in covered or name in held:
            continue
        try:
            done = (parts_dir / name / PART_INDEX_DIR / PART_DONE_FILE).read_text()
            n = int(json.loads(done).get("n_entries", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            continue  # verify names a part without a readable manifest
        if n:
            n_entries, n_parts = n_entries + n, n_parts + 1
    if n_entries:
        out.append(f"{store.path}: {n_entries} entr{'y' if n_entries == 1 else 'ies'} in {n_parts} structure "
                   f"part{'' if n_parts == 1 else 's'} written after the index was last rebuilt "
                   f"{'is' if n_entries == 1 else 'are'} not in it "
                   "(stale index: a build is running, or was stopped; run `featurecache build` on the store to "
                   "rebuild it)")  # fmt: skip
    return out


def _part_entries(part: Path) -> int:
    """A part's entry count from its ``part.json`` (0 when it does not read)."""
    from featurecache.store.layout import PART_DONE_FILE, PART_INDEX_DIR

    try:
        return int(json.loads((part / PART_INDEX_DIR / PART_DONE_FILE).read_text()).get("n_entries", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


#: ``info --json --no-msa``'s count of the polymer chains without an MSA from files
#: (:func:`chains_without_msa`'s document)
NO_MSA_KEY = "chains_without_msa"
#: ``info --json --no-msa``'s listing of those chains, one object per chain (:data:`NO_MSA_COLUMNS`)
NO_MSA_LIST_KEY = "no_msa_chains"
#: the columns of ``info --no-msa``'s listing (``--tsv``: its header line; ``--json``: each chain's
#: keys): ``length`` is the chain's sequence length (its MSA's query), ``msa_depth`` 1 for the
#: single-sequence MSA, 0 where the index lists no MSA for the chain
NO_MSA_COLUMNS = ("entry_id", "label_id", "auth_id", "mol_type", "length", "msa_depth")
_NO_MSA_TYPES = tuple(MOL_TYPE_NAMES[:3])  # protein, rna, dna: the polymer types


def chains_without_msa(store: LocalStore) -> tuple[dict[str, Any] | None, pa.Table]:
    """The polymer chains whose MSA came from no file (``chains.msa_files`` 0: the single-sequence
    MSA, or none the index lists), as ``info`` shows them (review R40d s51 #3: the build's
    "polymer chains with an MSA from files 22 of 25" had no way to its 3 chains). Returns
    ``({"polymer_chains", "chains", "by_mol_type": {"protein", "rna", "dna"}, "entries",
    "not_stored"}, their rows)``: ``chains`` of ``polymer_chains`` lack one, in ``entries`` entries;
    ``not_stored`` of them have no MSA in the index at all (``msa_key`` "": a first build not
    finished, or pruned by ``prune --sources-gone`` until the next build). The rows
    (:data:`NO_MSA_COLUMNS`, in the chains index's order: by entry, then chain) with ``mol_type``
    as its name. None and no rows for an index without the MSA columns."""
    chains = store.chains
    empty = pa.table({c: pa.array([], pa.int64() if c in ("length", "msa_depth") else pa.string())
                      for c in NO_MSA_COLUMNS})  # fmt: skip
    if chains.num_rows and not {"msa_files", "msa_depth", "msa_key", "mol_type"} <= set(chains.column_names):
        return None, empty
    if not chains.num_rows:
        doc = {"polymer_chains": 0, "chains": 0, "by_mol_type": dict.fromkeys(_NO_MSA_TYPES, 0), "entries": 0,
               "not_stored": 0}  # fmt: skip
        return doc, empty
    polymer = pc.fill_null(
        pc.not_equal(chains.column("mol_type"), pa.scalar(int(MolType.LIGAND), pa.int8())), False
    )
    missing = pc.and_(polymer, pc.fill_null(pc.equal(chains.column("msa_files"), 0), True))
    rows = chains.filter(missing)
    types = rows.column("mol_type").to_pylist()
    names = [MOL_TYPE_NAMES[t] for t in types]
    by_type = Counter(names)
    listed = pa.table({
        "entry_id": rows.column("entry_id"),
        "label_id": rows.column("label_id"),
        "auth_id": rows.column("auth_id"),
        "mol_type": pa.array(names, pa.string()),
        "length": pc.utf8_length(rows.column("sequence")).cast(pa.int64()),
        "msa_depth": rows.column("msa_depth").cast(pa.int64()),
    })  # fmt: skip
    doc = {
        "polymer_chains": int(pc.sum(polymer.cast(pa.int64())).as_py() or 0),
        "chains": rows.num_rows,
        "by_mol_type": {t: by_type.get(t, 0) for t in _NO_MSA_TYPES},
        "entries": len(pc.unique(rows.column("entry_id"))),
        "not_stored": int(pc.sum(pc.equal(rows.column("msa_key"), "").cast(pa.int64())).as_py() or 0),
    }
    return doc, listed


def _no_msa_text(doc: dict[str, Any] | None, listed: bool) -> str:
    """``info``'s row for :func:`chains_without_msa`'s count: "2 of 4 polymer chains (protein 1,
    DNA 1) in 2 entries (…--no-msa lists them)"; "0 of 4 polymer chains" when none lacks one."""
    if doc is None:
        return "not in the index (an index of an older featurecache: no MSA columns)"
    text = f"{doc['chains']} of {_plural(doc['polymer_chains'], 'polymer chain', 'polymer chains')}"
    if not doc["chains"]:
        return text
    kinds = ", ".join(f"{t if t == 'protein' else t.upper()} {n}" for t, n in doc["by_mol_type"].items() if n)
    text += f" ({kinds}) in {_plural(doc['entries'], 'entry', 'entries')}"
    if doc["not_stored"]:
        text += (f", {doc['not_stored']} of them with no MSA in the index yet (a first build not finished, or pruned "
                 "by prune --sources-gone)")  # fmt: skip
    return f"{text} ({'listed below' if listed else 'featurecache info STORE --no-msa lists them'})"


def print_info(
    path: Path,
    *,
    as_json: bool = False,
    failures: bool = False,
    warnings: bool = False,
    tsv: bool = False,
    no_msa: bool = False,
) -> list[str]:
    """Print the store's summary, with its failures grouped by stage and error class (the
    :data:`SHOWN_FAILURE_GROUPS` largest groups: count, one example); ``failures``: every failure
    row (path, stage, error, message) instead; ``warnings``: every warning row (entry, stage,
    message, file; else only their count by stage); ``no_msa``: every polymer chain without an MSA
    from files (:func:`chains_without_msa`; else only their count). Listings are printed
    :data:`LISTING_BATCH` rows at a time (a table of fixed column widths, so the batches line up);
    ``tsv``: only the listings asked for, as tab-separated lines (:data:`TSV_COLUMNS`; ``no_msa``
    alone: :data:`NO_MSA_COLUMNS`), no summary. Returns
    :func:`index_lag`'s lines, the featurizer versions' (``versions.version_notes``: data of
    another version than this code's, or of several), the MSA stages' (``versions.msa_stage_notes``:
    MSAs merged by an older stage) and what killed commands left (``leftovers.leftover_note``),
    for the caller to show as warnings (on stderr)."""
    from rich.table import Table

    from featurecache.build.summary import printable
    from featurecache.store.definitions import (
        MIXED_DEFINITIONS_KEY,
        mixed_definitions,
        mixed_definitions_doc,
        mixed_definitions_note,
    )
    from featurecache.store.reader import open_store

    store = open_store(path)
    info = store.info()
    lag = index_lag(store, info["held_parts"]) + version_notes(info[VERSIONS_KEY], str(store.path))
    # (here, not in info_document: it reads the live parts' manifests, which the lookup service's
    # /v1/info should not on every request)
    mixed = mixed_definitions(store.path, store.entries, store.components)
    info[MIXED_DEFINITIONS_KEY] = mixed_definitions_doc(mixed)
    if mixed.entries:
        lag.append(mixed_definitions_note(info[MIXED_DEFINITIONS_KEY]))
    lag += msa_stage_notes(store, info[MSA_STAGES_KEY])
    leftovers = leftover_note(store.path)  # (their bytes are in the size: bytes.total)
    lag += [leftovers] if leftovers is not None else []
    failure_rows = store.failures
    warning_rows = store.warnings.sort_by([("entry_id", "ascending")]) if warnings else None
    no_msa_doc, no_msa_rows = chains_without_msa(store)
    if as_json:
        if no_msa:  # (only then: every key of a plain --json stays as it was, as --failures' and --warnings')
            info[NO_MSA_KEY] = no_msa_doc
            info[NO_MSA_LIST_KEY] = no_msa_rows.to_pylist()
        if failures:
            info["failures"] = [{k: r[k] for k in ("path", "entry_id", "stage", "error_class", "message")}
                                for r in failure_rows.to_pylist()]  # fmt: skip
        if warning_rows is not None:
            info["warnings"] = [{k: r[k] for k in WARNING_COLUMNS} for r in warning_rows.to_pylist()]
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
        return lag
    if tsv:
        if failures or warnings:
            _write_tsv(failure_rows if failures else None, warning_rows)
        else:
            _write_no_msa_tsv(no_msa_rows)
        return lag
    console = table_console()
    t = Table(title=f"featurecache store {info['path']}", show_header=False)
    t.add_column("", style="bold", overflow="fold")
    t.add_column("", overflow="fold")
    for k, v in info["versions"].items():
        t.add_row(k, str(v))
    t.add_row("updated", str(info["updated"]))
    for k, v in info["counts"].items():
        t.add_row(k, str(v))
    t.add_row("parts", ", ".join(f"{k}: {v}" for k, v in sorted(info["parts"].items())) or "none")
    t.add_row("size", f"{info['bytes']['total'] / 1e6:.2f} MB (index {info['bytes']['index'] / 1e3:.0f} kB)")
    for stage, n in sorted(info["failures_by_stage"].items()):
        t.add_row(f"failed at {stage}", str(n))
    if info["warnings_by_stage"]:
        by_stage = ", ".join(f"{k} {n}" for k, n in info["warnings_by_stage"].items())
        t.add_row(
            "warnings by stage",
            f"{by_stage}{'' if warnings else ' (featurecache info STORE --warnings lists them)'}",
        )
    removed = info["removed"]
    if removed["entries"] or removed["msas"]:
        t.add_row("removed", f"{_plural(removed['entries'], 'entry', 'entries')}, "
                             f"{_plural(removed['msas'], 'MSA', 'MSAs')} (prune --sources-gone, verify --repair, a "
                             "build that found their part deleted; a build of their files stores them again)")  # fmt: skip
    else:
        t.add_row("removed", "none")
    for label, value in _build_input_rows(info["build_inputs"]):
        t.add_row(label, printable(value, limit=10_000))
    # what the parts record (the root's featurizer_version above is the latest build's)
    for kind in ("entries", "msas"):
        counts = info[VERSIONS_KEY][kind]
        shown = ", ".join(f"{n} of {v}" for v, n in counts.items()) or "none"
        t.add_row(f"featurizer of {'MSAs' if kind == 'msas' else kind}", shown)
    # the MSA stage that merged each MSA built from files (single-sequence ones are never rebuilt)
    stages = info[MSA_STAGES_KEY]["msas"]
    t.add_row("MSA stage of MSAs", ", ".join(f"{n} of {_stage_text(v)}" for v, n in stages.items()) or "none")
    # ...counted apart from the two rows above, so that the MSA rows add up to the msas count
    t.add_row("single-sequence MSAs", str(info[MSA_STAGES_KEY]["msas_single_sequence"]))
    # ...and the polymer chains that use them (the rest of the build summary's "polymer chains with an
    # MSA from files"): a label no wider than the others, the table's columns as they were
    t.add_row("chains without an MSA", _no_msa_text(no_msa_doc, no_msa))
    console.print(t)
    if failure_rows.num_rows and not failures:
        console.print(_failure_groups(failure_rows))
    if failure_rows.num_rows and failures:
        _print_listing(console, "failures", FAILURE_COLUMNS, failure_rows)
    if warning_rows is not None and warning_rows.num_rows:
        _print_listing(console, "warnings (the entries are built)", WARNING_COLUMNS, warning_rows)
    if no_msa and no_msa_rows.num_rows:
        shown = no_msa_rows.set_column(no_msa_rows.column_names.index("length"), "length",
                                       no_msa_rows.column("length").cast(pa.string()))  # fmt: skip
        shown = shown.set_column(shown.column_names.index("msa_depth"), "msa_depth",
                                 shown.column("msa_depth").cast(pa.string()))  # fmt: skip
        _print_listing(console, "polymer chains without an MSA from files (msa_depth 1: the single-sequence MSA; "
                       "0: none in the index)", NO_MSA_COLUMNS, shown, _NO_MSA_RATIOS)  # fmt: skip
    return lag


#: the narrowest console ``info`` and ``show`` print their tables to (rich's width for a pipe when
#: COLUMNS is not set): a narrower one (COLUMNS=20, a split pane) left a table's frame no room for
#: its values, which rich then cut to an ellipsis or to nothing (an 8-column table at 20 columns)
MIN_TABLE_WIDTH = 80


def table_console() -> Any:
    """stdout's console for ``info`` and ``show``, at least :data:`MIN_TABLE_WIDTH` wide (review
    R38a s50 leftovers #4: with COLUMNS=20, even into a pipe, values were cut). Values never
    cut: their columns fold (a long value goes on over the next lines of its cell, whole), which
    needs a width the frame fits in; on a terminal narrower than that, the terminal wraps the
    lines and nothing is lost either."""
    from rich.console import Console

    console = Console()
    return console if console.width >= MIN_TABLE_WIDTH else Console(width=MIN_TABLE_WIDTH)


#: the failure groups ``info`` shows without ``--failures`` (the largest first)
SHOWN_FAILURE_GROUPS = 10
#: rows of a ``--failures`` / ``--warnings`` listing rendered at a time: a table of all 43,750
#: warnings of a 198k-entry store took 26.6 s and 601 MB, its rows all held (review R26a s44 #7)
LISTING_BATCH = 1000
#: the columns ``info --failures`` gives for each failure, in its table
FAILURE_COLUMNS = ("path", "stage", "error_class", "message")
#: the columns of ``info --tsv``: one line per failure (``record`` "failure") or warning ("warning")
TSV_COLUMNS = ("record", "entry_id", "path", "stage", "error_class", "message")
#: each column's share of the listing's width: fixed, so that the batches' tables line up
_LISTING_RATIOS = {"path": 3, "entry_id": 2, "stage": 1, "error_class": 2, "message": 6}
#: the same for ``info --no-msa``'s listing: every header unfolded on an 80-column console
_NO_MSA_RATIOS = {"entry_id": 16, "label_id": 8, "auth_id": 8, "mol_type": 9, "length": 7, "msa_depth": 10}


def _failure_groups(failures: pa.Table) -> Any:
    """The failures by (stage, error class), largest first, each with its count and one example
    (the first row's path and message), at most :data:`SHOWN_FAILURE_GROUPS` rows: 2,000 failures of
    a 198k-entry store wrapped to 838 lines as rows (review R26a s44 #7)."""
    from rich.table import Table

    from featurecache.build.summary import printable

    groups: dict[tuple[str, str], list[Any]] = {}
    for stage, error, path, message in zip(*(failures.column(c).to_pylist() for c in
                                             ("stage", "error_class", "path", "message")), strict=True):  # fmt: skip
        group = groups.setdefault((stage, error), [0, path, message])
        group[0] += 1
    ordered = sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0]))
    t = Table(title=f"failures ({failures.num_rows}) by stage and error class")
    for col in ("stage", "error_class", "count", "example"):
        t.add_column(col, overflow="fold", justify="right" if col == "count" else "left")
    for (stage, error), (n, path, message) in ordered[:SHOWN_FAILURE_GROUPS]:
        named = Path(path).name in message  # most messages begin with the file's name
        t.add_row(stage, error, str(n), printable(message if named else f"{path}: {message}", limit=120))
    left = len(ordered) - SHOWN_FAILURE_GROUPS
    t.add_row("…" if left > 0 else "", f"{left} more group(s)" if left > 0 else "", "",
              "each failure: featurecache info STORE --failures (or --json --failures, --tsv --failures)")  # fmt: skip
    return t


def _print_listing(
    console: Any, title: str, columns: tuple[str, ...], rows: pa.Table, ratios: dict[str, int] | None = None
) -> None:
    """``rows`` as tables of :data:`LISTING_BATCH` rows, the title and header on the first only;
    each column's share of the width from ``ratios`` (:data:`_LISTING_RATIOS` when None)."""
    from rich.table import Table

    from featurecache.build.summary import printable

    for start in range(0, rows.num_rows, LISTING_BATCH):
        t = Table(title=title if not start else None, show_header=not start, expand=True)
        for col in columns:
            t.add_column(col, overflow="fold", ratio=(ratios or _LISTING_RATIOS)[col])
        for row in rows.slice(start, LISTING_BATCH).select(list(columns)).to_pylist():
            t.add_row(*(printable(row[c] or "", limit=10_000) for c in columns))
        console.print(t)


def _tsv_field(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _write_tsv(failures: pa.Table | None, warnings: pa.Table | None) -> None:
    """:data:`TSV_COLUMNS` with a header line, then one line per row, :data:`LISTING_BATCH` rows
    at a time (a tab, newline, carriage return or backslash in a value written ``\\t``, ``\\n``,
    ``\\r``, ``\\\\``; a missing value empty)."""
    out = sys.stdout
    out.write("\t".join(TSV_COLUMNS) + "\n")
    for record, table in (("failure", failures), ("warning", warnings)):
        if table is None:
            continue
        for start in range(0, table.num_rows, LISTING_BATCH):
            batch = table.slice(start, LISTING_BATCH).to_pylist()
            out.write("".join("\t".join([record, *(_tsv_field(r.get(c)) for c in TSV_COLUMNS[1:])]) + "\n"
                              for r in batch))  # fmt: skip
    out.flush()


def _write_no_msa_tsv(rows: pa.Table) -> None:
    """:data:`NO_MSA_COLUMNS` with a header line, then one line per chain of
    :func:`chains_without_msa` (values escaped as :func:`_write_tsv`'s)."""
    out = sys.stdout
    out.write("\t".join(NO_MSA_COLUMNS) + "\n")
    for start in range(0, rows.num_rows, LISTING_BATCH):
        batch = rows.slice(start, LISTING_BATCH).to_pylist()
        out.write("".join("\t".join(_tsv_field(r[c]) for c in NO_MSA_COLUMNS) + "\n" for r in batch))
    out.flush()


#: the columns ``info --warnings`` gives for each warning (``--json``: the keys)
WARNING_COLUMNS = ("entry_id", "stage", "message", "path")


def _stage_text(stage: str) -> str:
    return f"stage {stage}" if stage.isdigit() else f"a stage {stage}"  # "3 or older": not recorded


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


#: what ``info`` shows for a store built before builds recorded their inputs
NOT_RECORDED = "not recorded (the store's latest build was made by a featurecache that did not record it)"


def _build_input_rows(rec: dict[str, Any]) -> list[tuple[str, str]]:
    """``info``'s lines for :func:`recorded_build_inputs`: the latest build's --pdb-dir, --msa-dir
    and --ccd ("none" for an option it was run without)."""
    if not rec["recorded"]:
        return [("build inputs", NOT_RECORDED)]
    ccd = rec["ccd"]
    if ccd is None:
        ccd_text = "none (built without --ccd)"
    else:
        there = "" if Path(ccd["path"]).exists() else " (no longer there)"
        ccd_text = f"{ccd['path']} (fingerprint {ccd['fingerprint']}){there}"
    return [
        ("build --pdb-dir", rec["pdb_dir"] or "none"),
        ("build --msa-dir", rec["msa_dir"] or "none"),
        ("build --ccd", ccd_text),
    ]
