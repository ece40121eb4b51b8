"""Degenerate reference positions are no conformer (review R25a s43 #1).

HEM's definition without its ``_chem_comp_bond`` loop was "embedded" by ETKDG with its 43 heavy
atoms on one point (strategy ``etkdg``, ``ref_mask`` True, no warning): RDKit embeds each bonded
group on its own, centred on the origin. The same stacking hits any definition made of groups with
no bond between them (a salt, a dinuclear ion). Such a molecule now takes the CCD's own
coordinates, which place its groups as the dictionary does, or fails with the reason; a perceived
residue, which has no coordinates it may take, fails.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.distance import pdist

from featurecache.chem.conformer import COINCIDENT_A, conformer_for_component, conformer_for_perceived
from featurecache.parse.ccd import CCD, _parse_component
from tests.chem import ccdtext
from tests.conftest import REPO, STRUCTURES


def _without_bonds(code: str) -> str:
    """``code``'s real definition with its ``_chem_comp_bond`` loop (header and rows) taken out."""
    lines = (ccdtext.CCD_DIR / f"{code}.cif").read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("_chem_comp_bond."))
    assert lines[start - 1].strip() == "loop_"
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("#"))
    return "".join(lines[: start - 1] + lines[end:])


def _ideal_heavy(code: str) -> np.ndarray:
    rows = [r for r in ccdtext.atoms(code) if r["type_symbol"] not in ("H", "D")]
    return np.array([[float(r[f"pdbx_model_Cartn_{c}_ideal"]) for c in "xyz"] for r in rows])


def test_definition_without_bonds_takes_the_ccd_coordinates_and_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = _without_bonds("HEM")
    comp = _parse_component(text)
    assert comp.bonds == () and comp.heavy.sum() == 43
    conf = conformer_for_component(comp, timeout_s=5)
    assert conf.strategy == "ccd_ideal", conf.reason
    assert "not embedded: its 43 heavy atoms form 43 groups with no bond between them" in conf.reason
    assert conf.mask.all()
    ideal = _ideal_heavy("HEM")
    np.testing.assert_allclose(conf.positions, ideal - ideal.mean(axis=0), atol=2e-4)
    assert pdist(conf.positions).min() > 1.0  # was 0.00: every atom on one point
    # the CCD names the file that lost its bonds, once per definition it reads
    ccd_dir = tmp_path / "ccd"
    shutil.copytree(ccdtext.CCD_DIR, ccd_dir)
    (ccd_dir / "HEM.cif").write_text(text)
    with caplog.at_level(logging.WARNING, logger="featurecache.parse.ccd"):
        CCD(ccd_dir).load(["HEM", "SO4", "ZN", "NAG"])
    warned = [r.getMessage() for r in caplog.records if r.name == "featurecache.parse.ccd"]
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"CCD {ccd_dir / 'HEM.cif'}: HEM defines 43 heavy atoms and no bond")


def test_definition_without_bonds_or_coordinates_fails_with_the_reason() -> None:
    text = _without_bonds("HEM")
    text = re.sub(r"(?m)^(HEM +\S+ +\S+ +\S+ +\S+ +\S+ +\S+ +\S+ +\S+ +)(.*?)(\s+\S+ +HEM +\d+ *)$",
                  lambda m: m.group(1) + " ".join(["?"] * 6) + m.group(3), text)  # fmt: skip
    comp = _parse_component(text)
    assert not np.isfinite(comp.ideal).any() and not np.isfinite(comp.model).any()
    conf = conformer_for_component(comp, timeout_s=5)
    assert conf.strategy == "failed" and not conf.mask.any(), conf.reason
    assert "not embedded" in conf.reason and "ccd_ideal: coordinates incomplete" in conf.reason


def test_salt_of_two_groups_keeps_the_dictionarys_placement() -> None:
    """Acetate and a sodium ion in one definition (bonds inside the acetate only): the sodium was
    embedded at the acetate's centre, 0.7 Å from its carbon."""
    block = "\n".join([
        "data_XNA", "_chem_comp.id XNA", "_chem_comp.name 'sodium acetate'", "_chem_comp.type NON-POLYMER",
        "#", "loop_", *(f"_chem_comp_atom.{c}" for c in ("comp_id", "atom_id", "type_symbol", "charge",
        "pdbx_model_Cartn_x_ideal", "pdbx_model_Cartn_y_ideal", "pdbx_model_Cartn_z_ideal")),
        "XNA C1 C 0 0.000 0.000 0.000", "XNA C2 C 0 1.520 0.000 0.000", "XNA O1 O 0 2.150 1.070 0.000",
        "XNA O2 O -1 2.150 -1.070 0.000", "XNA NA NA 1 4.300 -1.900 0.000",
        "#", "loop_", *(f"_chem_comp_bond.{c}" for c in ("comp_id", "atom_id_1", "atom_id_2", "value_order")),
        "XNA C1 C2 SING", "XNA C2 O1 DOUB", "XNA C2 O2 SING", "#", "",
    ])  # fmt: skip
    conf = conformer_for_component(_parse_component(block), timeout_s=5)
    assert conf.strategy == "ccd_ideal" and conf.mask.all(), conf.reason
    assert "form 2 groups" in conf.reason
    na, o2 = conf.atom_names.index("NA"), conf.atom_names.index("O2")
    assert np.linalg.norm(conf.positions[na] - conf.positions[o2]) == pytest.approx(
        np.hypot(2.15, 0.83), abs=1e-3
    )


def test_single_group_definitions_are_embedded_as_before() -> None:
    for code in ("HEM", "ZN", "SO4", "NAG"):
        conf = conformer_for_component(CCD(ccdtext.CCD_DIR)[code], timeout_s=5)
        assert conf.strategy == "etkdg" and "not embedded" not in conf.reason, (code, conf.reason)
        if len(conf.positions) > 1:
            assert pdist(conf.positions).min() > COINCIDENT_A


def test_perceived_residue_of_two_groups_fails() -> None:
    """Two C-O pairs 6 Å apart (no bond perceived between them): RDKit stacked them; a perceived
    residue takes no coordinates (they are the structure's), so it fails with the reason."""
    xyz = np.array([[0.0, 0, 0], [1.43, 0, 0], [6.0, 0, 0], [7.43, 0, 0]])
    conf = conformer_for_perceived("XCO", ["C1", "O1", "C2", "O2"], [6, 8, 6, 8], xyz, timeout_s=5)
    assert conf.strategy == "failed" and not conf.mask.any(), conf.reason
    assert "no CCD definition" in conf.reason and "form 2 groups" in conf.reason


def test_a_build_gives_the_warning_once(tmp_path: Path) -> None:
    """A build over a structure with HEM, on the embedded cluster (its worker processes write to the
    build's stderr): the warning once, from the driver. Before, the worker that parsed the structure
    printed it too, as a bare line among the progress lines (Python's handler of last resort)."""
    ccd_dir = tmp_path / "ccd"
    shutil.copytree(ccdtext.CCD_DIR, ccd_dir)
    (ccd_dir / "HEM.cif").write_text(_without_bonds("HEM"))
    pdb = tmp_path / "pdb"
    pdb.mkdir()
    shutil.copy(STRUCTURES / "102m.cif", pdb)  # SOURCES.tsv: myoglobin with HEM
    args = ["build", "--pdb-dir", str(pdb), "--ccd", str(ccd_dir), "--out", str(tmp_path / "store"),
            "--workers", "1", "--no-progress"]  # fmt: skip
    env = {**os.environ, "COLUMNS": "400"}  # the driver's log record on one line
    proc = subprocess.run([sys.executable, "-m", "featurecache.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stderr.count("HEM defines 43 heavy atoms and no bond")
    assert said == 1, proc.stderr
