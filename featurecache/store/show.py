"""`featurecache show STORE ID`: one entry, as a training step would read it."""

from __future__ import annotations

import difflib
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from featurecache.const import MOL_TYPE_NAMES, MolType
from featurecache.errors import NotFound
from featurecache.store.info import table_console
from featurecache.store.reader import open_store

#: ids a "did you mean" names at most
SUGGESTED_IDS = 3


def similar_ids(entry_id: str, ids: list[str]) -> list[str]:
    """Ids a user may have meant by ``entry_id``: the same id in another case, ids that begin with it
    (a PDB code typed for ``721p-assembly1``), else close spellings; at most :data:`SUGGESTED_IDS`."""
    folded = entry_id.casefold()
    same = sorted(i for i in ids if i.casefold() == folded)
    longer = sorted(i for i in ids if i.casefold().startswith(folded) and i not in same)
    found = same + longer
    if not found:
        by_fold = {i.casefold(): i for i in ids}
        found = [
            by_fold[m] for m in difflib.get_close_matches(folded, list(by_fold), n=SUGGESTED_IDS, cutoff=0.75)
        ]
    return found[:SUGGESTED_IDS]


def _failed_inputs(failures: list[dict[str, str]], entry_id: str) -> str:
    """What the index's failures say of ``entry_id``'s input ("header.pdb failed at parse:
    EmptyStructureError: …"), "" when none failed (review R33 s47 #8)."""
    said = [f"{f['path']} failed at {f['stage']}: {f['error_class']}: {f['message'][:200]}"
            for f in failures if f["entry_id"] == entry_id and entry_id]  # fmt: skip
    return "; ".join(said[:SUGGESTED_IDS])


def msa_coverage_text(meta: dict[str, Any]) -> str:
    """``show``'s ``msa_coverage`` row: the entry's share of polymer chains with an MSA from files
    and the counts it is made of ("0.667 (2 of 3 polymer chains have an MSA from files)"); a chain
    without one trains on its single sequence (review R40d s51 #3)."""
    coverage, n_msa = meta.get("msa_coverage"), meta.get("n_msa_chains")
    n_polymer = meta.get("n_polymer_chains")
    if coverage is None or n_msa is None:
        return "not in the index (an index of an older featurecache)"
    if not n_polymer:
        return "none (no polymer chains)"
    return f"{coverage:.3g} ({n_msa} of {n_polymer} polymer chains have an MSA from files)"


def chain_msa_cells(chain: dict[str, Any]) -> tuple[str, str]:
    """A polymer chain's ``msa depth`` and ``msa files`` cells in ``show``: its MSA's rows and the
    alignment files merged into it (files 0, depth 1: no file was found, the single-sequence MSA);
    "none" where the index lists no MSA for it (a first build not finished, or an MSA pruned by
    ``prune --sources-gone`` until the next build)."""
    if "msa_depth" not in chain or not chain.get("msa_key"):
        return "none", "none"
    return str(chain["msa_depth"]), str(chain["msa_files"])


def chain_msa_table(chains: list[dict[str, Any]]) -> Table | None:
    """``show``'s table of the entry's polymer chains' MSAs (None: the entry has no polymer chain):
    a table of its own beside ``chains``, whose columns stay as they were and unfolded on an
    80-column console (review R40d s51 #3: the MSA columns made ten and folded every header)."""
    polymer = [c for c in chains if c["mol_type"] != MolType.LIGAND]
    if not polymer:
        return None
    cells = [chain_msa_cells(c) for c in polymer]
    # the legend only where a chain has the single-sequence MSA (review R41c s51 #3)
    legend = ("msa files 0 (depth 1): no alignment file for the chain's sequence; it trains on its single "
              "sequence (usual for DNA and RNA)") if any(files == "0" for _, files in cells) else None  # fmt: skip
    t = Table(title="MSAs of the polymer chains", caption=legend)
    for col in ("asym", "label", "auth", "type", "length", "msa depth", "msa files"):
        t.add_column(col, overflow="fold")
    for c, (depth, files) in zip(polymer, cells, strict=True):
        t.add_row(str(c["asym_id"]), c["label_id"], c["auth_id"], MOL_TYPE_NAMES[c["mol_type"]],
                  str(len(c["sequence"])), depth, files)  # fmt: skip
    return t


def print_entry(path: Path, entry_id: str) -> None:
    store = open_store(path)
    t0 = time.perf_counter()
    try:
        entry = store.entry(entry_id)
    except NotFound as exc:
        failed = _failed_inputs(store.failures.to_pylist(), entry_id)
        if failed:
            raise NotFound(
                f"{exc}: its input {failed}; featurecache info {path} --failures lists every failure"
            ) from None
        hints = similar_ids(entry_id, store.ids) if entry_id.strip() else []  # '' begins every id
        if not hints:
            raise
        raise NotFound(f"{exc}; did you mean {' or '.join(hints)}?") from None
    ms = (time.perf_counter() - t0) * 1e3
    console = table_console()  # values never cut: fold, on a console wide enough for the frames
    meta = Table(title=f"{entry_id}  (read in {ms:.1f} ms)", show_header=False)
    meta.add_column("", overflow="fold")
    meta.add_column("", overflow="fold")
    for k in ("source_path", "format", "structure_id", "method", "resolution", "release_date", "n_models",
              "token_count", "atom_count", "bond_count", "n_chains", "content_hash"):  # fmt: skip
        meta.add_row(k, str(entry.meta.get(k)))
    meta.add_row("msa_coverage", msa_coverage_text(entry.meta))
    console.print(meta)
    chains = Table(title="chains")
    for col in ("asym", "label", "auth", "entity", "type", "tokens", "resolved", "sequence"):
        chains.add_column(col, overflow="fold")
    for c in entry.chains:
        seq = c["sequence"]
        chains.add_row(str(c["asym_id"]), c["label_id"], c["auth_id"], str(c["entity_id"]), MOL_TYPE_NAMES[c["mol_type"]],
                       str(c["token_count"]), str(c["n_resolved"]), seq if len(seq) <= 60 else seq[:57] + "...")  # fmt: skip
    console.print(chains)
    msas = chain_msa_table(entry.chains)
    if msas is not None:
        console.print(msas)
    arrays = Table(title="arrays")
    for col in ("array", "dtype", "shape"):
        arrays.add_column(col, overflow="fold")
    for group in ("atoms", "tokens", "bonds", "interfaces"):
        for name, a in getattr(entry, group).items():
            arrays.add_row(f"{group}/{name}", str(a.dtype), str(tuple(a.shape)))
    console.print(arrays)
