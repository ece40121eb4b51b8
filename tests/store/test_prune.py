"""``featurecache prune`` deletes the parts no index row uses, and the store serves the same data.

A real store built in two steps (one input per structure part, sample MSAs and CCD): 102m.cif,
1psm.cif; then 102m.cif is replaced by another structure (2q2k's bytes), so the part that held
the first 102m holds nothing live any more. Real builds on a Dask LocalCluster, real CLI runs.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pyarrow.feather as feather
import pytest

import featurecache
from featurecache.errors import StoreError
from featurecache.store.index import complete_parts
from featurecache.store.prune import prune_store, unused_parts
from featurecache.store.root import BuildLock
from featurecache.store.verify import verify_store
from tests.conftest import SAMPLES, CliRun, build_store, cli_in_process


def _index_bytes(store: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((store / "index").glob("*.arrow"))}


def _served(store: Path) -> dict[str, str]:
    """A digest of everything a reader gets: every entry's arrays and reference features, every MSA."""
    reader = featurecache.open_store(store)
    out = {}
    for i in reader.ids:
        e = reader.entry(i)
        h = hashlib.sha256()
        for group in (e.atoms, e.tokens, e.bonds, e.interfaces, reader.reference_features(e)):
            for name in sorted(group):
                h.update(name.encode() + np.ascontiguousarray(group[name]).tobytes())
        out[f"entry {i}"] = h.hexdigest()
    for key in reader.msas.column("key").to_pylist():
        m = reader.msa(key)
        out[f"MSA {key}"] = hashlib.sha256(m.residues.tobytes() + m.deletions.tobytes()).hexdigest()
    return out


def _parts_in_index(store: Path) -> set[str]:
    """Every part named by a row of a top-level index file (read with pyarrow alone)."""
    return {
        p
        for f in (store / "index").glob("*.arrow")
        for t in [feather.read_table(f)]
        if "part" in t.column_names
        for p in t.column("part").to_pylist()
    }


def _cli(*args: str) -> CliRun:
    """``featurecache ARGS`` (prune): the real CLI, in this process (tests/conftest.py)."""
    return cli_in_process(*args)


def test_prune_removes_the_replaced_entrys_part_and_serves_the_same(
    replaced_store: Path, tmp_path: Path
) -> None:
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    before_parts = {p.name for p in complete_parts(store)}
    before_index, before_served = _index_bytes(store), _served(store)
    live = _parts_in_index(store)
    dry = _cli("prune", str(store), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert {p.name for p in complete_parts(store)} == before_parts  # a dry run removes nothing

    result = prune_store(store)
    assert "s-000000" in result.parts  # held only the first 102m, replaced since
    assert not set(result.parts) & live  # no part an index row names
    assert {"s-000001", "s-000002"} <= {p.name for p in complete_parts(store)}
    assert {p.name for p in complete_parts(store)} == before_parts - set(result.parts)
    assert dry.stdout.startswith(f"would remove {len(result.parts)} part(s)") and "s-000000" in dry.stdout
    assert result.bytes > 0 and not any(p.name.startswith(".tmp-") for p in (store / "parts").iterdir())

    assert _index_bytes(store) == before_index
    assert _served(store) == before_served
    assert verify_store(store) == []
    assert unused_parts(store) == []  # nothing more to remove
    again = _cli("prune", str(store))
    assert again.returncode == 0 and again.stdout.startswith("removed 0 part(s)"), again.stdout

    # the next build is not confused: nothing rebuilt, the index as it was
    summary = build_store(store, replaced_store.parent / "in", workers=1, part_size=1, msa_dir=SAMPLES / "msas",
                          ccd=SAMPLES / "ccd")  # fmt: skip
    assert summary.n_built == 0 and summary.n_skipped == 2
    assert _index_bytes(store) == before_index


def test_prune_waits_for_no_build(replaced_store: Path, tmp_path: Path) -> None:
    store = Path(shutil.copytree(replaced_store, tmp_path / "store"))
    with BuildLock(store), pytest.raises(StoreError, match="another build is writing"):
        prune_store(store)
    assert (store / "parts" / "s-000000").is_dir()
    r = _cli("prune", str(tmp_path / "not-a-store"))
    assert r.returncode == 3 and "not a featurecache store" in r.stderr and "Traceback" not in r.stderr, (
        r.stderr
    )
