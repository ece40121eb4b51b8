"""featurecache: an ahead-of-time feature cache for AlphaFold3-style training.

Kept import-light on purpose (no torch, gemmi or dask here): ``open_store`` imports the reader
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["__version__", "open_store"]

if TYPE_CHECKING:
    from featurecache.store.reader import LocalStore


def open_store(path: Any) -> LocalStore:
    """Open a store directory read-only (see :class:`featurecache.store.reader.LocalStore`)."""
    from featurecache.store.reader import open_store as _open

    return _open(path)
