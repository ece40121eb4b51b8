"""docs/FORMAT.md lists every column of every Arrow file a build writes, with its Arrow type.

Review R28c s46 #9: about 40 columns were documented nowhere. The columns a store has come from two
places: the schema objects of ``featurecache.store`` (every ``pa.Schema`` of its modules, each
mapped to the file stem it is written as) and the files of a real built store (the sample store:
the columns the index rebuild derives, such as ``chains.msa_key``, are in no schema object). For
each file stem, the columns FORMAT.md's table lists must be exactly those, with the same types.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import featurecache.store

REPO = Path(__file__).resolve().parents[2]
FORMAT_MD = REPO / "docs" / "FORMAT.md"

#: schema object (module attribute name) -> the stems of the files written with it
SCHEMA_STEMS: dict[str, tuple[str, ...]] = {
    "ENTRIES_SCHEMA": ("entries",),
    "CHAINS_SCHEMA": ("chains",),
    "INTERFACES_SCHEMA": ("interfaces",),
    "FAILURES_SCHEMA": ("failures", "withdrawn"),
    "REMOVED_SCHEMA": ("removed",),
    "WARNINGS_SCHEMA": ("warnings",),
    "TIMINGS_SCHEMA": ("timings",),
    "RESIDUE_CODES_SCHEMA": ("residue_codes",),
    "MSAS_SCHEMA": ("msas",),
    "MSA_HASHES_SCHEMA": ("msa_hashes",),
    "COMPONENTS_SCHEMA": ("components",),
    "CHEM_WARNINGS_SCHEMA": ("chem_warnings",),
    "CHEM_SCANS_SCHEMA": ("chem_scans",),
    "MSA_UNMATCHED_SCHEMA": ("msa_unmatched",),
    "GROUP_HASHES_SCHEMA": ("group_hashes",),
}
#: index files that are not the build's: ``plan.arrow`` (``featurecache plan``; its columns depend
#: on the crops, described in prose)
NOT_TABULATED = {"plan"}
#: Arrow's type names -> FORMAT.md's
TYPE_NAMES = {"double": "float64", "float": "float32", "list<item: string>": "list<string>"}


#: (written, documented): file stem -> column -> type name
Columns = tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]


def _type_name(t: pa.DataType) -> str:
    return TYPE_NAMES.get(str(t), str(t))


def schema_objects() -> dict[str, pa.Schema]:
    """Every module-level ``pa.Schema`` of the ``featurecache.store`` modules, by attribute name."""
    found: dict[str, pa.Schema] = {}
    for info in pkgutil.iter_modules(featurecache.store.__path__):
        module = importlib.import_module(f"featurecache.store.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, pa.Schema):
                found[name] = value
    return found


def documented() -> dict[str, dict[str, str]]:
    """FORMAT.md's column tables: file stem -> column -> the type the table gives. A table belongs
    to the ``###`` heading above it; every backticked ``*.arrow`` path of the heading names it."""
    out: dict[str, dict[str, str]] = {}
    stems: list[str] = []
    for line in FORMAT_MD.read_text().splitlines():
        if line.startswith("#"):
            stems = (
                [Path(p).stem for p in re.findall(r"`([^`]+\.arrow)`", line)]
                if line.startswith("### ")
                else []
            )
            for stem in stems:
                assert stem not in out, f"FORMAT.md has two tables for {stem}.arrow"
                out[stem] = {}
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if stems and len(cells) >= 2:
            kind = cells[1].replace("\\<", "<").replace("\\>", ">")
            for column in re.findall(r"`([^`]+)`", cells[0]):
                for stem in stems:
                    assert column not in out[stem], f"FORMAT.md lists {stem}.{column} twice"
                    out[stem][column] = kind
    return out


def written(store: Path) -> dict[str, dict[str, str]]:
    """file stem -> column -> type: the schema objects' and those of the store's Arrow files (the
    index's and every part's ``_index/`` and ``_verify/``)."""
    out: dict[str, dict[str, str]] = {}
    objects = schema_objects()
    unmapped = sorted(set(objects) - set(SCHEMA_STEMS))
    assert not unmapped, (
        f"new schema objects {unmapped}: document their files in docs/FORMAT.md, map them here"
    )
    for name, stems in SCHEMA_STEMS.items():
        assert name in objects, f"{name} is gone from featurecache.store: update SCHEMA_STEMS and FORMAT.md"
        for stem in stems:
            for field in objects[name]:
                out.setdefault(stem, {})[field.name] = _type_name(field.type)
    files = [
        *store.glob("index/*.arrow"),
        *store.glob("parts/*/_index/*.arrow"),
        *store.glob("parts/*/_verify/*.arrow"),
    ]
    for f in files:
        if f.stem in NOT_TABULATED:
            continue
        with pa.memory_map(str(f)) as source:
            schema = ipc.open_file(source).schema
        for field in schema:
            out.setdefault(f.stem, {})[field.name] = _type_name(field.type)
    return out


@pytest.fixture(scope="module")
def columns(sample_store: Path) -> Columns:
    return written(sample_store), documented()


def test_every_written_file_has_a_table(columns: Columns) -> None:
    have, doc = columns
    from featurecache.store import layout

    # the index files featurecache owns, where the layout lists them (review R28c s46 #7)
    owned = set(getattr(layout, "INDEX_FILES", ())) - NOT_TABULATED
    assert sorted(owned - set(doc)) == [], (
        "index files of layout.INDEX_FILES FORMAT.md has no column table for"
    )
    assert sorted(set(have) - set(doc)) == [], "Arrow files FORMAT.md has no column table for"
    assert sorted(set(doc) - set(have)) == [], "FORMAT.md tables for files featurecache does not write"


def test_every_column_is_documented_and_nothing_else(
    columns: Columns,
) -> None:
    have, doc = columns
    missing = sorted(f"{stem}.{c}" for stem, cols in have.items() for c in cols if c not in doc.get(stem, {}))
    extra = sorted(f"{stem}.{c}" for stem, cols in doc.items() for c in cols if c not in have.get(stem, {}))
    assert missing == [], "columns featurecache writes that docs/FORMAT.md does not list"
    assert extra == [], "columns docs/FORMAT.md lists that no schema or written file has"


def test_every_documented_type_is_the_written_one(
    columns: Columns,
) -> None:
    have, doc = columns
    wrong = sorted(
        f"{stem}.{c}: FORMAT.md {kind}, written {have[stem][c]}"
        for stem, cols in doc.items()
        for c, kind in cols.items()
        if c in have.get(stem, {}) and kind != have[stem][c]
    )
    assert wrong == []


def test_the_derived_columns_are_seen(columns: Columns) -> None:
    """The premise of reading a built store: the rebuild's own columns, which no schema object has,
    are among those checked (a store built without them would let FORMAT.md drift unnoticed)."""
    have, _doc = columns
    assert {"msa_key", "msa_depth", "msa_files", "part"} <= set(have["chains"])
    assert {"n_msa_chains", "msa_coverage"} <= set(have["entries"])
    assert {"key", "seconds", "part"} <= set(have["component_timings"])


def test_the_readme_store_section_links_format_md() -> None:
    section = (REPO / "README.md").read_text().split("\n## The store\n", 1)[1].split("\n## ", 1)[0]
    assert "(docs/FORMAT.md)" in section
