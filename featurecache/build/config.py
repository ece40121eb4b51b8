"""Build configuration: the settings of a build, and the hashes of them that key stored data.

What a build rebuilds is decided by each stored item's own key, not by one hash of the config:

* a structure entry's key (``discover.entry_key``) holds :meth:`BuildConfig.entry_config_hash`:
  the fields of :meth:`BuildConfig.feature_dict` (interface cutoff, featurizer version,
  crystallization aids); the CCD is in no entry key since session 44 (each entry records the
  definitions it used: ``build.ccd_keys``), only in the key of failures and of older entries;
* a stored MSA's key (``msa_stage._inputs_key``) holds the depth cap;
* ``conformer_timeout_s`` is in no key: a build at another one recomputes no stored conformer.

:meth:`BuildConfig.hash` (every field; not the CCD) is recorded in the store's root as
``config_hash`` and only displayed (``featurecache info``): it keys nothing.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Final

from featurecache.const import DEFAULT_MSA_DEPTH_CAP, FEATURIZER_VERSION
from featurecache.errors import UsageError
from featurecache.featurize.interfaces import INTERFACE_CUTOFF


class Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


#: the default of a recorded build setting (``run_build(ccd=...)``, ``BuildConfig(msa_depth_cap=...,
#: keep_crystallization_aids=...)``) that the caller left out: the build runs at the setting's
#: default, but one over a store that records another value is refused (:func:`settings_left_out`),
#: as ``featurecache build`` without the option is
UNSET: Final = Unset.UNSET

#: the recorded settings of a :class:`BuildConfig`, each with the flag of ``featurecache build``
#: that gives it (and the one that gives it off, for a flag)
RECORDED_FIELDS: Final = {"msa_depth_cap": "--msa-depth", "keep_crystallization_aids": "--keep-cryst-aids"}


@dataclass(frozen=True, init=False)
class BuildConfig:
    """A build's settings. ``msa_depth_cap`` and ``keep_crystallization_aids`` are recorded by the
    store: one left out (not given to the constructor, :attr:`given`) builds at its default, but a
    build over a store that records another value is refused (:func:`settings_left_out`), as
    ``featurecache build`` without ``--msa-depth`` / ``--keep-cryst-aids`` is. Give the value to
    keep it, or the default to rebuild at it. To change some settings of a config, use
    :meth:`replace` (or ``copy.replace`` on Python 3.13+), which keeps what was left out:
    ``dataclasses.replace`` passes every field to the constructor, so its copy counts every
    recorded setting as given (at the value it holds, the default for one left out) and a build
    with it over a store that records another value rebuilds at that value, unrefused. Nothing
    in the class can tell its call apart from one that gives them all (review R36c s49 #4)."""

    msa_depth_cap: int = DEFAULT_MSA_DEPTH_CAP
    conformer_timeout_s: float = 20.0
    interface_cutoff: float = INTERFACE_CUTOFF
    #: keep an X-ray structure's crystallization aids (``const.CRYSTALLIZATION_AIDS``; AF3 removes them)
    keep_crystallization_aids: bool = False

    def __init__(
        self,
        msa_depth_cap: int | Unset = UNSET,
        conformer_timeout_s: float = 20.0,
        interface_cutoff: float = INTERFACE_CUTOFF,
        keep_crystallization_aids: bool | Unset = UNSET,
    ) -> None:
        given = {name for name, value in (("msa_depth_cap", msa_depth_cap),
                                          ("keep_crystallization_aids", keep_crystallization_aids))
                 if value is not UNSET}  # fmt: skip
        # the fields in their order (asdict, the store's record of them); the given set is no field
        object.__setattr__(self, "msa_depth_cap",
                           DEFAULT_MSA_DEPTH_CAP if msa_depth_cap is UNSET else msa_depth_cap)  # fmt: skip
        object.__setattr__(self, "conformer_timeout_s", conformer_timeout_s)
        object.__setattr__(self, "interface_cutoff", interface_cutoff)
        object.__setattr__(self, "keep_crystallization_aids",
                           False if keep_crystallization_aids is UNSET else keep_crystallization_aids)  # fmt: skip
        object.__setattr__(self, "_given", frozenset(given))

    @property
    def given(self) -> frozenset[str]:
        """The recorded settings (:data:`RECORDED_FIELDS`) given to the constructor, by field name
        (``dataclasses.replace`` gives them all; :meth:`replace` keeps those of its config)."""
        given: frozenset[str] = getattr(self, "_given", frozenset(RECORDED_FIELDS))
        return given

    def replace(self, **changes: Any) -> BuildConfig:
        """A copy with ``changes`` (fields by name): its :attr:`given` is this config's and the
        recorded settings among ``changes``; ``BuildConfig().replace(conformer_timeout_s=30)``
        leaves ``msa_depth_cap`` and ``keep_crystallization_aids`` out, as ``BuildConfig(
        conformer_timeout_s=30)`` does (``dataclasses.replace`` gives them all: review R36c s49 #4)."""
        names = [f.name for f in fields(self)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise TypeError(f"BuildConfig has no field {', '.join(map(repr, unknown))}")
        values: dict[str, Any] = {name: getattr(self, name) for name in names}
        values.update({name: UNSET for name in RECORDED_FIELDS if name not in self.given})
        values.update(changes)
        return BuildConfig(**values)

    def __replace__(self, **changes: Any) -> BuildConfig:
        """``copy.replace`` (Python 3.13+): :meth:`replace`."""
        return self.replace(**changes)

    def as_dict(self) -> dict[str, object]:
        """The fields by name (what the store's root records as ``config``)."""
        return asdict(self)

    def feature_dict(self) -> dict[str, object]:
        """Fields that change structure-entry features (the entry key covers these)."""
        return {"interface_cutoff": self.interface_cutoff, "featurizer_version": FEATURIZER_VERSION,
                "keep_crystallization_aids": self.keep_crystallization_aids}  # fmt: skip

    def hash(self) -> str:
        """Hash of every field (the store root's ``config_hash``, displayed only; keys nothing)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def entry_config_hash(self, ccd_fingerprint: str = "") -> str:
        """Hash of :meth:`feature_dict` and ``ccd_fingerprint``: part of every entry's key, which
        gives ``build.ccd_keys.PER_ENTRY_DEFINITIONS`` for it (a failure's, the CCD's fingerprint)."""
        doc = {**self.feature_dict(), "ccd": ccd_fingerprint}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def settings_left_out(
    store: Path,
    given: set[str],
    msa_dir: Path | None = None,
    pdb_dir: Path | None = None,
    python: bool = False,
) -> list[str]:
    """The settings ``store`` records from its builds that this build leaves out (``given``: the
    options given on its command line, by flag, or their arguments given to ``run_build``:
    :func:`given_settings`; ``msa_dir`` / ``pdb_dir``: its ``--msa-dir`` and ``--pdb-dir``), each
    as the line saying how to keep or change it; ``python``: worded for a caller of ``run_build``
    (each setting by its argument and its flag), else for ``featurecache build``.

    A build without an option builds at its default: over a store built with ``--ccd`` (or
    ``--msa-depth 64``, ``--keep-cryst-aids``) that rebuilt every entry or MSA under other settings,
    silently, for hours on a large store, and the new entries replaced the served ones (review R15
    s40 #2). What a build would rebuild decides, not what the latest build recorded (review R19 s41
    #1: a build of another directory with other settings switched the check off for the first):
    the MSAs' own depths (:func:`_msa_depth_left_out`), and the settings recorded by the structure
    parts of ``pdb_dir`` that the index serves (:func:`_structure_settings`; for a store whose
    parts record none, the root's record of the latest build, as before). ``--conformer-timeout``
    is not among them: it is in no key, and a build at another one recomputes no stored conformer
    (a longer one retries only those that ran out of time). Nothing for a store not built yet, or
    built at the defaults."""
    from featurecache.errors import StoreError
    from featurecache.store.info import recorded_build_inputs
    from featurecache.store.root import group_attributes

    meta = Path(store) / "zarr.json"
    try:
        attrs = group_attributes(meta) if meta.is_file() else {}
    except StoreError:  # a damaged root: the build names it
        return []
    config = attrs.get("config")
    if not isinstance(config, dict):
        return []
    defaults = BuildConfig()
    out: list[str] = []
    if "--msa-depth" not in given and msa_dir is not None:
        out += _msa_depth_left_out(
            store, msa_dir, config.get("msa_depth_cap", defaults.msa_depth_cap), python
        )
    recorded = _structure_settings(store, pdb_dir, msa_dir)
    unknown_ccd = False
    if recorded is None:  # this directory's parts record no settings: the root's record of the latest build
        ccd = recorded_build_inputs(attrs)["ccd"]
        recorded = [{"ccd": ccd["path"] if ccd else None,
                     "keep_crystallization_aids": config.get("keep_crystallization_aids") is True}]  # fmt: skip
        # the root remembers the latest build only: when it was built without --ccd but the store
        # holds conformers of CCD definitions, this directory's older parts may have been
        unknown_ccd = ccd is None and _holds_ccd_components(store)
    if not given & {"--keep-cryst-aids", "--drop-cryst-aids"} and any(
        r.get("keep_crystallization_aids") is True for r in recorded
    ):
        keep = _setting("--keep-cryst-aids", "BuildConfig(keep_crystallization_aids=True)", python)
        drop = _setting("--drop-cryst-aids", "keep_crystallization_aids=False", python)
        out.append(f"it was built with --keep-cryst-aids: give {keep} to keep its entries "
                   f"({drop} rebuilds every entry; X-ray entries lose them)")  # fmt: skip
    ccds = sorted({str(r["ccd"]) for r in recorded if isinstance(r.get("ccd"), str)})
    if "--ccd" not in given and "--no-ccd" not in given:
        no_ccd = _setting("--no-ccd", "ccd=None", python)
        if ccds:
            out.append(f"it was built with --ccd {ccds[0]}: give {_setting('--ccd', 'ccd=…', python)} to keep its "
                       f"entries ({no_ccd} rebuilds every entry with a ligand or modified residue without CCD "
                       "definitions)")  # fmt: skip
        elif unknown_ccd:
            out.append("its entries of this --pdb-dir predate the record of their settings, and the store holds "
                       "conformers of CCD definitions, so they may have been built with --ccd: give "
                       f"{_setting('--ccd FILE', 'ccd=FILE', python)} to keep them, or {no_ccd}")  # fmt: skip
    return out


def _setting(flag: str, argument: str, python: bool) -> str:
    """How :func:`settings_left_out` names a setting to give: by ``featurecache build``'s ``flag``,
    or for a caller of ``run_build`` (``python``) by its ``argument`` and the flag."""
    return f"{argument} ({flag})" if python else flag


def given_settings(ccd: Path | Unset | None, config: BuildConfig | None) -> set[str]:
    """The recorded settings a caller of ``run_build`` gave, by the flag of ``featurecache build``
    (what :func:`settings_left_out` takes): ``ccd`` given (a path, or None: no CCD, ``--no-ccd``),
    and the recorded fields ``config`` was made with (:attr:`BuildConfig.given`)."""
    given: set[str] = set()
    if ccd is not UNSET:
        given.add("--ccd" if ccd is not None else "--no-ccd")
    if config is not None:
        if "msa_depth_cap" in config.given:
            given.add("--msa-depth")
        if "keep_crystallization_aids" in config.given:
            given.add("--keep-cryst-aids" if config.keep_crystallization_aids else "--drop-cryst-aids")
    return given


class SettingsLeftOut(UsageError):
    """A build that leaves out a setting its store records (:func:`settings_left_out`): refused
    before anything is written (exit 2). ``lines``: the settings' lines worded for ``featurecache
    build`` (its options), the message's for a caller of ``run_build`` (arguments and options)."""

    def __init__(self, store: Path, lines: list[str], python_lines: list[str]) -> None:
        super().__init__(f"{store} records build settings this build leaves out, which would rebuild its entries at "
                         f"the defaults; nothing was written: {'; '.join(python_lines)}")  # fmt: skip
        self.store = store
        self.lines = lines


def refuse_settings_left_out(
    store: Path, ccd: Path | Unset | None, config: BuildConfig | None, msa_dir: Path | None, pdb_dir: Path
) -> None:
    """Raise :class:`SettingsLeftOut` when the store at ``store`` records a build setting that a
    ``run_build`` with ``ccd`` and ``config`` leaves out (:func:`settings_left_out`)."""
    given = given_settings(ccd, config)
    lines = settings_left_out(store, given, msa_dir, pdb_dir)
    if lines:
        raise SettingsLeftOut(store, lines, settings_left_out(store, given, msa_dir, pdb_dir, python=True))


def _holds_ccd_components(store: Path) -> bool:
    """Whether the store's index lists a component computed from a CCD definition (``source``
    "ccd"); False when it lists none or cannot be read."""
    from featurecache.errors import StoreError
    from featurecache.store.index import read_table
    from featurecache.store.layout import INDEX_DIR

    path = Path(store) / INDEX_DIR / "components.arrow"
    try:
        return path.is_file() and "ccd" in set(read_table(path).column("source").to_pylist())
    except (StoreError, KeyError):
        return False


def _structure_settings(
    store: Path, pdb_dir: Path | None, msa_dir: Path | None = None
) -> list[dict[str, object]] | None:
    """The settings (``store.writer.SETTINGS``) recorded by the structure parts the index serves
    that this build would rebuild from: those whose ``--pdb-dir`` is ``pdb_dir``, and those holding
    an entry whose id an input of ``pdb_dir`` takes (its relative path is the entry's, as the build
    matches stored entries: :func:`~featurecache.build.discover.input_ids`), whatever directory the
    part records. The second is what a directory renamed or moved needs: its parts record the old
    path, yet the build matches their entries by relative path and rebuilds them at its settings
    (review R26b s44 #1: a build of the renamed directory without ``--ccd`` rebuilt every entry
    without CCD definitions, unwarned); a build of another directory whose files are not the
    first's takes none of the first's entries, so its settings are not judged by them (review R19
    s41 #1). Empty when none (nothing of it to rebuild). None when the latest build's record must
    judge instead: a served part of that directory (or one recording no directory, written before
    session 19) records no settings (written before session 41; review R22 s41 #1: such a
    directory was judged by nothing once another directory's parts recorded theirs), or the index
    cannot be read."""
    import json

    from featurecache.build.discover import StoredEntries, input_ids, resolved
    from featurecache.errors import StoreError
    from featurecache.store.index import read_table
    from featurecache.store.layout import INDEX_DIR, PART_DONE_FILE, PART_INDEX_DIR, PARTS_DIR
    from featurecache.store.writer import SETTINGS, SOURCE_DIR

    path = Path(store) / INDEX_DIR / "entries.arrow"
    try:
        entries = read_table(path) if path.is_file() else None
        parts = set(entries.column("part").to_pylist()) if entries is not None else set()
    except (StoreError, KeyError):  # an unreadable index: the build rebuilds it and names it
        return None
    here = str(resolved(Path(pdb_dir))) if pdb_dir is not None else None
    docs: dict[str, object] = {}
    for part in sorted(parts):
        manifest = Path(store) / PARTS_DIR / part / PART_INDEX_DIR / PART_DONE_FILE
        try:
            docs[part] = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue

    def recorded(doc: object) -> object:
        return doc.get(SOURCE_DIR, "") if isinstance(doc, dict) else None

    taken: set[str] = set()  # parts of other directories holding entries this build takes
    if (entries is not None and pdb_dir is not None and Path(pdb_dir).is_dir()
            and any(recorded(doc) not in (here, "", None) for doc in docs.values())):  # fmt: skip
        ids = set(input_ids(Path(pdb_dir), exclude=Path(store), msa_dir=msa_dir, warn=False,
                            stored=StoredEntries(Path(store), entries)).values())  # fmt: skip
        rows = entries.select(["id", "part"]).to_pylist()
        taken = {r["part"] for r in rows if r["id"] in ids}
    found: list[dict[str, object]] = []
    for part, doc in docs.items():
        if not isinstance(doc, dict) or (recorded(doc) not in (here, "", None) and part not in taken):
            continue  # another directory's part, none of whose entries this build takes
        settings = doc.get(SETTINGS)
        if not isinstance(settings, dict):
            return None
        found.append(settings)
    return found


def _msa_depth_left_out(store: Path, msa_dir: Path, recorded: int, python: bool = False) -> list[str]:
    """The line for the MSAs from ``msa_dir`` that a build at the default ``--msa-depth`` rebuilds to
    other rows than they hold (cut by a smaller cap), if any. The root records only the latest
    build's cap (an extension with another overwrites it), so the MSAs' own depths decide
    (``verify.msas_from_files``), as they do for the rebuild command verify prints."""
    from featurecache.store.verify import changed_by_cap, msas_from_files

    default = BuildConfig().msa_depth_cap
    rows = msas_from_files(store, {str(Path(msa_dir).resolve())}) or []
    cut = changed_by_cap(rows, default)
    if not cut:
        return []
    keeps = recorded if not changed_by_cap(cut, recorded) else None
    depths = sorted({int(r["depth"]) for r in cut})
    if python:
        what = (f"give BuildConfig(msa_depth_cap={keeps}) (--msa-depth {keeps}) to keep them" if keeps is not None
                else "give the msa_depth_cap (--msa-depth) they were built with (cut to "
                     f"{', '.join(map(str, depths[-3:]))} rows)")  # fmt: skip
        return [f"{len(cut)} of its MSAs from {msa_dir} were cut to fewer rows than their files hold (the latest "
                f"build's msa_depth_cap (--msa-depth): {recorded}); without msa_depth_cap in its BuildConfig (--msa-depth) "
                f"they are rebuilt at {default}: {what} (msa_depth_cap={default} (--msa-depth {default}), or another, "
                "rebuilds them at that depth)"]  # fmt: skip
    what = (f"give --msa-depth {keeps} to keep them" if keeps is not None
            else f"give the --msa-depth they were built with (cut to {', '.join(map(str, depths[-3:]))} rows)")  # fmt: skip
    return [f"{len(cut)} of its MSAs from {msa_dir} were cut to fewer rows than their files hold (the latest "
            f"build's --msa-depth: {recorded}); without --msa-depth they are rebuilt at {default}: {what} "
            f"(--msa-depth {default}, or another, rebuilds them at that depth)"]  # fmt: skip
