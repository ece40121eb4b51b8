"""Stockholm files a build cannot trust: cut at a row's end, or a header alone (review R25a s43 #5, #6).

Real builds (1 worker) of the sample 1psm with its real OpenFold MSA files.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import featurecache
from featurecache.const import MolType
from tests.conftest import SAMPLES, build_store

OPENFOLD = SAMPLES / "msas" / "openfold"
STO = "1psm_A/uniref90_hits.sto"


def _pdb(tmp_path: Path) -> Path:
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(SAMPLES / "structures" / "1psm.cif", pdb)
    return pdb


def _chain(store: Any) -> dict[str, Any]:
    (row,) = [
        r for r in store.chains.to_pylist() if r["entry_id"] == "1psm" and r["mol_type"] != MolType.LIGAND
    ]
    return row


def test_a_stockholm_file_cut_at_a_rows_end_fails_and_the_stored_msa_is_kept(tmp_path: Path) -> None:
    """Before: the cut file (its query and 2 hits, no '//') was read as whole: no failure, exit
    status 0, and the rebuild replaced the chain's MSA (20 rows) by one of 3 rows."""
    pdb, msa = _pdb(tmp_path), tmp_path / "msa"
    (msa / "1psm_A").mkdir(parents=True)
    shutil.copy(OPENFOLD / STO, msa / STO)
    first = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert first.n_failed == 0
    depth = _chain(featurecache.open_store(tmp_path / "s"))["msa_depth"]
    assert depth > 3

    lines = (OPENFOLD / STO).read_text().splitlines(keepends=True)
    rows = [k for k, line in enumerate(lines) if line.strip() and not line.startswith(("#", "//"))]
    (msa / STO).write_text("".join(lines[: rows[2] + 1]))  # the query and 2 hits, cut at a line's end
    again = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    assert again.n_failed == 1 and again.failed_by_stage == {"msa": 1}  # exit status 1
    store = featurecache.open_store(tmp_path / "s")
    (fail,) = store.failures.to_pylist()
    assert (fail["path"], fail["entry_id"], fail["stage"], fail["error_class"]) == (
        STO,
        "1psm",
        "msa",
        "MSAError",
    )
    assert fail["message"] == (
        f"uniref90_hits.sto: no '//' closes the alignment: the file ends at line {rows[2] + 1} after 3 sequence "
        "rows; a file cut short?; the file is left out: chain 1psm/A gets the MSA an earlier build stored from "
        "files (kept)"
    )
    assert _chain(store)["msa_depth"] == depth
