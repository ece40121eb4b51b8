"""Find input structure files, give each an entry id and a key, and plan the parts still to build."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from featurecache.const import FEATURIZER_VERSION
from featurecache.parse.structure import entry_stem, structure_format
from featurecache.store.index import complete_parts, read_table
from featurecache.store.layout import (
    ENTRY_KEY_CHARS,
    PART_DONE_FILE,
    PART_INDEX_DIR,
    STRUCTURE_PART_PREFIX,
    part_name,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputFile:
    path: str  # absolute
    rel: str  # relative to the input directory (what the index records)
    entry_id: str
    fmt: str  # mmcif | pdb | bcif | "" (not a structure file name)
    sha256: str
    size: int
    key: str


def _sha256(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n


def entry_key(sha256: str, entry_id: str, config_hash: str) -> str:
    doc = json.dumps(
        {"sha256": sha256, "id": entry_id, "config": config_hash, "v": FEATURIZER_VERSION}, sort_keys=True
    )
    return hashlib.sha256(doc.encode()).hexdigest()[:ENTRY_KEY_CHARS]


def discover(pdb_dir: Path, config_hash: str, existing_ids: dict[str, str] | None = None) -> list[InputFile]:
    """Every non-hidden file under ``pdb_dir`` (recursive), sorted by relative path.

    Entry id: the file stem (``7a4d-assembly1.cif.gz`` → ``7a4d-assembly1``); when two inputs
    share a stem (``1A8O.cif`` and ``1A8O.pdb``), or the store already holds that id from another
    source path, the id keeps the format suffix (``1A8O.cif``). Files whose names are not structure
    formats are kept too: the build records them as failures, so every file is accounted for.
    """
    pdb_dir = Path(pdb_dir)
    files = sorted(
        p for p in pdb_dir.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(pdb_dir).parts)
    )  # fmt: skip
    stems = Counter(entry_stem(p.name) for p in files)
    existing_ids = existing_ids or {}
    with ThreadPoolExecutor(max_workers=4) as pool:
        digests = list(pool.map(_sha256, files))
    out = []
    for p, (sha, size) in zip(files, digests, strict=True):
        rel = p.relative_to(pdb_dir).as_posix()
        stem = entry_stem(p.name)
        owner = existing_ids.get(stem)
        collides = stems[stem] > 1 or (owner is not None and owner != rel)
        entry_id = (p.name[:-3] if p.name.endswith(".gz") else p.name) if collides else stem
        out.append(InputFile(str(p.resolve()), rel, entry_id, structure_format(p.name) or "", sha, size,
                             entry_key(sha, entry_id, config_hash)))  # fmt: skip
    return out


def done_keys(root: Path) -> set[str]:
    """Keys (entries and failures) of every complete structure part: what a re-run skips."""
    keys: set[str] = set()
    for part in complete_parts(root):
        if not part.name.startswith(STRUCTURE_PART_PREFIX):
            continue
        manifest = part / PART_INDEX_DIR / PART_DONE_FILE
        try:
            keys.update(json.loads(manifest.read_text())["keys"])
        except (OSError, ValueError, KeyError):
            log.warning("part %s has no readable manifest; its entries will be rebuilt", part.name)
    return keys


def existing_entry_ids(root: Path) -> dict[str, str]:
    """id → source path of entries already in the store (from the current index)."""
    f = Path(root) / "index" / "entries.arrow"
    if not f.is_file():
        return {}
    t = read_table(f, memory_map=False).select(["id", "source_path"])
    return dict(zip(t.column("id").to_pylist(), t.column("source_path").to_pylist(), strict=True))


def next_part_number(root: Path, prefix: str) -> int:
    numbers = [int(p.name[len(prefix):]) for p in complete_parts(root) if p.name.startswith(prefix)
               and p.name[len(prefix):].isdigit()]  # fmt: skip
    return max(numbers, default=-1) + 1


def plan_parts(root: Path, pending: list[InputFile], part_size: int) -> list[tuple[str, list[InputFile]]]:
    """Split pending inputs (already sorted) into parts of ``part_size``, numbered after existing ones."""
    start = next_part_number(root, STRUCTURE_PART_PREFIX)
    return [
        (part_name(STRUCTURE_PART_PREFIX, start + k), pending[i : i + part_size])
        for k, i in enumerate(range(0, len(pending), part_size))
    ]
