"""A build without ``--ccd`` says, once, what it loses (RF1 3).

Without a component definition a ligand or modified residue is tokenized from the file's atoms
(no unresolved atoms, no leaving-atom rules). A build without ``--ccd``, and a re-run of a
``--ccd`` store without it (every entry rebuilt, silently downgraded before), logs one warning
line counting those residues and entries. Real builds of real 7DDO.pdb and 1GBT.cif; the
expected counts come from gemmi's reading of the files (non-water residues gemmi does not
tabulate as standard), the CCD coverage from the CCD directory's files.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import gemmi
import pytest

from tests.conftest import CCD, STRUCTURES, build_store, removed_aids

INPUTS = ("7DDO.pdb", "1GBT.cif")


def _nonstandard(path: Path) -> list[str]:
    """Names of the first model's non-water residues that gemmi does not tabulate as standard (an
    X-ray structure's crystallization aids, AF3 SI Table 9, left out: a build removes them)."""
    st = gemmi.read_structure(str(path))
    aids = removed_aids(st)
    out = []
    for ch in st[0]:
        for r in ch:
            info = gemmi.find_tabulated_residue(r.name)
            if (
                r.name not in ("HOH", "DOD")
                and r.name not in aids
                and (info is None or not info.is_standard())
            ):
                out.append(r.name)
    return out


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "keep only the file's atoms" in r.getMessage()
    ]


def test_build_without_ccd_warns_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pdb_dir = tmp_path / "in"
    pdb_dir.mkdir()
    for name in INPUTS:
        shutil.copy(STRUCTURES / name, pdb_dir / name)
    per_file = {name: _nonstandard(pdb_dir / name) for name in INPUTS}
    n_res = sum(len(v) for v in per_file.values())
    n_entries = sum(1 for v in per_file.values() if v)
    assert (
        n_res == 7 and n_entries == 2
    )  # 7DDO: ZN, 4 NAG; 1GBT: CA, GBS (its 2 SO4 are crystallization aids)
    codes = {c for v in per_file.values() for c in v}
    assert all((CCD / f"{c}.cif").is_file() for c in codes)  # the CCD defines every one

    store = tmp_path / "store"
    with caplog.at_level(logging.WARNING, logger="featurecache.build.run"):
        summary = build_store(store, pdb_dir, workers=1, ccd=CCD)
    assert summary.n_built == len(INPUTS) and summary.n_failed == 0
    assert _lines(caplog) == []  # every code defined: nothing lost

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="featurecache.build.run"):
        summary = build_store(store, pdb_dir, workers=1)  # the same store, without --ccd
    assert summary.n_rebuilt == len(INPUTS)
    assert _lines(caplog) == [
        f"no ccd (--ccd): {n_res} ligand / modified residues ({n_entries} entries) keep only the file's atoms: "
        "unresolved atoms and AF3's leaving-atom rules not applied; pass ccd (--ccd)"
    ]
