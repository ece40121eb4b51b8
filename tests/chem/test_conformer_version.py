"""Stored components record the conformer code version (and RDKit's); an older one is recomputed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from rdkit import rdBase

import featurecache
from featurecache.build.chem_stage import stored_version
from featurecache.chem.conformer import CONFORMER_VERSION
from featurecache.store.components import component_rows_in_parts
from featurecache.store.index import read_table, write_table
from tests.conftest import STRUCTURES, build_store


def _as_written_by(store_path: Path, version: int | None) -> None:
    """The component parts' rows (and chem scans) as conformer code ``version`` wrote them (None:
    code from before the column, which lacks it), plus a row of a key no entry uses (``ZZZ``, a
    copy of the first row), and the index's kept part rows dropped so the next build reads the
    parts again."""
    first = True
    for f in sorted((store_path / "parts").glob("c-*/_index/*.arrow")):
        if f.name not in ("components.arrow", "chem_scans.arrow"):
            continue
        t = read_table(f, memory_map=False)
        t = t.drop_columns([c for c in t.column_names if c in ("conformer_version", "rdkit_version")])
        if version is not None:
            t = t.append_column("conformer_version", pa.array([version] * t.num_rows, type=pa.int32()))
        if f.name == "components.arrow" and t.num_rows and first:
            extra = t.slice(0, 1).to_pylist()[0]
            t = pa.concat_tables(
                [t, pa.Table.from_pylist([{**extra, "key": "ZZZ", "code": "ZZZ"}], schema=t.schema)]
            )
            first = False
        write_table(f, t)
    shutil.rmtree(store_path / "index" / ".part-rows", ignore_errors=True)


@pytest.mark.parametrize("older", [None, CONFORMER_VERSION - 1])
def test_components_of_an_older_conformer_code_are_computed_again(tmp_path: Path, older: int | None) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "102m.cif").symlink_to(STRUCTURES / "102m.cif")  # no --ccd: packaged residues + perceived HEM
    store = tmp_path / "s"
    build_store(store, inputs, workers=1)
    rows = component_rows_in_parts(store).to_pylist()
    keys = {r["key"] for r in rows}
    assert any(k.startswith("HEM#") for k in keys)
    assert {(r["conformer_version"], r["rdkit_version"]) for r in rows} == {
        (CONFORMER_VERSION, rdBase.rdkitVersion)
    }
    _as_written_by(store, older)
    stage = build_store(store, inputs, workers=1).stages["chem"]
    # every component in use, the perceived one included, is computed again by this code
    assert stage["components (store / this run)"] == f"{len(keys) + 1} / {len(keys)}"
    latest = {r["key"]: r for r in component_rows_in_parts(store).to_pylist()}
    assert {stored_version(latest[k]) for k in keys} == {CONFORMER_VERSION}
    s = featurecache.open_store(store)
    assert s.reference_features(s.entry("102m"))["ref_mask"].all()
    index_rows = s.components.to_pylist()
    assert {r["key"] for r in index_rows} == keys  # one row per key in the index (ZZZ: no code in use)
    assert {(r["conformer_version"], r["rdkit_version"]) for r in index_rows} == {
        (CONFORMER_VERSION, rdBase.rdkitVersion)
    }
    # and once current, nothing more: ZZZ, which no entry uses, stays as it was and makes no
    # build scan the structure parts again
    assert stored_version(latest["ZZZ"]) < CONFORMER_VERSION
    assert stage["structure parts scanned"] == 1
    again = build_store(store, inputs, workers=1).stages["chem"]
    assert again["components (store / this run)"] == f"{len(keys) + 1} / 0"
    assert again["structure parts scanned"] == 0
