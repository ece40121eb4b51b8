"""An X-ray structure's crystallization aids are removed, as AF3 removes them (supplement §2.5.4).

AF3's bioassembly filtering: "Crystallization aids are removed if the mmCIF method information
indicates that X-ray crystallography was used", the aids being the CCD codes of its Table 9 (written
out from the supplement in tests.conftest, not taken from featurecache). Before (review R11 s39 #1) they stayed
ligand chains: sampler units weighted as ligands, interface units, crop centres (~12 % of the
af3-weighted samples of the sample and real stores involved one).

Inputs are real X-ray files of the dev corpus (SOURCES.tsv); the expected residues come from gemmi's
reading of each file. 102m with its ``_exptl.method`` edited to NMR keeps its sulfate (the rule is
for X-ray structures only), and ``build --keep-cryst-aids`` keeps them all, through a real
build.
"""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

import gemmi
import pytest

from featurecache.build.components import component_resolvers
from featurecache.const import WATER_NAMES, MolType, decode_res_name
from featurecache.featurize.entry import featurize_bytes
from featurecache.store.reader import open_store
from featurecache.types import Structure
from tests.clusters import scheduler_args
from tests.conftest import AF3_CRYSTALLIZATION_AIDS, CCD, STRUCTURES

#: AF3 supplement Table 9, "Crystallization aids" (tests.conftest, written out from the supplement)
TABLE_9 = AF3_CRYSTALLIZATION_AIDS

#: real X-ray files with aids, and gemmi's count of them (checked below, not trusted)
XRAY = ("102m.cif", "1GBT.cif", "2q2k.cif", "4zey.cif", "5i55.cif", "5kc1.cif")


def _residue_names(st: gemmi.Structure) -> collections.Counter[str]:
    """Residues of the first model by name (waters left out), from gemmi."""
    return collections.Counter(r.name for ch in st[0] for r in ch if r.name not in WATER_NAMES)


def _featurize(data: bytes, name: str, keep: bool = False) -> Structure:
    atoms_fn, bonds_fn = component_resolvers(str(CCD))
    return featurize_bytes(data, name, name, component_atoms=atoms_fn, component_bonds=bonds_fn,
                           keep_crystallization_aids=keep)  # fmt: skip


def _ligand_residues(s: Structure) -> collections.Counter[str]:
    """Ligand residues of an entry by name: one per (chain, residue) of its ligand tokens."""
    lig = s.tokens["mol_type"] == int(MolType.LIGAND)
    seen = {(int(a), int(r), decode_res_name(n)) for a, r, n in
            zip(s.tokens["asym_id"][lig], s.tokens["residue_index"][lig], s.tokens["res_name"][lig], strict=True)}  # fmt: skip
    return collections.Counter(n for _, _, n in seen)


@pytest.mark.parametrize("name", XRAY)
def test_an_xray_structure_loses_its_aids_and_nothing_else(name: str) -> None:
    path = STRUCTURES / name
    st = gemmi.read_structure(str(path))
    assert any("X-RAY" in e.method for e in st.meta.experiments)
    in_file = _residue_names(st)
    aids = {n: c for n, c in in_file.items() if n in TABLE_9}
    assert aids, f"{name} holds no crystallization aid"
    removed = _ligand_residues(_featurize(path.read_bytes(), name))
    kept = _ligand_residues(_featurize(path.read_bytes(), name, keep=True))
    assert not set(removed) & TABLE_9
    # every aid residue of the file is a ligand residue when kept ...
    assert {n: kept[n] for n in aids} == aids
    # ... and the other ligands are the same either way
    assert removed == collections.Counter({n: c for n, c in kept.items() if n not in TABLE_9})


def test_an_nmr_structure_keeps_its_sulfate() -> None:
    doc = gemmi.cif.read(str(STRUCTURES / "102m.cif"))
    block = doc.sole_block()
    (method,) = block.find_values("_exptl.method")
    assert gemmi.cif.as_string(method) == "X-RAY DIFFRACTION"
    block.set_pair("_exptl.method", gemmi.cif.quote("SOLUTION NMR"))
    nmr = _featurize(doc.as_string().encode(), "102m.cif")
    xray = _featurize((STRUCTURES / "102m.cif").read_bytes(), "102m.cif")
    assert nmr.meta.method == "SOLUTION NMR"
    assert _ligand_residues(nmr)["SO4"] == 1
    assert _ligand_residues(xray)["SO4"] == 0


def test_build_keeps_them_when_asked(tmp_path: Path) -> None:
    pdb = tmp_path / "in"
    pdb.mkdir()
    (pdb / "102m.cif").write_bytes((STRUCTURES / "102m.cif").read_bytes())
    names = {}
    for keep in (False, True):  # on the session's 1-worker cluster (tests/clusters.py)
        out = tmp_path / f"store_{keep}"
        args = [sys.executable, "-m", "featurecache.cli", "build", "--pdb-dir", str(pdb), "--ccd", str(CCD),
                "--out", str(out), *scheduler_args(1), "--no-progress"]  # fmt: skip
        if keep:
            args.append("--keep-cryst-aids")
        done = subprocess.run(args, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        chains = open_store(out).chains.to_pylist()
        names[keep] = sorted(c["sequence"] for c in chains if c["mol_type"] == int(MolType.LIGAND))
    assert names == {False: ["HEM"], True: ["HEM", "SO4"]}
