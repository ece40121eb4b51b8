"""Every array a build writes says what its dimensions are (``dimension_names``), and every record
array gives its record layout as plain JSON (``record_fields``, ``itemsize``) next to
``record_dtype``, the Python repr that featurecache reads (review R28c s46 #13): a reader in
another language needed a Python-literal parser and numpy's typestr rules to read any record.
Additive: the format is unchanged and readers keep using ``record_dtype``.

A real build (one worker) of the repo's sample 102m with its MSA and CCD files (structure, MSA and
component parts)."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import numpy as np

from featurecache.store.verify import verify_store
from tests.conftest import SAMPLES, build_store


def _dtype_from_json(attrs: dict[str, object]) -> np.dtype:
    """The record dtype from ``record_fields`` and ``itemsize`` alone (what a non-Python reader does)."""
    fields = attrs["record_fields"]
    assert isinstance(fields, list)
    return np.dtype(
        {
            "names": [f["name"] for f in fields],
            "formats": [(f["dtype"], tuple(f["shape"])) if f["shape"] else f["dtype"] for f in fields],
            "offsets": [f["offset"] for f in fields],
            "itemsize": attrs["itemsize"],
        }
    )


def test_arrays_name_their_dimensions_and_records_their_layout_as_json(tmp_path: Path) -> None:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "102m.cif", pdb)
    store = tmp_path / "store"
    done = build_store(store, pdb, workers=1, msa_dir=SAMPLES / "msas", ccd=SAMPLES / "ccd")
    assert done.n_failed == 0
    assert verify_store(store) == []

    kinds: dict[tuple[str, ...], int] = {}
    for meta in sorted((store / "parts").rglob("zarr.json")):
        doc = json.loads(meta.read_text())
        if doc["node_type"] != "array":
            continue
        names = tuple(doc.get("dimension_names") or ())
        kinds[names] = kinds.get(names, 0) + 1
        attrs = doc.get("attributes", {})
        if "record_dtype" in attrs:
            assert names == ("row", "byte"), meta
            want = np.dtype(ast.literal_eval(attrs["record_dtype"]))
            got = _dtype_from_json(attrs)
            assert got == want and got.itemsize == doc["shape"][1], meta
        elif meta.parent.parent.name == "residues":
            assert names == ("msa_row", "column"), meta
    assert kinds.get(("row", "byte"), 0) >= 6 and kinds.get(("msa_row", "column"), 0) >= 1, kinds
