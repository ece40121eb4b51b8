"""One input file → one entry's features (pure: depends only on the bytes, name and options)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import gemmi

from featurecache.const import CRYSTALLIZATION_AIDS
from featurecache.featurize.bonds import ComponentBonds, token_bonds
from featurecache.featurize.interfaces import INTERFACE_CUTOFF, chain_interfaces
from featurecache.parse.structure import _parse_structure
from featurecache.tokenize.af3 import ComponentAtoms, tokenize
from featurecache.types import EntryMeta, Structure


@dataclass
class StageTimer:
    """Seconds spent per stage (parse / tokenize / featurize / write …)."""

    seconds: dict[str, float] = field(default_factory=dict)
    stage: str = "read"
    _t0: float = 0.0

    def start(self, stage: str) -> None:
        now = time.perf_counter()
        if self._t0:
            self.seconds[self.stage] = self.seconds.get(self.stage, 0.0) + now - self._t0
        self.stage, self._t0 = stage, now

    def stop(self) -> None:
        self.start(self.stage)
        self._t0 = 0.0


def is_xray(st: gemmi.Structure, method: str) -> bool:
    """Whether the structure's method (``_exptl.method``, PDB ``EXPDTA``: every one it states) is X-ray
    diffraction (a joint X-ray / neutron refinement too)."""
    methods = [method, *(e.method for e in st.meta.experiments)]
    return any("X-RAY" in m.upper() for m in methods)


def featurize_bytes(
    data: bytes,
    name: str,
    entry_id: str,
    *,
    timer: StageTimer | None = None,
    component_atoms: ComponentAtoms | None = None,
    component_bonds: ComponentBonds | None = None,
    interface_cutoff: float = INTERFACE_CUTOFF,
    keep_crystallization_aids: bool = False,
) -> Structure:
    """Parse, tokenize and featurize one structure file's bytes.

    The crystallization aids (:data:`~featurecache.const.CRYSTALLIZATION_AIDS`) of an X-ray
    structure are removed, as AF3 removes them from its training structures (supplement §2.5.4),
    unless ``keep_crystallization_aids``.

    Raises an :class:`~featurecache.errors.InputError` subclass (with ``.stage``) for bad input;
    ``timer.stage`` names the stage that was running when anything else was raised.
    """
    timer = timer or StageTimer()
    timer.start("parse")
    raw = _parse_structure(data, name, component_atoms=component_atoms)
    st = raw.structure
    n_models = len(st)
    parse_warnings = list(raw.warnings)
    if "_featurecache.warning" in st.info:
        parse_warnings.append(st.info["_featurecache.warning"])
    method = st.info["_exptl.method"] if "_exptl.method" in st.info else ""  # noqa: SIM401 - gemmi InfoMap has no .get
    if not method and len(st.meta.experiments):
        method = st.meta.experiments[0].method
    timer.start("tokenize")
    drop = frozenset() if keep_crystallization_aids or not is_xray(st, method) else CRYSTALLIZATION_AIDS
    tk = tokenize(st, fmt=raw.fmt, component_atoms=component_atoms, drop=drop)
    timer.start("featurize")
    bonds = token_bonds(st, tk, component_bonds)
    interfaces = chain_interfaces(tk.atoms, tk.tokens, interface_cutoff)
    structure_id = st.info["_entry.id"] if "_entry.id" in st.info else st.name  # noqa: SIM401
    meta = EntryMeta(
        resolution=raw.resolution,
        release_date=raw.release_date,
        method=method.upper(),
        structure_id=structure_id,
        n_models=n_models,
    )
    timer.stop()
    return Structure(entry_id, tk.atoms, tk.tokens, bonds, interfaces, tk.chains, meta, tk.warnings,
                     tuple(parse_warnings))  # fmt: skip
