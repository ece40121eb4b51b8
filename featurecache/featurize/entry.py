"""One input file → one entry's features (pure: depends only on the bytes, name and options)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

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


def featurize_bytes(
    data: bytes,
    name: str,
    entry_id: str,
    *,
    timer: StageTimer | None = None,
    component_atoms: ComponentAtoms | None = None,
    component_bonds: ComponentBonds | None = None,
    interface_cutoff: float = INTERFACE_CUTOFF,
) -> Structure:
    """Parse, tokenize and featurize one structure file's bytes.

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
    timer.start("tokenize")
    tk = tokenize(st, fmt=raw.fmt, component_atoms=component_atoms)
    timer.start("featurize")
    bonds = token_bonds(st, tk, component_bonds)
    interfaces = chain_interfaces(tk.atoms, tk.tokens, interface_cutoff)
    method = st.info["_exptl.method"] if "_exptl.method" in st.info else ""  # noqa: SIM401 - gemmi InfoMap has no .get
    if not method and len(st.meta.experiments):
        method = st.meta.experiments[0].method
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
