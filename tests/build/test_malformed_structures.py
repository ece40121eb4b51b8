"""A real build over malformed structure files of review R1 (notes/s32/r1_malformed.md).

Each damaged copy of a corpus file is either a failure naming the file, the stage (``parse``) and
what is wrong, with exit status 1, or, where the data is right, an entry whose arrays are those of
the undamaged file. Before: the overflowing PDB coordinate was stored as 0.0 (present), the
``type_symbol ?`` entry had calcium for CA, the byte-order-marked file failed with "expected block
header", the auth-only file failed at ``tokenize`` with "structure has no models", and the long
names were cut (``SULFATE1`` → ``SULFA``).
CLI build on the session's Dask cluster (tests/clusters.py), with the corpus's CCD.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import gemmi
import numpy as np

import featurecache
from tests.clusters import scheduler_args
from tests.conftest import CCD, REPO, STRUCTURES


def _damaged_inputs(pdb: Path) -> None:
    cif = (STRUCTURES / "102m.cif").read_bytes()
    (pdb / "102m.cif").write_bytes(cif)
    lines = (STRUCTURES / "5e5z.pdb").read_bytes().split(b"\n")
    k = next(i for i, line in enumerate(lines) if line.startswith(b"ATOM"))
    lines[k] = lines[k][:30] + b"********" + lines[k][38:]
    (pdb / "overflow.pdb").write_bytes(b"\n".join(lines))
    doc = gemmi.cif.read_string(cif.decode())
    symbols = doc[0].find_values("_atom_site.type_symbol")
    for i in range(len(symbols)):
        symbols[i] = "?"
    (pdb / "no_elements.cif").write_text(doc.as_string())
    (pdb / "bom_crlf.cif").write_bytes(b"\xef\xbb\xbf" + cif.replace(b"\n", b"\r\n"))
    doc = gemmi.cif.read_string(cif.decode())
    for column in ("label_asym_id", "label_seq_id", "label_entity_id"):
        tag = f"_atom_site.{column}"
        doc[0].find_loop(tag).get_loop().remove_column(tag)
    (pdb / "auth_only.cif").write_text(doc.as_string())
    (pdb / "long_names.cif").write_text(re.sub(r"\bSO4\b", "SULFATE1", cif.decode()))


def test_malformed_structures_fail_at_parse_or_build_right(tmp_path: Path) -> None:
    pdb, out = tmp_path / "pdb", tmp_path / "store"
    pdb.mkdir()
    _damaged_inputs(pdb)
    args = [
        "build",
        "--pdb-dir",
        str(pdb),
        "--ccd",
        str(CCD),
        "--out",
        str(out),
        *scheduler_args(1),
        "--no-progress",
    ]
    r = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "COLUMNS": "2000"}, timeout=600)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr

    store = featurecache.open_store(out)
    failures = {row["path"]: row for row in store.failures.to_pylist()}
    assert set(failures) == {"overflow.pdb", "auth_only.cif", "long_names.cif"}
    assert {row["stage"] for row in failures.values()} == {"parse"}
    assert "overflow.pdb line " in failures["overflow.pdb"]["message"]
    assert "'********'" in failures["overflow.pdb"]["message"]
    assert "_atom_site has no label_asym_id column" in failures["auth_only.cif"]["message"]
    assert "residue SULFATE1 157 in chain A" in failures["long_names.cif"]["message"]

    good = store.entry("102m")
    for entry_id in ("no_elements", "bom_crlf"):
        e = store.entry(entry_id)
        for group in ("atoms", "tokens"):
            a, b = getattr(good, group), getattr(e, group)
            assert a.keys() == b.keys()
            for field in a:
                np.testing.assert_array_equal(a[field], b[field], err_msg=f"{entry_id} {group}/{field}")
    rows = {row["id"]: row for row in store.entries.to_pylist()}
    assert rows["no_elements"]["n_warnings"] == rows["102m"]["n_warnings"] + 1  # says elements were taken
