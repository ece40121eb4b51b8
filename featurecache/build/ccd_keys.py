"""What a CCD change rebuilds: the entries that used a definition that changed (review R26b s44 #5).

Until session 44 every entry's key held the fingerprint of the whole ``--ccd`` input
(``run.ccd_fingerprint``: every file of a directory, README included), so any change to it (a
weekly ``components.cif``, a component no entry uses) rebuilt every entry of the store. Now:

* an entry's key holds :data:`PER_ENTRY_DEFINITIONS` in place of the fingerprint
  (``BuildConfig.entry_config_hash``), so the CCD is in no entry key, and keys written since differ
  from every key written before;
* its part records the definitions it looked up, by code and hash (``store.definitions``), and a
  build rebuilds it when one of them changed (:func:`changed_definitions`): a definition edited, a
  code removed, or a code it looked up without finding one and that is now defined;
* an entry keyed before (its key holds the fingerprint: :attr:`InputFile.ccd_key`) stays up to date
  while the CCD's fingerprint is the one it was built with, so a store built by an older
  featurecache is not rebuilt by the upgrade; any change to the CCD rebuilds it, into the new kind;
* a failure keeps the key with the fingerprint: a CCD change retries every failed input (a broken
  definition fixed must be retried; failures are few).
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from featurecache.build.discover import InputFile, entry_key
from featurecache.store.definitions import MixedDefinitions, part_manifest, recorded_definitions
from featurecache.text import first_named

log = logging.getLogger(__name__)

#: what an entry's key holds in place of the CCD's fingerprint (never a fingerprint: those are hex)
PER_ENTRY_DEFINITIONS = "definitions recorded per entry"
#: the "code" of an entry whose part records no definitions although its key is of the new kind
NOT_RECORDED = "(definitions not recorded)"


def with_ccd_keys(inputs: list[InputFile], ccd_config: str) -> list[InputFile]:
    """``inputs`` with :attr:`InputFile.ccd_key` set: the key with ``ccd_config``
    (``BuildConfig.entry_config_hash`` of the CCD's fingerprint), the one builds before session 44
    gave the entry, and every build gives its failure."""
    return [dataclasses.replace(i, ccd_key=entry_key(i.sha256, i.entry_id, ccd_config)) for i in inputs]


def changed_definitions(
    root: Path, stored: pa.Table, inputs: list[InputFile], ccd: Path | None
) -> dict[str, list[str]]:
    """Entry id → the codes whose definition changed, of each input whose live entry has the
    input's key (same bytes, featurizer and config; CCD in no key) and used a definition that is not
    the one a lookup in ``ccd`` gives now (``parse.ccd.definition_hashes``: one pass over a
    ``components.cif`` for every code recorded, no parse). A code recorded as undefined whose block
    now hashes to something is parsed to tell a real definition from one without atoms (``UNL``).
    An entry of such a part whose part records no definitions (none should: only builds write
    entries) names :data:`NOT_RECORDED`: it is rebuilt."""
    if not stored.num_rows or not inputs:
        return {}
    key_of = dict(zip(stored.column("id").to_pylist(), stored.column("key").to_pylist(), strict=True))
    part_of = dict(zip(stored.column("id").to_pylist(), stored.column("part").to_pylist(), strict=True))
    by_part: dict[str, set[str]] = {}
    for i in inputs:
        if key_of.get(i.entry_id) == i.key:
            by_part.setdefault(part_of[i.entry_id], set()).add(i.entry_id)
    changed: dict[str, list[str]] = {}
    used: dict[str, dict[str, set[str]]] = {}  # code -> sha256 -> entry ids
    for part, ids in sorted(by_part.items()):
        record = recorded_definitions(part_manifest(root, part))
        for entry_id in sorted(ids):
            if record is None:
                changed[entry_id] = [NOT_RECORDED]
                continue
            for code, sha in record.get(entry_id, {}).items():  # (not named: it looked none up)
                used.setdefault(code, {}).setdefault(sha, set()).add(entry_id)
    if not used:
        return changed
    from featurecache.parse.ccd import definition_hashes

    now = definition_hashes(ccd, used)
    for code in sorted(used):
        for sha, ids in sorted(used[code].items()):
            if now[code] == sha or (not sha and _still_undefined(ccd, code)):
                continue
            for entry_id in ids:
                changed.setdefault(entry_id, []).append(code)
    return {e: sorted(codes) for e, codes in sorted(changed.items())}


def _still_undefined(ccd: Path | None, code: str) -> bool:
    """Whether a lookup of ``code`` still finds no definition (its block has no atoms); False when
    its definition does not parse (the entry is rebuilt, and fails naming it)."""
    from featurecache.chem.library import get_library
    from featurecache.errors import CCDError

    try:
        return get_library(ccd).get(code) is None
    except CCDError:
        return False


#: codes named in the summary's row
SHOWN_CODES = 8


def changed_codes_text(changed: dict[str, list[str]], ids: set[str] | None = None) -> str:
    """``HEM (2), MG (1)``: the codes of ``changed`` (those of ``ids`` only, when given), by how
    many entries each rebuilds, most first."""
    counts = Counter(c for e, codes in changed.items() if ids is None or e in ids for c in codes)
    codes = sorted(counts, key=lambda c: (-counts[c], c))
    return first_named([f"{c} ({counts[c]})" for c in codes], SHOWN_CODES)


def warn_mixed_definitions(
    out: Path, tables: dict[str, Any], computed: list[str], ccd: Path | None, pdb_dir: Path
) -> None:
    """When this build's chem stage computed a component again (``computed``: the keys) whose
    definition live entries recorded otherwise (another --pdb-dir's, not rebuilt here; ``tables``:
    the index), warn of them: their tokens and bonds are of the previous definition, their
    reference conformer of the new one (review R26b s44 #6; ``featurecache info`` counts them
    whatever a build computed)."""
    from featurecache.build.discover import resolved
    from featurecache.store.definitions import mixed_definitions

    codes = {k for k in computed if "#" not in k}
    components = tables.get("components")
    if not codes or components is None:
        return
    mixed = mixed_definitions(out, tables["entries"], components)
    mixed.entries = {k: v for k, v in mixed.entries.items() if k[1] in codes}
    for line in mixed_definitions_warnings(mixed, out, ccd, str(resolved(Path(pdb_dir)))):
        log.warning("%s", line)


def mixed_definitions_warnings(mixed: MixedDefinitions, out: Path, ccd: Path | None, here: str) -> list[str]:
    """One line per ``--pdb-dir`` whose live entries (not rebuilt by this build) were built with
    another definition of a code than the store's component of it (review R26b s44 #6): the codes,
    how many entries, the directory, and the command that rebuilds them; ``here``: this build's
    resolved ``--pdb-dir`` (its own entries are named as such: a failed rebuild leaves them)."""
    by_dir: dict[str, dict[str, list[str]]] = {}
    for (where, code), ids in mixed.entries.items():
        by_dir.setdefault(where, {})[code] = ids
    lines = []
    ccd_arg = f" --ccd {shlex.quote(str(ccd))}" if ccd is not None else ""
    for where, codes in sorted(by_dir.items()):
        ids = sorted({e for v in codes.values() for e in v})
        n = len(ids)
        named = ", ".join(f"{c} ({len(v)})" for c, v in sorted(codes.items()))
        what = f"{n} entr{'y' if n == 1 else 'ies'} ({first_named(ids, 5)})"
        if not where:
            lines.append(f"{what} of a --pdb-dir their parts do not record {'was' if n == 1 else 'were'} built with "
                         f"another definition of {named} than the store's reference conformers: rebuild them with "
                         f"featurecache build --pdb-dir THEIR_DIR{ccd_arg} --out {shlex.quote(str(out))}")  # fmt: skip
            continue
        whose = "of this --pdb-dir, kept after a failed rebuild" if where == here else f"of {where}"
        lines.append(f"{what} {whose} {'was' if n == 1 else 'were'} built with another definition of {named} than "
                     "the one the store's reference conformers of that code now come from (components are one per "
                     "code for the whole store): their tokens and bonds are of the previous definition; rebuild "
                     f"them: featurecache build --pdb-dir {shlex.quote(where)}{ccd_arg} --out "
                     f"{shlex.quote(str(out))}")  # fmt: skip
    return lines


def summary_reasons(
    changed: dict[str, list[str]], pending: list[InputFile], failed: set[str]
) -> dict[str, Any]:
    """What the build summary says of the entries rebuilt for changed definitions: how many (of
    ``pending``, not failed: ``failed`` their paths) and the codes."""
    ids = {i.entry_id for i in pending if i.entry_id in changed and i.rel not in failed}
    return {"n": len(ids), "codes": changed_codes_text(changed, ids) if ids else ""}
