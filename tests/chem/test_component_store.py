"""Component parts on disk: write → index rebuild → load, and the chem-warnings index hook."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from featurecache.chem.conformer import conformer_for_component, conformer_for_perceived
from featurecache.chem.reference import ComponentTable
from featurecache.parse.ccd import CCD
from featurecache.store.components import (
    component_rows_in_parts,
    join_chem_warnings,
    load_component_table,
    scanned_structure_parts,
    write_component_part,
)
from featurecache.store.index import rebuild_index
from featurecache.store.root import init_store
from tests.chem import ccdtext


def test_write_rebuild_load_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "store"
    init_store(root, {})
    ccd = CCD(ccdtext.CCD_DIR)
    first = [conformer_for_component(ccd[c]) for c in ("HEM", "MG")]
    odd = conformer_for_perceived("ODD", ["C1"], [6], np.array([[np.nan, 0, 0]]))
    write_component_part(root, "c-000000", first, {"HEM": "ccd", "MG": "ccd"})
    write_component_part(root, "c-000001", [odd], {odd.key: "perceived:x"},
                         scans=[{"structure_part": "s-000000", "n_entries": 3, "n_residues": 10}])  # fmt: skip
    # a later part recomputes HEM (e.g. a newer CCD): its row must win
    shifted = type(first[0])(**{**first[0].__dict__, "positions": first[0].positions + np.float32(2.0)})
    write_component_part(root, "c-000002", [shifted], {"HEM": "ccd"})
    tables = rebuild_index(root)
    # the index lists the latest row per key (HEM's of c-000002); the parts keep both (below)
    assert tables["components"].num_rows == 3
    assert [r["part"] for r in tables["components"].to_pylist() if r["key"] == "HEM"] == ["c-000002"]
    assert scanned_structure_parts(root) == {"s-000000"}
    table = load_component_table(root)
    assert isinstance(table, ComponentTable) and len(table) == 3
    np.testing.assert_array_equal(table.component("HEM")["ref_pos"], shifted.positions)
    np.testing.assert_array_equal(table.component("MG")["ref_pos"], first[1].positions)
    assert table.component(odd.key)["strategy"] == "failed" and not table.component(odd.key)["mask"].any()
    # the names stored are the CCD's heavy atoms, in CCD order (independent text scan)
    assert table.component("HEM")["atom_names"] == [n for n, _ in ccdtext.heavy_atoms("HEM")]
    rows = component_rows_in_parts(root).to_pylist()
    hem_bonds = [r["bond_count"] for r in rows if r["key"] == "HEM"]
    heavy = {n for n, _ in ccdtext.heavy_atoms("HEM")}
    expected = sum(1 for b in ccdtext.bonds("HEM") if b["atom_id_1"] in heavy and b["atom_id_2"] in heavy)
    assert hem_bonds == [expected, expected]


def test_chem_warnings_follow_the_live_entry_version() -> None:
    entries = pa.table({"id": ["a", "b"], "part": ["s-000003", "s-000001"]})
    cw = pa.table(
        {
            "entry_id": ["a", "a", "b"],
            "path": ["a.cif", "a.cif", "b.cif"],
            "stage": ["chem"] * 3,
            "message": ["old version", "new version", "b"],
            "key": ["X", "X", "Y"],
            "n_atoms": pa.array([1, 1, 2], pa.int32()),
            "entry_part": ["s-000000", "s-000003", "s-000001"],
            "part": ["c-000000", "c-000005", "c-000002"],
        }
    )
    warnings = pa.table(
        {"entry_id": ["b"], "path": ["b.cif"], "stage": ["tokenize"], "message": ["w"], "part": ["s-000001"]}
    )
    out = join_chem_warnings({"entries": entries, "chem_warnings": cw, "warnings": warnings})
    assert out["chem_warnings"].column("message").to_pylist() == ["new version", "b"]
    merged = out["warnings"].to_pylist()
    assert [(r["entry_id"], r["stage"], r["message"]) for r in merged] == [
        ("b", "tokenize", "w"), ("a", "chem", "new version"), ("b", "chem", "b"),
    ]  # fmt: skip
