"""Where component definitions come from: a ``--ccd`` path, then the packaged standard residues.

A :class:`ComponentLibrary` answers ``code → ComponentDef | None``. The user's CCD (file or
directory) wins when it defines the code; the packaged standard residues
(:mod:`featurecache.chem.standard`) cover the 29 standard codes without any CCD. Libraries are
cached per path (:func:`get_library`) so the tokenizer, featurizer and chem stage of one worker
share one parsed copy.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from pathlib import Path

from featurecache.chem.standard import standard_component
from featurecache.parse.ccd import CCD, ComponentDef

__all__ = ["ComponentLibrary", "clear_component_caches", "get_library"]


class ComponentLibrary:
    """Code → CCD definition, from ``ccd_path`` (optional) then the packaged standard set."""

    def __init__(self, ccd_path: str | os.PathLike[str] | None = None) -> None:
        self.ccd = CCD(ccd_path)

    @property
    def path(self) -> Path | None:
        return self.ccd.path

    def load(self, codes: Iterable[str]) -> dict[str, ComponentDef]:
        """Definitions of every code that either source defines (one pass over a big CCD file)."""
        codes = list(dict.fromkeys(codes))
        found = self.ccd.load(codes)
        for code in codes:
            if code not in found and (std := standard_component(code)) is not None:
                found[code] = std
        return {c: found[c] for c in codes if c in found}

    def get(self, code: str) -> ComponentDef | None:
        return self.load([code]).get(code)

    def source(self, code: str) -> str:
        """'ccd' (the user's CCD), 'packaged' (standard set) or '' (undefined)."""
        if self.ccd.get(code) is not None:
            return "ccd"
        return "packaged" if standard_component(code) is not None else ""


@functools.lru_cache(maxsize=8)
def _library(path: str | None) -> ComponentLibrary:
    return ComponentLibrary(path)


def get_library(ccd_path: str | os.PathLike[str] | None = None) -> ComponentLibrary:
    """A process-wide cached :class:`ComponentLibrary` for ``ccd_path`` (None: packaged only)."""
    return _library(None if ccd_path is None else str(Path(ccd_path).resolve()))


def clear_component_caches() -> None:
    """Forget every parsed CCD definition of this process (the libraries and the per-component
    bond lists). A build calls it on the driver and on every Dask worker when it starts: the
    caches are keyed by path, so a CCD edited in place between two builds served by one process
    (a long-lived ``dask worker``, or ``run_build`` called twice) would otherwise be read stale."""
    from featurecache.chem.bonds import clear_bond_cache

    _library.cache_clear()
    clear_bond_cache()
