"""featurecache: an ahead-of-time feature cache for AlphaFold3-style training.

Kept import-light on purpose (no torch, gemmi or dask here): ``open_store`` imports the reader
on first use.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["__version__", "open_store", "package_dir", "source_digest"]

if TYPE_CHECKING:
    from featurecache.store.reader import LocalStore


def open_store(path: Any) -> LocalStore:
    """Open a store directory read-only (see :class:`featurecache.store.reader.LocalStore`)."""
    from featurecache.store.reader import open_store as _open

    return _open(path)


def package_dir() -> Path:
    """The directory this featurecache package is imported from."""
    return Path(__file__).resolve().parent


_digest: str | None = None


def source_digest(*, refresh: bool = False) -> str:
    """The identity of the code this process runs: a hash over the sorted relative paths and the
    bytes of every ``*.py`` file of the package (16 hex characters). ``__version__`` stays the same
    across edits; this does not (a changed comment changes it too). Computed once per process, so
    a long-lived worker whose files are replaced under it still reports the code it loaded;
    ``refresh``: read the files again (the build driver does at each build's start: it compares
    its workers with its package directory as it is then)."""
    global _digest
    if _digest is None or refresh:
        _digest = digest_sources(package_dir())
    return _digest


def digest_sources(root: Path) -> str:
    """:func:`source_digest` of the package directory ``root`` (hex str, 16 characters)."""
    h = hashlib.sha256()
    for rel in sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")):
        data = (root / rel).read_bytes()
        # lengths keep the framing unambiguous (no two file lists hash the same stream)
        h.update(f"{len(rel)}:{rel}:{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()[:16]
