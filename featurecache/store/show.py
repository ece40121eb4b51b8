"""`featurecache show STORE ID`: one entry, as a training step would read it."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from featurecache.const import MOL_TYPE_NAMES
from featurecache.store.reader import open_store


def print_entry(path: Path, entry_id: str) -> None:
    store = open_store(path)
    t0 = time.perf_counter()
    entry = store.entry(entry_id)
    ms = (time.perf_counter() - t0) * 1e3
    console = Console()
    meta = Table(title=f"{entry_id}  (read in {ms:.1f} ms)", show_header=False)
    for k in ("source_path", "format", "structure_id", "method", "resolution", "release_date", "n_models",
              "token_count", "atom_count", "bond_count", "n_chains", "content_hash"):  # fmt: skip
        meta.add_row(k, str(entry.meta.get(k)))
    console.print(meta)
    chains = Table(title="chains")
    for col in ("asym", "label", "auth", "entity", "type", "tokens", "resolved", "sequence"):
        chains.add_column(col, overflow="fold")
    for c in entry.chains:
        seq = c["sequence"]
        chains.add_row(str(c["asym_id"]), c["label_id"], c["auth_id"], str(c["entity_id"]), MOL_TYPE_NAMES[c["mol_type"]],
                       str(c["token_count"]), str(c["n_resolved"]), seq if len(seq) <= 60 else seq[:57] + "...")  # fmt: skip
    console.print(chains)
    arrays = Table(title="arrays")
    for col in ("array", "dtype", "shape"):
        arrays.add_column(col)
    for group in ("atoms", "tokens", "bonds", "interfaces"):
        for name, a in getattr(entry, group).items():
            arrays.add_row(f"{group}/{name}", str(a.dtype), str(tuple(a.shape)))
    console.print(arrays)
