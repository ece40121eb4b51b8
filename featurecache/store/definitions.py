"""The component definitions each stored entry was built with, as its structure part records them.

A structure part's manifest (``_index/part.json``) lists, under
:data:`~featurecache.store.writer.CCD_DEFINITIONS`, every component code its entries looked up and
the hash of the definition each got (``ComponentDef.sha256``; "" for a code nothing defined). Parts
written before session 44 record none. Two readers:

* the build, which rebuilds an entry when a definition it used changed (``build.ccd_keys``);
* :func:`mixed_definitions`: live entries whose recorded definition of a code is not the one the
  store's component of that code (its reference conformer) was computed from. Components are one
  per code for the whole store, so a CCD change applied through one ``--pdb-dir`` recomputes them
  for the entries of every other directory too, which keep the tokens and bonds of the previous
  definition (review R26b s44 #6). ``featurecache build`` warns of them, ``info`` counts them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from featurecache.store.layout import PART_DONE_FILE, PART_INDEX_DIR, PARTS_DIR
from featurecache.store.writer import CCD_DEFINITIONS, SOURCE_DIR

#: ``featurecache info --json``'s key for :func:`mixed_definitions_doc`
MIXED_DEFINITIONS_KEY = "ccd_definitions_mixed"


def part_manifest(root: Path, part: str) -> dict[str, Any]:
    """The manifest of ``part`` ({} when it does not read)."""
    try:
        doc = json.loads((Path(root) / PARTS_DIR / part / PART_INDEX_DIR / PART_DONE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def recorded_definitions(manifest: dict[str, Any]) -> dict[str, dict[str, str]] | None:
    """A part manifest's record as ``{entry id: {code: sha256}}``; None when it records none. An
    entry of the part that it does not name looked no definition up."""
    record = manifest.get(CCD_DEFINITIONS)
    if not isinstance(record, dict):
        return None
    out: dict[str, dict[str, str]] = {}
    for code, by_hash in record.items():
        if not isinstance(by_hash, dict):
            return None
        for sha, entry_ids in by_hash.items():
            for entry_id in entry_ids if isinstance(entry_ids, list) else []:
                out.setdefault(str(entry_id), {})[str(code)] = str(sha)
    return out


@dataclass
class MixedDefinitions:
    """Live entries built with another definition of a code than the store's component of it."""

    #: (resolved ``--pdb-dir`` of the entry's part, code) -> entry ids
    entries: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    @property
    def entry_ids(self) -> set[str]:
        return {e for ids in self.entries.values() for e in ids}

    @property
    def codes(self) -> list[str]:
        return sorted({code for _d, code in self.entries})


def mixed_definitions(root: Path, entries: pa.Table, components: pa.Table) -> MixedDefinitions:
    """:class:`MixedDefinitions` of the index tables ``entries`` and ``components`` (the live ones):
    each live entry whose part records the definitions it used (:func:`recorded_definitions`) and
    whose recorded hash of a code differs from the ``source_sha256`` of the stored component keyed
    by that code (a perceived component, ``code#hash``, or one without a hash is not compared)."""
    out = MixedDefinitions()
    if not entries.num_rows or not {"key", "source_sha256"} <= set(components.column_names):
        return out
    comp = components.select(["key", "source_sha256"]).to_pydict()
    stored = {k: s for k, s in zip(comp["key"], comp["source_sha256"], strict=True) if s and "#" not in k}
    if not stored:
        return out
    by_part: dict[str, set[str]] = {}
    for entry_id, part in zip(
        entries.column("id").to_pylist(), entries.column("part").to_pylist(), strict=True
    ):
        by_part.setdefault(part, set()).add(entry_id)
    for part, ids in sorted(by_part.items()):
        manifest = part_manifest(root, part)
        record = recorded_definitions(manifest)
        if not record:
            continue
        where = str(manifest.get(SOURCE_DIR, ""))
        for entry_id in sorted(ids & set(record)):
            for code, sha in record[entry_id].items():
                if sha and stored.get(code, sha) != sha:
                    out.entries.setdefault((where, code), []).append(entry_id)
    return out


def mixed_definitions_doc(mixed: MixedDefinitions) -> dict[str, Any]:
    """``info --json``'s :data:`MIXED_DEFINITIONS_KEY`: how many live entries were built with
    another definition than their components', the codes, and per ``--pdb-dir`` the entries."""
    by_dir: dict[str, set[str]] = {}
    for (where, _code), ids in mixed.entries.items():
        by_dir.setdefault(where, set()).update(ids)
    return {
        "entries": len(mixed.entry_ids),
        "codes": mixed.codes,
        "by_pdb_dir": {d or "(not recorded)": len(ids) for d, ids in sorted(by_dir.items())},
    }


def mixed_definitions_note(doc: dict[str, Any]) -> str:
    """``featurecache info``'s warning for a :func:`mixed_definitions_doc` that counts entries."""
    dirs = "; ".join(f"{d}: {n}" for d, n in doc["by_pdb_dir"].items())
    n = doc["entries"]
    return (f"{n} entr{'y was' if n == 1 else 'ies were'} built with another CCD definition of "
            f"{', '.join(doc['codes'])} than the one the store's reference conformers of that code come from "
            f"(a CCD change applied through another --pdb-dir); by --pdb-dir: {dirs}; rebuild them with "
            "featurecache build --pdb-dir DIR --ccd CCD (the CCD the store's components were computed from)")  # fmt: skip
