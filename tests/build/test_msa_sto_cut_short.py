"""Stockholm files a build cannot trust: cut at a row's end, or a header alone (review R25a s43 #5, #6).

Real builds (1 worker) of the sample 1psm with its real OpenFold MSA files.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

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


def test_a_stockholm_header_alone_fails_as_an_empty_file_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: counted under "empty / other files", never named, no failure row, exit status 0 (a
    0-byte file at that path was a failure row already)."""
    pdb, msa = _pdb(tmp_path), tmp_path / "msa"
    shutil.copytree(OPENFOLD / "1psm_A", msa / "1psm_A")
    (msa / STO).write_text("# STOCKHOLM 1.0\n")
    (msa / "1psm_A" / "mgnify_hits.sto").write_text("# STOCKHOLM 1.0\n#=GF ID x\n//\n")
    (msa / "elsewhere").mkdir()
    (msa / "elsewhere" / "header.sto").write_text("# STOCKHOLM 1.0\n")  # names no entry: logged only
    with caplog.at_level(logging.WARNING, logger="featurecache.build.msa_stage"):
        summary = build_store(tmp_path / "s", pdb, workers=1, msa_dir=msa)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for rel in (STO, "1psm_A/mgnify_hits.sto", "elsewhere/header.sto"):
        assert any(rel in w for w in warned), (rel, warned)
    assert summary.n_failed == 2 and summary.failed_by_stage == {"msa": 2}
    assert summary.stages["msa"]["empty / other files"] == "3 / 0"
    store = featurecache.open_store(tmp_path / "s")
    fails = {f["path"]: f for f in store.failures.to_pylist()}
    assert set(fails) == {STO, "1psm_A/mgnify_hits.sto"}
    for rel, size in ((STO, 16), ("1psm_A/mgnify_hits.sto", 29)):
        assert (fails[rel]["entry_id"], fails[rel]["stage"]) == ("1psm", "msa")
        assert fails[rel]["message"] == (
            f"Stockholm header but no alignment ({size} bytes, no sequence row): a truncated download or a search "
            "that wrote nothing?; the file is left out: chain 1psm/A gets an MSA from 2 other files "
            "(1psm_A/bfd_uniclust_hits.a3m, 1psm_A/uniprot_hits.sto)"
        )
    assert _chain(store)["msa_files"] == 2
