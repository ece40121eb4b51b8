"""Tripwire: a component's chemistry does not change unless ``CONFORMER_VERSION`` does (review R23 s42 #1).

A stored component records the ``CONFORMER_VERSION`` that computed it, and a build recomputes only
those recorded under a smaller one (docs/build.md "Reference conformers"): that number is the whole of
what tells an existing store that its conformers are out of date. Two changes to perceived bond
orders (db44125: rings from the smallest set of smallest rings; 1f17336: a backbone carbonyl) went
in after version 2 without a bump, and a store built between them kept single C-O bonds that a
fresh build stores double, both at version 2 (the reviewer rebuilt one: 0 components recomputed).

The independent reason for the recorded values is that version contract, not the chemistry being
right (``test_perceived``, ``test_renamed_residues``, ``test_conformer`` check that against the CCD).
``tests/data/conformer_digests.json`` holds, for the version it names, a sha256 of the chemistry
each kind of component gets, computed with the code's own functions from fixed real inputs:

* every definition of ``../shared/data/ccd`` and of the packaged standard set
  (:func:`~featurecache.chem.conformer.mol_from_component`);
* the perception (:func:`~featurecache.chem.perceive.perceive_mol`, a build without ``--ccd``) of
  every residue of ``PERCEIVED_FILES`` that is not a standard one, its first occurrence;
* the graph match of renamed residues onto their definition (:func:`~featurecache.chem.match.match_to_definition`).

What is hashed is what a component stores of a molecule: its heavy atoms' names, elements and
formal charges, their bonds with orders (aromatic = 4), and the chiral tags the embedding follows.
Positions are left out: they come from RDKit's embedding and change with its release (a store
records RDKit's version beside each component).

When this test fails with "chemistry changed": bump ``CONFORMER_VERSION`` (chem/conformer.py, with
a line saying what changed) and regenerate the file with::

    .venv/bin/python -m tests.chem.test_conformer_tripwire
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import gemmi
import numpy as np
import pytest
from rdkit import Chem, rdBase

from featurecache.chem.conformer import CONFORMER_VERSION, _heavy_bonds, mol_from_component
from featurecache.chem.library import ComponentLibrary
from featurecache.chem.match import match_to_definition
from featurecache.chem.perceive import perceive_mol
from featurecache.chem.standard import standard_component, standard_components
from tests.conftest import SHARED

DIGESTS = Path(__file__).resolve().parents[1] / "data" / "conformer_digests.json"
REGENERATE = ".venv/bin/python -m tests.chem.test_conformer_tripwire"
CCD_DIR = SHARED / "data" / "ccd"
STRUCTURES = SHARED / "data" / "real" / "structures"
#: real files whose non-standard residues a build without --ccd perceives: D-amino acids and
#: N-methylated residues of cyclic peptides (1pfe, 209d), selenomethionine (1A8O), ligands with
#: aromatic rings, a saturated one and a purine (4CUP, 5zyh, 2q2k, 7pzb), a heme (102m)
PERCEIVED_FILES = ("1pfe.cif.gz", "209d-assembly1.cif", "1A8O.cif", "4CUP.cif", "5zyh.cif", "2q2k.cif",
                   "7pzb.pdb", "102m.cif")  # fmt: skip
#: (file, code): residues whose atom names are not their definition's (matched by graph)
RENAMED = (("1GBT.cif", "GBS"), ("4oz7.pdb", "22W"))
WATER = {"HOH", "DOD", "WAT"}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _mol_digest(mol: Chem.Mol, names: list[str]) -> str:
    heavy = np.array([a.GetAtomicNum() != 1 for a in mol.GetAtoms()])
    atoms = [
        (names[a.GetIdx()], a.GetAtomicNum(), a.GetFormalCharge(), int(a.GetChiralTag()))
        for a in mol.GetAtoms()
        if heavy[a.GetIdx()]
    ]
    bonds = _heavy_bonds(mol, heavy).tolist()
    return _sha(json.dumps({"atoms": atoms, "bonds": bonds}))


def _first_occurrences(path: Path) -> dict[str, tuple[list[str], list[int], np.ndarray, list[int]]]:
    """Residue name → heavy atoms (first altloc) of its first occurrence in the first model."""
    st = gemmi.read_structure(str(path))
    st.setup_entities()
    out: dict[str, tuple[list[str], list[int], np.ndarray, list[int]]] = {}
    for chain in st[0]:
        for res in chain:
            if res.name in out or res.name in WATER:
                continue
            atoms, seen = [], set()
            for a in res:
                if a.element.atomic_number > 1 and a.name not in seen:
                    seen.add(a.name)
                    atoms.append(a)
            if atoms:
                out[res.name] = (
                    [a.name for a in atoms],
                    [a.element.atomic_number for a in atoms],
                    np.array([a.pos.tolist() for a in atoms]),
                    [int(a.charge) for a in atoms],
                )
    return out


def chemistry_digests() -> dict[str, str]:
    """Label → digest of the chemistry the conformer code gives each fixed input (module doc)."""
    out: dict[str, str] = {}
    library = ComponentLibrary(CCD_DIR)
    codes = sorted(p.stem for p in CCD_DIR.glob("*.cif"))
    for code, comp in sorted(library.load(codes).items()):
        mol, _ = mol_from_component(comp)
        out[f"ccd {code}"] = _mol_digest(mol, list(comp.atom_names))
    for code, comp in sorted(standard_components().items()):
        mol, _ = mol_from_component(comp)
        out[f"packaged {code}"] = _mol_digest(mol, list(comp.atom_names))
    for name in PERCEIVED_FILES:
        for code, (names, z, xyz, q) in sorted(_first_occurrences(STRUCTURES / name).items()):
            if standard_component(code) is not None:
                continue
            mol, _ = perceive_mol(names, z, xyz, q)
            out[f"perceived {name} {code}"] = _mol_digest(mol, names)
    for name, code in RENAMED:
        names, z, xyz, _ = _first_occurrences(STRUCTURES / name)[code]
        definition = library.get(code)
        assert definition is not None, code
        match, _ = match_to_definition(definition, z, xyz, names)
        out[f"renamed {name} {code}"] = _sha(json.dumps(match))
    return out


def record() -> dict[str, Any]:
    return {
        "conformer_version": CONFORMER_VERSION,
        "rdkit_version": rdBase.rdkitVersion,
        "gemmi_version": gemmi.__version__,  # type: ignore[attr-defined]
        "digests": chemistry_digests(),
    }


@pytest.mark.skipif(not (CCD_DIR.is_dir() and STRUCTURES.is_dir()), reason="../shared/data not here")
def test_components_change_only_with_the_conformer_version() -> None:
    recorded = json.loads(DIGESTS.read_text())
    if recorded["conformer_version"] != CONFORMER_VERSION:
        pytest.fail(
            f"CONFORMER_VERSION is {CONFORMER_VERSION}, the digests were recorded at "
            f"{recorded['conformer_version']}: regenerate them with {REGENERATE}"
        )
    got = chemistry_digests()
    assert len(got) >= 100  # the CCD directory, the standard set, perceived and renamed residues
    assert sum(k.startswith("perceived ") for k in got) >= 15
    new_or_gone = sorted(set(got) ^ set(recorded["digests"]))
    assert not new_or_gone, f"inputs differ from those recorded ({new_or_gone[:5]}): {REGENERATE}"
    changed = sorted(k for k in got if got[k] != recorded["digests"][k])
    if changed and recorded["rdkit_version"] != rdBase.rdkitVersion:
        pytest.skip(
            f"chemistry of {changed[:5]} differs under RDKit {rdBase.rdkitVersion} (recorded with "
            f"{recorded['rdkit_version']}): a new RDKit, not this code, may be the cause; {REGENERATE}"
        )
    assert not changed, (
        f"chemistry changed for {len(changed)} component(s) ({', '.join(changed[:8])}) while "
        f"CONFORMER_VERSION stayed {CONFORMER_VERSION}: stores built before keep the old components. "
        f"Bump CONFORMER_VERSION (chem/conformer.py), then regenerate with {REGENERATE}"
    )


def main() -> None:
    recorded = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else None
    new = record()
    if recorded and recorded["conformer_version"] == CONFORMER_VERSION:
        changed = sorted(
            k
            for k in new["digests"]
            if k in recorded["digests"] and new["digests"][k] != recorded["digests"][k]
        )
        if changed and recorded["rdkit_version"] == rdBase.rdkitVersion:
            sys.exit(
                f"refused: chemistry changed for {changed[:8]} under the recorded CONFORMER_VERSION "
                f"{CONFORMER_VERSION}; bump it first"
            )
    DIGESTS.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DIGESTS} ({len(new['digests'])} digests, CONFORMER_VERSION {CONFORMER_VERSION})")


if __name__ == "__main__":
    main()
