"""Which featurizer versions built a store's entries and MSAs (review R3 s24 #3, #5, #6).

Every part records the ``FEATURIZER_VERSION`` of the build that wrote it (``_index/part.json``)
and ``index/msas.arrow`` holds it per MSA. The root's ``featurizer_version`` is only the latest
build's: a newer featurecache that extends a store (another ``--pdb-dir``) keeps the entries of the
older one until they are rebuilt or pruned (``prune --sources-gone``), so a store may hold several
versions and only the parts tell. :func:`store_versions` counts them (``info``'s
:data:`VERSIONS_KEY`, also ``/v1/info``); :func:`version_notes` is the one line that ``info``,
``verify``, ``serve``, ``FeatureDataset`` and ``train`` print when the data are not all of this
featurecache's version.

The MSA stage (``build.msa_stage.MSA_STAGE_VERSION``: the merge rules, e.g. which copy of a row
gives its species) is part of every MSA's inputs key, so the next build with the MSAs' ``--msa-dir``
rewrites those of another stage; each MSA's index row records it (``msa_stage``; rows written
before stage 3, the first that records itself, have none). :func:`msa_stages` counts them
(``info``'s :data:`MSA_STAGES_KEY`) and :func:`msa_stage_notes` is ``info``'s and ``verify``'s
line when some were built by another stage than this featurecache's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featurecache.const import FEATURIZER_VERSION
from featurecache.errors import LoaderError, StoreError
from featurecache.store.layout import PART_DONE_FILE, PART_INDEX_DIR, PARTS_DIR

if TYPE_CHECKING:
    from featurecache.store.reader import LocalStore

__all__ = [
    "MSA_STAGES_KEY", "UNKNOWN", "UNRECORDED_STAGE", "VERSIONS_KEY", "FeaturizerChanged", "downgrade_line",
    "extension_notes", "newer_than_this_code",
    "msa_stage_notes", "msa_stages", "source_versions", "store_versions", "version_notes", "version_set",
    "versions_of",
]  # fmt: skip

#: the info document's key (``info --json``, ``/v1/info``)
VERSIONS_KEY = "featurizer_versions"
#: the version of a part whose ``part.json`` does not read or records none (:func:`store_versions`
#: counts its entries apart, as ``entries_unreadable``)
UNKNOWN = "unknown"
#: the info document's key of :func:`msa_stages` (``info --json``, ``/v1/info``)
MSA_STAGES_KEY = "msa_stages"
#: the stage of an MSA whose index row records none: stage 3 or an older one. Stage 3 is the first
#: MSA stage that records itself (``store.msa.MSAS_SCHEMA``'s ``msa_stage``), but only from the
#: commit that added the record (6ee8ed5): stage-3 MSAs written before it record nothing either
FIRST_RECORDED_STAGE = "3"
UNRECORDED_STAGE = f"{FIRST_RECORDED_STAGE} or older"

#: part.json path -> ((inode, mtime_ns, size), (featurizer version, source dir)); a committed part
#: is never written again, and one written again under its name is a new file
_cache: dict[str, tuple[tuple[int, int, int], tuple[str, str | None]]] = {}
_cache_lock = threading.Lock()


def part_record(root: Path, part: str) -> tuple[str, str | None]:
    """``(featurizer version, source dir)`` that part ``part`` of the store at ``root`` records
    (:data:`UNKNOWN`, None when its ``part.json`` does not read)."""
    path = os.path.join(root, PARTS_DIR, part, PART_INDEX_DIR, PART_DONE_FILE)
    try:
        st = os.stat(path)
    except OSError:
        return UNKNOWN, None
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    hit = _cache.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    record: tuple[str, str | None] = (UNKNOWN, None)
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads(Path(path).read_text())
        if isinstance(doc, dict):
            version = doc.get("featurizer_version")
            source = doc.get("source_dir")
            record = (str(version) if version else UNKNOWN, source if isinstance(source, str) else None)
    with _cache_lock:
        _cache[path] = (stamp, record)
    return record


def store_versions(store: LocalStore) -> dict[str, Any]:
    """The featurizer versions of the entries and MSAs the store's index lists:
    ``{"this_code": FEATURIZER_VERSION, "entries": {version: n}, "msas": {version: n},
    "msas_single_sequence": n, "entries_unreadable": n, "entry_source_dirs": {version: [dir, ...]}}``
    (an entry's version is its part's; an MSA's is its row's). Reads one small ``part.json`` per
    structure part the index names (kept while the file is unchanged); no array.

    ``msas`` counts the MSAs built from files. A single-sequence MSA (``n_files`` 0: the query row,
    no deletions, its one-hot profile) holds nothing the featurizer version decides, and the MSA stage
    never rebuilds one (``msa_stage._plan``), so its label stays that of the build that first wrote
    it: counted apart, in ``msas_single_sequence``, not as a version (review RF2 s24 #2).
    ``entries_unreadable``: entries whose part's ``part.json`` does not read or records no version
    (damage, ``featurecache verify``'s business), not a version (review RF2 s24 #4)."""
    entries, msas = store.entries, store.msas
    by_part: Counter[str] = Counter()
    if entries.num_rows and "part" in entries.column_names:
        by_part.update(entries.column("part").to_pylist())
    n_entries: Counter[str] = Counter()
    unreadable = 0
    dirs: dict[str, set[str]] = {}
    for part, n in by_part.items():
        version, source = part_record(store.path, part)
        if version == UNKNOWN:
            unreadable += n
            continue
        n_entries[version] += n
        if source is not None:
            dirs.setdefault(version, set()).add(source)
    n_msas: Counter[str] = Counter()
    single = 0
    if msas.num_rows and "featurizer_version" in msas.column_names:
        labels = msas.column("featurizer_version").to_pylist()
        n_files = (
            msas.column("n_files").to_pylist() if "n_files" in msas.column_names else [None] * len(labels)
        )
        for v, files in zip(labels, n_files, strict=True):
            if files == 0:
                single += 1
            else:
                n_msas[v or UNKNOWN] += 1
    return {
        "this_code": FEATURIZER_VERSION,
        "entries": dict(sorted(n_entries.items(), key=lambda kv: _version_key(kv[0]))),
        "msas": dict(sorted(n_msas.items(), key=lambda kv: _version_key(kv[0]))),
        "msas_single_sequence": single,
        "entries_unreadable": unreadable,
        "entry_source_dirs": {
            v: sorted(d) for v, d in sorted(dirs.items(), key=lambda kv: _version_key(kv[0]))
        },
    }


def msa_stages(store: LocalStore) -> dict[str, Any]:
    """The MSA stages that built the MSAs the store's index lists: ``{"this_code":
    MSA_STAGE_VERSION, "msas": {stage: n}, "msas_single_sequence": n}``; an MSA whose row records no
    stage counts under :data:`UNRECORDED_STAGE`. As in :func:`store_versions`, ``msas`` counts the
    MSAs built from files: a single-sequence MSA (``n_files`` 0) is never rebuilt
    (``msa_stage._plan``), its stage says nothing of its rows, and it is counted apart. Reads the
    index only."""
    from featurecache.const import MSA_STAGE_VERSION

    msas = store.msas
    n_msas: Counter[str] = Counter()
    single = 0
    if msas.num_rows:
        names = msas.column_names
        stages = msas.column("msa_stage").to_pylist() if "msa_stage" in names else [None] * msas.num_rows
        n_files = msas.column("n_files").to_pylist() if "n_files" in names else [None] * msas.num_rows
        for stage, files in zip(stages, n_files, strict=True):
            if files == 0:
                single += 1
            else:
                n_msas[stage or UNRECORDED_STAGE] += 1
    return {
        "this_code": MSA_STAGE_VERSION,
        "msas": dict(sorted(n_msas.items(), key=lambda kv: _stage_key(kv[0]))),
        "msas_single_sequence": single,
    }


def msa_stage_notes(store: LocalStore, doc: dict[str, Any] | None = None) -> list[str]:
    """One line when some of the store's MSAs built from files (``doc``: its :func:`msa_stages`,
    counted when None) were built by another MSA stage than this featurecache's: how many, and that
    the next build with their ``--msa-dir`` (those their parts record, named) rewrites them. Empty
    when every one is of this code's stage."""
    doc = msa_stages(store) if doc is None else doc
    this = str(doc.get("this_code"))
    counts: dict[str, int] = doc.get("msas") or {}
    older = {v: n for v, n in counts.items() if v != this and _stage_key(v) < _stage_key(this)}
    other = {v: n for v, n in counts.items() if v != this and v not in older}  # a newer featurecache's
    where = str(store.path)
    out: list[str] = []
    for which, held in (("an older", older), ("another", other)):
        if not held:
            continue
        n = sum(held.values())
        stages = ", ".join(f"{k} of {_stage_label(v)}" for v, k in held.items())
        dirs = _msa_dirs(store, set(held))
        there = f" ({', '.join(shlex.quote(d) for d in dirs)})" if dirs else ""
        build = "`featurecache build`" if which == "an older" else "`featurecache build` of this featurecache"
        out.append(
            f"{where}: {n} MSA{' was' if n == 1 else 's were'} built by {which} MSA stage ({stages}; this "
            f"featurecache's is {this}): the next {build} with their --msa-dir{there} rewrites them"
        )
    return out


def _msa_dirs(store: LocalStore, stages: set[str]) -> list[str]:
    """The ``--msa-dir``s the MSA parts of the index's file-built MSAs of ``stages`` record."""
    msas = store.msas
    names = msas.column_names
    if not msas.num_rows or "part" not in names:
        return []
    parts = msas.column("part").to_pylist()
    st = msas.column("msa_stage").to_pylist() if "msa_stage" in names else [None] * len(parts)
    files = msas.column("n_files").to_pylist() if "n_files" in names else [None] * len(parts)
    wanted = {
        p for p, s, f in zip(parts, st, files, strict=True) if f != 0 and (s or UNRECORDED_STAGE) in stages
    }
    return sorted({d for p in wanted if (d := part_record(store.path, p)[1])})


def _stage_key(stage: str) -> tuple[int, str]:
    """Order of MSA stages: :data:`UNRECORDED_STAGE` before every recorded one, numbers as numbers."""
    if stage == UNRECORDED_STAGE:
        return (int(FIRST_RECORDED_STAGE) - 1, "")
    return (int(stage), "") if stage.isdigit() else (1 << 30, stage)


def _stage_label(stage: str) -> str:
    return f"stage {stage}" if stage != UNRECORDED_STAGE else f"a stage {stage}"


class FeaturizerChanged(LoaderError):
    """A lookup client's service moved to an index whose featurizer versions differ from those the
    client started on (its store rebuilt or extended by another featurecache): raised by a client
    made with ``on_featurizer_change="raise"`` (``featurecache train``), and by ``FeatureDataset``'s
    iterator when a sample fails so."""


def source_versions(reader: Any) -> dict[str, Any] | None:
    """:func:`store_versions` of a reader: a ``LocalStore`` counts them itself; a lookup client asks
    its service (``LookupClient.featurizer_versions``: ``/v1/service``, never ``/v1/info``); a reader
    with only an ``info()``, from that (:func:`versions_of`); None for a reader that can say neither."""
    from featurecache.store.reader import LocalStore

    if isinstance(reader, LocalStore):
        return store_versions(reader)
    cached = getattr(reader, "featurizer_versions", None)
    if callable(cached):
        doc = cached()
        return doc if isinstance(doc, dict) else None
    info = getattr(reader, "info", None)
    if not callable(info):
        return None
    try:
        return versions_of(info())
    except Exception:  # an info this code does not know: no versions rather than no training
        return None


def versions_of(info: dict[str, Any]) -> dict[str, Any] | None:
    """The :func:`store_versions` document in an info document (``LocalStore.info()``, ``/v1/info``),
    or one made of its root ``featurizer_version`` (a service older than this code: every entry
    counted under it); None when it has neither."""
    doc = info.get(VERSIONS_KEY)
    if isinstance(doc, dict) and isinstance(doc.get("entries"), dict):
        return doc
    root = (info.get("versions") or {}).get("featurizer_version")
    if not root:
        return None
    counts = info.get("counts") or {}
    return {"this_code": None, "entries": {str(root): counts.get("entries", 0)},
            "msas": {str(root): counts.get("msas", 0)} if counts.get("msas") else {},
            "entry_source_dirs": {}}  # fmt: skip


def version_set(doc: dict[str, Any] | None) -> tuple[str, ...]:
    """The versions a :func:`store_versions` document names (entries and MSAs), oldest first."""
    if not doc:
        return ()
    return tuple(sorted(set(doc.get("entries") or {}) | set(doc.get("msas") or {}), key=_version_key))


def _counted(doc: dict[str, Any], version: str) -> str:
    n_e, n_m = (doc.get("entries") or {}).get(version, 0), (doc.get("msas") or {}).get(version, 0)
    parts = [f"{n_e} entr{'y' if n_e == 1 else 'ies'}"] if n_e else []
    if n_m:
        parts.append(f"{n_m} MSA{'' if n_m == 1 else 's'}")
    return " and ".join(parts)


def version_notes(
    doc: dict[str, Any] | None,
    where: str,
    *,
    this_code: str | None = FEATURIZER_VERSION,
    code: str = "this featurecache",
) -> list[str]:
    """One line when the store ``doc`` describes (:func:`store_versions`; ``where``: the store or
    URL as messages name it) holds data of a featurizer version other than ``this_code`` (None: do
    not compare: say only when the versions are mixed; ``code``: whose version it is, e.g. "the
    service's featurecache"), or of several: what each version holds, and the build that rebuilds
    the others. Empty when all is one version (``this_code``'s)."""
    unreadable = _unreadable_note(doc, where)
    versions = version_set(doc)
    if not versions or doc is None:
        return unreadable
    if len(versions) == 1 and (this_code is None or versions[0] == this_code):
        return unreadable
    newest = this_code if this_code is not None else max(versions, key=_version_key)
    held = "; ".join(f"{_counted(doc, v)} of {v}" for v in sorted(versions, key=_version_key))
    if len(versions) > 1:
        head = f"{where} mixes featurizer versions, whose features differ: {held}"
    else:
        head = f"{where} holds {held.replace(' of ', ' of featurizer ')}"
    if this_code is not None:
        head += f"; {code} builds featurizer {this_code}"
    # a newer featurecache's data: rebuilding them with this one would take them back to its
    # featurizer (review RF1 s27 #2): the advice is to upgrade
    newer = [v for v in versions if this_code is not None and _version_key(v) > _version_key(this_code)]
    others = [v for v in sorted(versions, key=_version_key) if v != newest and v not in newer]
    fix = ""
    if others:
        dirs = sorted({d for v in others for d in (doc.get("entry_source_dirs") or {}).get(v, [])})
        what = f"rebuild those of {', '.join(others)}"
        recorded = _recorded_rebuild(where, dirs)
        if recorded:
            fix = f": {what} with {recorded}"
        elif dirs:
            out = where if "://" not in where else "STORE"
            builds = " and ".join(
                f"`featurecache build --pdb-dir {shlex.quote(d)} --out {shlex.quote(out)}`" for d in dirs
            )
            fix = f": {what} with {builds} (with the --msa-dir, --ccd and options of their build)"
        else:
            fix = f": {what} with `featurecache build` from the same inputs"
    if newer:
        # not "cannot verify them": verify checks them, and names only those it could not read
        # (review R26b s44 #9: the note said they were not verified while verify had verified them)
        mine = code == "this featurecache"
        fix += (f"{'; ' if fix else ': '}those of {', '.join(sorted(newer, key=_version_key))} were built by a "
                f"newer featurecache: upgrade {'featurecache' if mine else code} to be sure to read and verify "
                f"them ({'this one' if mine else 'it'} may not read every one of them: `featurecache verify` "
                f"names those it could not verify; its build refuses to rebuild them as featurizer {this_code} "
                "without --allow-downgrade)")  # fmt: skip
    return [head + fix, *unreadable]


def _recorded_rebuild(where: str, dirs: list[str]) -> str:
    """The build(s) that rebuild a local store's (``where``) data of an older featurizer, with
    the options it records, as ``verify --repair`` prints them (``verify.rebuild_command``): one
    per ``--pdb-dir`` of ``dirs`` (none: the store's latest structure part's), ``--msa-dir`` the
    latest MSA part's that records one (a build without it rebuilds no MSA from files: review R41d
    s51 #1), ``--ccd`` and the other options the store records, and what it cannot tell; "" for a
    service's URL, a path that is not a store, or a store whose builds recorded no inputs (made
    before builds recorded them: its ``--ccd`` would be a guess)."""
    if "://" in where or not (Path(where) / "zarr.json").is_file():
        return ""
    from featurecache.store.info import recorded_build_inputs
    from featurecache.store.verify import Damaged, rebuild_command, rebuild_note  # verify imports this

    try:
        attrs = json.loads((Path(where) / "zarr.json").read_text()).get("attributes")
        if not recorded_build_inputs(attrs if isinstance(attrs, dict) else {})["recorded"]:
            return ""
        wanted = [[Damaged("entry", "", "", "", "", d, None, "", pdb_dir=d)] for d in dirs] or [[]]
        builds = " and ".join(f"`{rebuild_command(Path(where), damaged)}`" for damaged in wanted)
        note = rebuild_note(Path(where), wanted[0])
    except (OSError, ValueError, StoreError):
        return ""
    return builds + (f" ({note})" if note else "")


def _unreadable_note(doc: dict[str, Any] | None, where: str) -> list[str]:
    """The line for the entries whose part record does not read (``entries_unreadable``): damage
    that ``verify`` reports and ``verify --repair`` mends, not a featurizer version."""
    n = (doc or {}).get("entries_unreadable") or 0
    if not n:
        return []
    return [
        f"{where}: {n} entr{'y' if n == 1 else 'ies'} whose part record cannot be read (featurizer version "
        "unknown): see `featurecache verify`"
    ]


def extension_notes(
    root: Path, stored: Any, pdb_dir: Path, homes: Callable[[str], bool] | None = None,
    input_ids: Iterable[str] = (),
) -> list[str]:  # fmt: skip
    """A build's one line when the store ``root`` it extends holds entries of another featurizer
    version than this code's that the build does not rebuild: those of parts written from another
    ``--pdb-dir`` than ``pdb_dir`` (``stored``: the entries index the build starts from; ``homes``:
    whether a part is of ``pdb_dir``, ``build.discover.directory_parts``, which counts a directory
    renamed or moved to it; without it, the part must record ``pdb_dir``) whose id no input of
    ``pdb_dir`` takes (``input_ids``: the entry ids of the build's inputs; a part written before
    parts recorded their ``--pdb-dir`` records none, and a build of its own inputs upgrades it:
    review R29b s46 #4). The entries of its own ``--pdb-dir`` it rebuilds (the version is in
    their keys)."""
    from featurecache.build.discover import resolved

    if not stored.num_rows or "part" not in stored.column_names:
        return []
    here = str(resolved(Path(pdb_dir)))
    taken = set(input_ids)
    parts = stored.column("part").to_pylist()
    if taken and "id" in stored.column_names:  # an entry an input of this build takes is rebuilt
        parts = [p for p, i in zip(parts, stored.column("id").to_pylist(), strict=True) if i not in taken]
    counts: Counter[tuple[str, str]] = Counter()
    for part, n in Counter(parts).items():
        version, source = part_record(root, part)
        # a part whose record does not read is damage (verify's), not another version
        mine = homes(part) if homes is not None else source == here
        if version not in (FEATURIZER_VERSION, UNKNOWN) and not mine:
            counts[(version, source or "")] += n
    if not counts:
        return []
    held = "; ".join(
        f"{n} entr{'y' if n == 1 else 'ies'} of featurizer {v} from {d or 'a --pdb-dir it did not record'}"
        for (v, d), n in sorted(counts.items(), key=lambda kv: (_version_key(kv[0][0]), kv[0][1]))
    )
    dirs = sorted({d for _, d in counts if d})
    builds = " and ".join(
        f"`featurecache build --pdb-dir {shlex.quote(d)} --out {shlex.quote(str(root))}`" for d in dirs
    )
    return [
        f"adding featurizer {FEATURIZER_VERSION} entries to {root}, which holds {held}: the store will mix "
        f"featurizer versions, whose features differ; rebuild them with {builds or '`featurecache build` from their inputs'}"
        " (with the --msa-dir, --ccd and options of their build)"
    ]


def newer_than_this_code(version: str) -> bool:
    """Whether featurizer ``version`` is newer than this code's, field by field as numbers
    ("0.11.0" is newer than "0.10.0"; :data:`UNKNOWN` is not)."""
    return version != UNKNOWN and _version_key(version) > _version_key(FEATURIZER_VERSION)


def downgrade_line(root: Path, pdb_dir: Path, msa_dir: Path | None) -> str | None:
    """The line saying which entries and MSAs of the store ``root`` a newer featurecache built that
    a build of ``pdb_dir`` (``msa_dir``) with this code would rebuild, taking them back to this
    code's featurizer (review R26b s44 #4: an older install's build over a store a newer one had
    rebuilt rebuilt every entry and MSA, exit 0, unsaid); None when there are none. An entry is
    rebuilt when an input of ``pdb_dir`` takes its id (the featurizer version is in its key:
    ``build.discover.input_ids``, the files walked, not read); an MSA from files when one of its
    files is under ``msa_dir`` (the version is in its inputs key). The directories are walked only
    when the index names data of a newer featurizer; an index that does not read says nothing (the
    build rebuilds it)."""
    from featurecache.errors import StoreError
    from featurecache.store.index import read_table
    from featurecache.store.layout import INDEX_DIR
    from featurecache.store.msa import latest_msas

    root = Path(root)
    try:
        path = root / INDEX_DIR / "entries.arrow"
        entries = read_table(path) if path.is_file() else None
        path = root / INDEX_DIR / "msas.arrow"
        msas = latest_msas(read_table(path)) if path.is_file() and msa_dir is not None else None
    except (StoreError, KeyError, OSError):
        return None
    entries_n = _newer_entries(root, entries, Path(pdb_dir), msa_dir) if entries is not None else Counter()
    msas_n = _newer_msas(root, msas, Path(msa_dir)) if msas is not None and msa_dir is not None else Counter()
    if not entries_n and not msas_n:
        return None
    doc = {"entries": dict(entries_n), "msas": dict(msas_n)}
    versions = sorted(set(entries_n) | set(msas_n), key=_version_key)
    held = "; ".join(f"{_counted(doc, v)} of featurizer {v}" for v in versions)
    return (f"this build would rebuild {held}, built by a newer featurecache, as featurizer {FEATURIZER_VERSION} "
            f"(this featurecache's): a downgrade of {root}; upgrade featurecache to build on it, or give "
            "--allow-downgrade to rebuild them as this one's")  # fmt: skip


def _newer_entries(root: Path, entries: Any, pdb_dir: Path, msa_dir: Path | None) -> Counter[str]:
    """By version, the entries of the index ``entries`` of a newer featurizer whose id an input of
    ``pdb_dir`` takes (:func:`downgrade_line`)."""
    from featurecache.build.discover import StoredEntries, input_ids

    if not entries.num_rows or "part" not in entries.column_names:
        return Counter()
    newer = {}
    for part in set(entries.column("part").to_pylist()):
        version = part_record(root, part)[0]
        if newer_than_this_code(version):
            newer[part] = version
    if not newer:
        return Counter()
    stored = StoredEntries(root, entries)
    ids = set(input_ids(pdb_dir, exclude=root, msa_dir=msa_dir, warn=False, stored=stored).values())
    return Counter(newer[part] for eid, part in stored.parts.items() if eid in ids and part in newer)


def _newer_msas(root: Path, msas: Any, msa_dir: Path) -> Counter[str]:
    """By version, the MSAs from files of the index ``msas`` (latest rows) of a newer featurizer one
    of whose files is under ``msa_dir`` (:func:`downgrade_line`)."""
    if not msas.num_rows or not {"featurizer_version", "n_files", "sources"} <= set(msas.column_names):
        return Counter()
    rows = [
        m for m in msas.select(["featurizer_version", "n_files", "sources"]).to_pylist()
        if m["n_files"] and m["sources"] and newer_than_this_code(str(m["featurizer_version"] or UNKNOWN))
    ]  # fmt: skip
    if not rows:
        return Counter()
    from featurecache.build.msa_stage import _candidate_files  # the build imports this module

    listed = {rel for rel, _size, _mtime in _candidate_files(msa_dir, root, warn=False)}
    return Counter(
        str(m["featurizer_version"]) for m in rows if {src.split("#", 1)[0] for src in m["sources"]} & listed
    )


def _version_key(version: str) -> tuple[Any, ...]:
    """Sort key of a version string: numeric fields as numbers ("0.10.0" after "0.9.0")."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in version.replace("-", ".").split("."))
