"""featurecache: an ahead-of-time feature cache for AlphaFold3-style training.

Kept import-light on purpose (no torch, gemmi or dask here): ``open_store`` imports the reader
on first use.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"  # the only place it is written: pyproject.toml reads it ([tool.setuptools.dynamic])
__all__ = ["__version__", "open_store", "package_dir", "source_digest"]

if TYPE_CHECKING:
    from featurecache.store.reader import LocalStore


def open_store(path: Any, *, memory_map: bool = True) -> LocalStore:
    """Open a store directory read-only (see :class:`featurecache.store.reader.LocalStore`);
    ``memory_map=False`` reads the index tables into memory instead of mapping them."""
    from featurecache.store.reader import open_store as _open

    return _open(path, memory_map=memory_map)


def package_dir() -> Path:
    """The directory this featurecache package is imported from."""
    return Path(__file__).resolve().parent


_digest: str | None = None


def source_digest(*, refresh: bool = False) -> str:
    """The identity of the code this process runs: a hash over the sorted relative paths and the
    bytes of every file an install of the package carries: its ``*.py`` and its data
    (``chem/data/standard_components.cif``, which the tokenizer and the chem library read; see
    :func:`_source_files`) (16 hex characters). ``__version__`` stays the same across edits; this does not (a changed comment
    changes it too). Computed once per process, so a long-lived worker whose files are replaced
    under it still reports the code it loaded; ``refresh``: read the files again (the build driver
    does at each build's start: it compares its workers with its package directory as it is then)."""
    global _digest
    if _digest is None or refresh:
        _digest = digest_sources(package_dir())
    return _digest


#: Directories :func:`digest_sources` does not enter (besides hidden ones): Python's byte code.
_NOT_SOURCE_DIRS = frozenset({"__pycache__"})


#: Directories whose files an install carries besides the ``*.py`` (pyproject's package-data:
#: ``chem/data/*``).
_DATA_DIRS = frozenset({"data"})

#: Files of the package's own directory an install carries besides the ``*.py`` (pyproject's
#: package-data: the PEP 561 marker).
_PACKAGE_FILES = frozenset({"py.typed"})


def _source_files(root: Path) -> list[str]:
    """The relative paths (``/``-separated, sorted) :func:`digest_sources` hashes: what an install
    of the package carries, i.e. every ``*.py`` file, every file in a ``data`` directory and the
    top-level ``py.typed`` (package-data), whether the package is a checkout or a wheel (a
    checkout's other files, such as ``model/KERNEL_NOTES.md``, are not installed and do not
    count). A symlink to a file counts;
    a dangling one, a directory or a FIFO does not; no path part may start with ``.`` (an editor's
    lock symlink ``.#run.py``, a hidden directory); ``__pycache__`` is not entered, nor are
    symlinked directories."""
    rels = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _NOT_SOURCE_DIRS]
        base = Path(dirpath)
        in_data = any(part in _DATA_DIRS for part in base.relative_to(root).parts)
        for name in filenames:
            carried = name.endswith(".py") or in_data or (base == root and name in _PACKAGE_FILES)
            if name.startswith(".") or not carried:
                continue
            if (base / name).is_file():
                rels.append((base / name).relative_to(root).as_posix())
    return sorted(rels)


def digest_sources(root: Path) -> str:
    """:func:`source_digest` of the package directory ``root`` (hex str, 16 characters).

    A file listed that cannot be read is a one-line :class:`~featurecache.errors.StoreError` naming
    it (a build exits 3)."""
    h = hashlib.sha256()
    for rel in _source_files(root):
        try:
            data = (root / rel).read_bytes()
        except OSError as exc:
            from featurecache.errors import StoreError

            reason = exc.strerror or type(exc).__name__
            raise StoreError(f"cannot read the featurecache source file {root / rel}: {reason}") from exc
        # lengths keep the framing unambiguous (no two file lists hash the same stream)
        h.update(f"{len(rel)}:{rel}:{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()[:16]
