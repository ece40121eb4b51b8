"""Component parts: reference conformers stored once per component, and the reader's join table.

```
parts/c-NNNNNN/                  one zarr group written by one task, renamed into place
  atoms                          COMPONENT_ATOM records, uint8 [n_atoms, itemsize] (writer.write_record_array)
  bonds                          COMPONENT_BOND records (component-local atom indices)
  _index/components.arrow        one row per component (COMPONENTS_SCHEMA): key, code, offsets,
                                 strategy, reason, source, source sha256, seconds, timed_out_s,
                                 conformer_version, rdkit_version, content sha256 (of its atoms
                                 and bonds rows: verify recomputes it)
  _index/chem_warnings.arrow     entries whose atoms get ref_mask = False, and why (CHEM_WARNINGS_SCHEMA)
  _index/chem_scans.arrow        structure parts whose residues this build stage has looked at
                                 (and the conformer code version that did)
  _index/failures.arrow          chem-stage failures (a conformer task that crashed), stage "chem"
```

``STORE/index/components.arrow`` is the concatenation over parts (rebuild_index). A key recomputed
later (its CCD definition changed, it failed for want of time and a build gave it more, or an
older ``CONFORMER_VERSION`` computed it) has rows in two parts; the later part wins
(:class:`~featurecache.chem.reference.ComponentTable` keeps the last row). Likewise a structure part's chem warnings are those of the latest component
part that scanned it (:func:`join_chem_warnings`): the chem stage scans a part again when a
component its entries use is recomputed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zarr

from featurecache.chem.reference import ComponentTable
from featurecache.const import SCHEMA_VERSION, encode_atom_name
from featurecache.errors import FeatureCacheError, StoreError
from featurecache.store.index import complete_parts, read_table, write_table
from featurecache.store.layout import COMPONENT_PART_PREFIX, INDEX_DIR, PART_INDEX_DIR, PARTS_DIR, hash_fields
from featurecache.store.root import PartArrays, decode_records, record_fill_only_shards
from featurecache.store.writer import commit_part, part_tmp_dir, write_record_array

if TYPE_CHECKING:  # conformer.py imports RDKit, which the lookup image (and the client) lack
    from featurecache.chem.conformer import ReferenceConformer

log = logging.getLogger(__name__)

__all__ = [
    "CHEM_SCANS_SCHEMA",
    "CHEM_WARNINGS_SCHEMA",
    "COMPONENTS_SCHEMA",
    "COMPONENT_ATOM",
    "COMPONENT_BOND",
    "chem_warnings_in_parts",
    "component_content_hash",
    "component_content_problems",
    "component_rows_in_parts",
    "components_of_missing_parts",
    "join_chem_warnings",
    "load_component_table",
    "RESCAN_ALL",
    "scanned_structure_parts",
    "write_component_part",
    "write_rescan_part",
]

#: a chem scan row's ``structure_part`` that voids the scans of every earlier component part
RESCAN_ALL = "*"

#: One reference-conformer atom (heavy atoms only, CCD order).
COMPONENT_ATOM = np.dtype(
    [
        ("ref_pos", np.float32, (3,)),  # Å, centred on the heavy-atom centroid; 0 where mask is False
        ("mask", np.bool_),  # False: no reference position (strategy failed)
        ("element", np.uint8),  # atomic number
        ("charge", np.int8),  # formal charge from the definition
        ("name", np.uint8, (4,)),  # AF3 ref_atom_name_chars encoding
    ]
)

#: One intra-component bond between heavy atoms (component-local indices; order 4 = aromatic).
COMPONENT_BOND = np.dtype([("atom_i", np.int32), ("atom_j", np.int32), ("order", np.uint8)])

COMPONENTS_SCHEMA = pa.schema(
    [
        ("key", pa.string()),  # CCD code, or code#hash for a residue no definition covers
        ("code", pa.string()),  # the residue name as in the structures
        ("atom_start", pa.int64()),  # rows of parts/<part>/atoms
        ("atom_count", pa.int64()),
        ("bond_start", pa.int64()),
        ("bond_count", pa.int64()),
        ("strategy", pa.string()),  # etkdg | random_coords | ccd_ideal | ccd_model | perceived | failed
        ("reason", pa.string()),  # why not etkdg / notes ("" when plain etkdg)
        ("source", pa.string()),  # ccd | packaged | perceived:<entry id>
        ("source_sha256", pa.string()),  # sha256 of the CCD block text ("" for perceived)
        ("n_heavy", pa.int32()),
        ("n_masked", pa.int32()),
        ("seconds", pa.float64()),  # conformer wall time, this component
        # the --conformer-timeout an embedding attempt of it ran out of; null when none did, and in
        # the rows of parts written before this column (their reason still says "timed out after")
        ("timed_out_s", pa.float64()),
        # chem.conformer.CONFORMER_VERSION of the code that computed it (null in parts written
        # before the column: version 1), and rdkit.rdBase.rdkitVersion (conformers depend on it)
        ("conformer_version", pa.int32()),
        ("rdkit_version", pa.string()),
        # component_content_hash of its rows of the part's atoms and bonds as written (verify
        # recomputes it); null in the rows of parts written before the column
        ("content_sha256", pa.string()),
        ("part", pa.string()),
    ]
)

CHEM_WARNINGS_SCHEMA = pa.schema(
    [
        ("entry_id", pa.string()),
        ("path", pa.string()),
        ("stage", pa.string()),  # "chem"
        ("message", pa.string()),
        ("key", pa.string()),  # component key the atoms were looked up in
        ("n_atoms", pa.int32()),  # atoms of the entry without a reference position, for this key
        ("entry_part", pa.string()),  # the structure part holding the entry version checked
        ("part", pa.string()),
    ]
)

CHEM_SCANS_SCHEMA = pa.schema(
    [
        ("structure_part", pa.string()),
        ("n_entries", pa.int32()),
        ("n_residues", pa.int64()),
        # chem.conformer.CONFORMER_VERSION of the chem stage that scanned it (null before it was
        # recorded, and in RESCAN_ALL rows)
        ("conformer_version", pa.int32()),
        ("part", pa.string()),
    ]
)


def _atoms_records(conformers: Sequence[ReferenceConformer]) -> np.ndarray:
    n = sum(c.n_atoms for c in conformers)
    rec = np.zeros(n, dtype=COMPONENT_ATOM)
    k = 0
    for c in conformers:
        sl = slice(k, k + c.n_atoms)
        rec["ref_pos"][sl] = c.positions
        rec["mask"][sl] = c.mask
        rec["element"][sl] = c.elements
        rec["charge"][sl] = c.charges
        rec["name"][sl] = np.array([encode_atom_name(x) for x in c.atom_names], dtype=np.uint8).reshape(-1, 4)
        k += c.n_atoms
    return rec


def _bond_records(conformers: Sequence[ReferenceConformer]) -> np.ndarray:
    blocks = []
    for c in conformers:
        b = np.zeros(len(c.bonds), dtype=COMPONENT_BOND)
        if len(c.bonds):
            b["atom_i"], b["atom_j"], b["order"] = c.bonds[:, 0], c.bonds[:, 1], c.bonds[:, 2]
        blocks.append(b)
    return np.concatenate(blocks) if blocks else np.zeros(0, dtype=COMPONENT_BOND)


def component_content_hash(atoms: np.ndarray, bonds: np.ndarray) -> str:
    """sha256 over one component's stored reference conformer: its rows of a part's ``atoms``
    (:data:`COMPONENT_ATOM` records) and ``bonds`` (:data:`COMPONENT_BOND`, component-local atom
    indices), field by field with each field's dtype and shape (record padding left out), so the
    writer (the records it writes) and ``verify`` (the records read back) hash the same bytes."""
    h = hashlib.sha256()
    for group, records, dtype in (("atoms", atoms, COMPONENT_ATOM), ("bonds", bonds, COMPONENT_BOND)):
        hash_fields(h, group, dtype, {name: records[name] for name in dtype.names or ()})
    return h.hexdigest()


def write_component_part(
    root: Path,
    name: str,
    conformers: Sequence[ReferenceConformer],
    sources: Mapping[str, str] | None = None,
    *,
    warnings: Iterable[Mapping[str, Any]] = (),
    scans: Iterable[Mapping[str, Any]] = (),
    failures: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Write one component part (atomically: temp dir, then rename). Returns its manifest.

    ``sources`` maps key → "ccd" | "packaged" | "perceived:<entry>". A part may hold no
    components at all (only the warnings/scans of a build's chem stage).
    """
    root = Path(root)
    sources = sources or {}
    with part_tmp_dir(root, name) as tmp:
        group = zarr.open_group(
            str(tmp),
            mode="w",
            attributes={"kind": "components", "part": name, "schema_version": SCHEMA_VERSION},
        )
        atom_records, bond_records = _atoms_records(conformers), _bond_records(conformers)
        atoms = write_record_array(group, "atoms", atom_records)
        bonds = write_record_array(group, "bonds", bond_records)
        record_fill_only_shards(group, tmp, [("atoms", atoms), ("bonds", bonds)])
        rows: list[dict[str, Any]] = []
        a = b = 0
        for c in conformers:
            row: dict[str, Any] = {"key": c.key, "code": c.code, "atom_start": a, "atom_count": c.n_atoms}
            row.update(bond_start=b, bond_count=len(c.bonds), strategy=c.strategy, reason=c.reason)
            row.update(source=sources.get(c.key, ""), source_sha256=c.source_sha, n_heavy=c.n_atoms)
            row.update(n_masked=int((~c.mask).sum()), seconds=float(c.seconds), timed_out_s=c.timed_out_s)
            row.update(conformer_version=c.conformer_version, rdkit_version=c.rdkit_version, part=name)
            row.update(content_sha256=component_content_hash(
                atom_records[a : a + c.n_atoms], bond_records[b : b + len(c.bonds)]
            ))  # fmt: skip
            rows.append(row)
            a += c.n_atoms
            b += len(c.bonds)
        idx = tmp / PART_INDEX_DIR
        write_table(idx / "components.arrow", pa.Table.from_pylist(rows, schema=COMPONENTS_SCHEMA))
        warn_rows = [{**w, "part": name} for w in warnings]
        write_table(idx / "chem_warnings.arrow", pa.Table.from_pylist(warn_rows, schema=CHEM_WARNINGS_SCHEMA))
        scan_rows = [{**s, "part": name} for s in scans]
        write_table(idx / "chem_scans.arrow", pa.Table.from_pylist(scan_rows, schema=CHEM_SCANS_SCHEMA))
        fail_rows = [{**f, "part": name} for f in failures]
        if fail_rows:
            from featurecache.store.index import table_from_rows

            write_table(idx / "failures.arrow", table_from_rows("failures", fail_rows))
        manifest: dict[str, Any] = {
            "part": name, "kind": "components", "schema_version": SCHEMA_VERSION,
            "n_components": len(rows), "n_atoms": a, "n_bonds": b, "keys": sorted(r["key"] for r in rows),
            "n_warnings": len(warn_rows), "scanned": sorted(s["structure_part"] for s in scan_rows),
        }  # fmt: skip
        final = commit_part(tmp, root / PARTS_DIR / name, manifest)
        if isinstance(final, Path):
            manifest["part"] = final.name
        return manifest


# --- reading -----------------------------------------------------------------------------------


def _component_parts(root: Path) -> list[Path]:
    return [p for p in complete_parts(root) if p.name.startswith(COMPONENT_PART_PREFIX)]


def _part_table(part: Path, table: str, schema: pa.Schema) -> pa.Table:
    f = part / PART_INDEX_DIR / f"{table}.arrow"
    if not f.is_file():
        return schema.empty_table()
    t = read_table(f, memory_map=False)
    parts = pa.array([part.name] * t.num_rows, type=pa.string())
    return t.set_column(t.column_names.index("part"), "part", parts) if "part" in t.column_names else t


def component_rows_in_parts(root: Path) -> pa.Table:
    """Every component row of every complete component part (part order), read from the parts
    themselves — the build uses this, since the top-level index may lag behind during a build.
    Every column of :data:`COMPONENTS_SCHEMA` is there: null where a part written before it lacks it."""
    tables = [_part_table(p, "components", COMPONENTS_SCHEMA) for p in _component_parts(Path(root))]
    rows = (
        pa.concat_tables(tables, promote_options="permissive") if tables else COMPONENTS_SCHEMA.empty_table()
    )
    for f in COMPONENTS_SCHEMA:
        if f.name not in rows.column_names:
            rows = rows.append_column(f, pa.nulls(rows.num_rows, f.type))
    return rows


def chem_warnings_in_parts(root: Path) -> pa.Table:
    """Every chem warning row of every complete component part (part order), from the parts."""
    tables = [_part_table(p, "chem_warnings", CHEM_WARNINGS_SCHEMA) for p in _component_parts(Path(root))]
    return (
        pa.concat_tables(tables, promote_options="permissive")
        if tables
        else CHEM_WARNINGS_SCHEMA.empty_table()
    )


def scanned_structure_parts(root: Path, at_version: int | None = None) -> set[str]:
    """Structure parts whose residues a chem stage has already looked at; with ``at_version``,
    only those a chem stage of that conformer code version or later did (after a version bump,
    each part is scanned once more so that its components are computed anew).

    A component part whose scans hold :data:`RESCAN_ALL` (``verify --repair`` writes one after
    moving a component part aside) forgets the scans of every part before it, so the next chem
    stage scans every structure part again and recomputes the components that are missing."""
    out: set[str] = set()
    for scanned in _scans_by_part(root):
        if any(s == RESCAN_ALL for s, _v in scanned):
            out.clear()
        out.update(
            s
            for s, v in scanned
            if s != RESCAN_ALL and (at_version is None or (v is not None and v >= at_version))
        )
    return out


def _scans_by_part(root: Path) -> Iterator[list[tuple[str, int | None]]]:
    """Each complete component part's ``chem_scans`` rows, in part order: (structure part name,
    the conformer version that scanned it or None)."""
    for p in _component_parts(Path(root)):
        t = _part_table(p, "chem_scans", CHEM_SCANS_SCHEMA)
        names = t.column("structure_part").to_pylist()
        versions = (
            t.column("conformer_version").to_pylist()
            if "conformer_version" in t.column_names
            else [None] * len(names)
        )
        yield list(zip(names, versions, strict=True))


def every_scanned_part_name(root: Path) -> set[str]:
    """Every structure part name a chem stage has recorded as scanned, also those a ``RESCAN_ALL``
    row made it forget and those no longer on disk (what :func:`scanned_structure_parts` knows by
    name: a new part must never take one of these names)."""
    return {s for scanned in _scans_by_part(root) for s, _v in scanned if s != RESCAN_ALL}


def write_rescan_part(root: Path) -> str:
    """A component part holding only a :data:`RESCAN_ALL` scan row, numbered by
    :func:`~featurecache.build.discover.next_part_number`: the next build's chem stage scans every
    structure part again (components already stored are not recomputed). Returns its name."""
    from featurecache.build.discover import next_part_number
    from featurecache.store.layout import part_name

    root = Path(root)
    name = part_name(COMPONENT_PART_PREFIX, next_part_number(root, COMPONENT_PART_PREFIX))
    write_component_part(
        root, name, [], scans=[{"structure_part": RESCAN_ALL, "n_entries": 0, "n_residues": 0}]
    )
    return name


def components_of_missing_parts(root: Path) -> dict[str, list[str]]:
    """The component keys that the published index (``index/components.arrow``) lists in component
    parts that are gone (deleted by hand), by part: a rebuild of the index from the parts drops
    them, and the chem stage, which has scanned every structure part, would not compute them again.
    Empty when there is no index or it does not read (nothing is known)."""
    root = Path(root)
    f = root / INDEX_DIR / "components.arrow"
    if not f.is_file():
        return {}
    try:
        table = read_table(f, memory_map=False)
    except FeatureCacheError:
        return {}
    if not table.num_rows or not {"key", "part"} <= set(table.column_names):
        return {}
    there = {p.name for p in complete_parts(root)}
    gone: dict[str, list[str]] = {}
    for key, part in zip(table.column("key").to_pylist(), table.column("part").to_pylist(), strict=True):
        if part and part.startswith(COMPONENT_PART_PREFIX) and part not in there:
            gone.setdefault(part, []).append(key)
    return {part: sorted(keys) for part, keys in sorted(gone.items())}


def load_component_table(root: str | Path, index: pa.Table | None = None) -> ComponentTable:
    """Every stored reference conformer as one in-memory :class:`ComponentTable`.

    ``index``: the components table to use (default ``STORE/index/components.arrow``, else the
    parts' own rows). Reads each component part's ``atoms`` array whole (they are small).
    """
    root = Path(root)
    if index is None:
        f = root / INDEX_DIR / "components.arrow"
        index = read_table(f, memory_map=False) if f.is_file() else component_rows_in_parts(root)
    if index.num_rows == 0:
        return ComponentTable.empty()
    cols = index.select(["key", "strategy", "part", "atom_start", "atom_count"]).to_pydict()
    records: list[np.ndarray] = []
    base: dict[str, int] = {}
    total = 0
    arrays = PartArrays(root, "component part array")
    for part in dict.fromkeys(cols["part"]):
        try:  # through read(): a damaged or missing shard file is an error naming the part and file
            raw = arrays.read(part, "atoms", (slice(None),))
        except StoreError as exc:
            raise StoreError(f"components: unreadable ({exc})") from exc
        rec = decode_records(raw, COMPONENT_ATOM)
        base[part] = total
        total += len(rec)
        records.append(rec)
    atoms = np.concatenate(records) if records else np.zeros(0, dtype=COMPONENT_ATOM)
    starts = np.array(
        [base[p] + s for p, s in zip(cols["part"], cols["atom_start"], strict=True)], dtype=np.int64
    )
    return ComponentTable(
        keys=list(cols["key"]),
        strategy=list(cols["strategy"]),
        atom_start=starts,
        atom_count=np.asarray(cols["atom_count"], dtype=np.int64),
        name=np.ascontiguousarray(atoms["name"]),
        ref_pos=np.ascontiguousarray(atoms["ref_pos"]),
        mask=np.ascontiguousarray(atoms["mask"]),
        element=np.ascontiguousarray(atoms["element"]),
        charge=np.ascontiguousarray(atoms["charge"]),
    )


@dataclass
class ContentCheck:
    """What :func:`component_content_problems` found."""

    #: one line per component whose stored rows do not hash to its row's ``content_sha256``
    problems: list[str] = field(default_factory=list)
    #: part -> its first such line (``verify --repair`` moves the part aside)
    damaged_parts: dict[str, str] = field(default_factory=dict)
    #: part -> how many of its rows record no content hash (written before the column)
    unrecorded: dict[str, int] = field(default_factory=dict)


def component_content_problems(root: str | Path, index: pa.Table) -> ContentCheck:
    """Recompute :func:`component_content_hash` for every row of ``index`` (a components table:
    ``STORE/index/components.arrow``, every row the reader serves) from the part's arrays, and
    compare it with the hash the writer recorded. A row without one is counted, not checked; a part
    whose arrays do not read is left to :func:`load_component_table`'s error (not checked here)."""
    out = ContentCheck()
    if index.num_rows == 0 or "content_sha256" not in index.column_names:
        if index.num_rows and "part" in index.column_names:
            for part in index.column("part").to_pylist():
                out.unrecorded[part] = out.unrecorded.get(part, 0) + 1
        return out
    columns = [
        "key",
        "code",
        "part",
        "atom_start",
        "atom_count",
        "bond_start",
        "bond_count",
        "content_sha256",
    ]
    by_part: dict[str, list[dict[str, Any]]] = {}
    for row in index.select(columns).to_pylist():
        if row["content_sha256"]:
            by_part.setdefault(row["part"], []).append(row)
        else:
            out.unrecorded[row["part"]] = out.unrecorded.get(row["part"], 0) + 1
    arrays = PartArrays(Path(root), "component part array")
    for part, rows in by_part.items():
        try:
            atoms = decode_records(arrays.read(part, "atoms", (slice(None),)), COMPONENT_ATOM)
            bonds = decode_records(arrays.read(part, "bonds", (slice(None),)), COMPONENT_BOND)
        except StoreError:
            continue  # unreadable: the readability check names it
        for r in rows:
            a, b = r["atom_start"], r["bond_start"]
            got = component_content_hash(atoms[a : a + r["atom_count"]], bonds[b : b + r["bond_count"]])
            if got != r["content_sha256"]:
                line = (f"component {r['code']}: content hash {got[:16]}… != index {r['content_sha256'][:16]}… "
                        f"(key {r['key']}, part {part}: its reference conformer's atoms or bonds are not what the "
                        "build wrote)")  # fmt: skip
                out.problems.append(line)
                out.damaged_parts.setdefault(part, line)
    return out


def join_chem_warnings(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Index rebuild hook: keep the chem warnings of live entry versions, and add them to ``warnings``.

    A chem warning names the structure part it checked (``entry_part``); once an entry is rebuilt
    into a newer part, warnings about its old version are dropped. A structure part scanned again
    (a component its entries use was computed again, or ``verify --repair`` asked for a rescan) has
    the warnings of the latest component part whose ``chem_scans`` list it: the earlier ones
    described components since replaced.
    """
    cw = tables.get("chem_warnings")
    entries = tables.get("entries")
    if cw is None or cw.num_rows == 0 or entries is None:
        return tables
    live = set(zip(entries.column("id").to_pylist(), entries.column("part").to_pylist(), strict=True))
    latest_scan: dict[str, str] = {}
    scans = tables.get("chem_scans")
    if scans is not None and scans.num_rows and {"structure_part", "part"} <= set(scans.column_names):
        for s_part, c_part in zip(scans.column("structure_part").to_pylist(), scans.column("part").to_pylist(),
                                  strict=True):  # fmt: skip
            if s_part is not None and c_part is not None and c_part > latest_scan.get(s_part, ""):
                latest_scan[s_part] = c_part
    rows = zip(cw.column("entry_id").to_pylist(), cw.column("entry_part").to_pylist(),
               cw.column("part").to_pylist(), strict=True)  # fmt: skip
    cw = cw.filter(
        pa.array([(e, s) in live and latest_scan.get(s, c) == c for e, s, c in rows], type=pa.bool_())
    )
    cw = cw.take(pc.sort_indices(cw, sort_keys=[("entry_id", "ascending"), ("key", "ascending")]))
    tables["chem_warnings"] = cw
    rows = cw.select(["entry_id", "path", "stage", "message", "part"])
    w = tables.get("warnings")
    tables["warnings"] = (
        rows if w is None or w.num_rows == 0 else pa.concat_tables([w, rows], promote_options="permissive")
    )
    return tables
