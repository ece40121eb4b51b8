"""A ligand whose atom names differ from its CCD definition's takes the definition's chemistry.

1GBT's GBS (4-guanidinobenzoate, every atom renamed, the leaving O1 absent) and 4oz7's 22W (its O
written for the definition's O1): a build with --ccd matches their heavy atoms onto the definition
by graph, so the entry's ref_pos has the definition's geometry — a planar benzene ring, bond
lengths of the CCD's ideal coordinates — and the CCD's charges.
"""

from __future__ import annotations

import itertools

import gemmi
import numpy as np
import pytest

import featurecache
from featurecache.chem.conformer import conformer_for_renamed
from featurecache.const import decode_atom_name, decode_res_name
from featurecache.parse.ccd import parse_component_file
from featurecache.store.reader import LocalStore
from tests.chem import ccdtext
from tests.conftest import CCD, STRUCTURES, build_store

CASES = {"1GBT": ("1GBT.cif", "GBS"), "4oz7": ("4oz7.pdb", "22W")}
#: heavy atoms closer than this in the file are bonded (C-S 1.82 Å is the longest here)
BONDED_A = 1.9


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> LocalStore:
    root = tmp_path_factory.mktemp("renamed")
    inputs = root / "in"
    inputs.mkdir()
    for path, _code in CASES.values():
        (inputs / path).symlink_to(STRUCTURES / path)
    build_store(root / "s", inputs, ccd=CCD, workers=1)
    return featurecache.open_store(root / "s")


def _file_residue(path: str, code: str) -> dict[str, np.ndarray]:
    st = gemmi.read_structure(str(STRUCTURES / path))
    res = next(r for ch in st[0] for r in ch if r.name == code)
    return {a.name: np.array(a.pos.tolist()) for a in res if a.element.name != "H"}


def _ref_residue(s: LocalStore, entry_id: str, code: str) -> dict[str, tuple[np.ndarray, int]]:
    e = s.entry(entry_id)
    ref = s.reference_features(e)
    tok = np.asarray(e.atoms["token_index"])
    idx = [k for k in range(len(tok)) if decode_res_name(e.tokens["res_name"][tok[k]]) == code]
    first = ref["ref_space_uid"][idx[0]]
    idx = [k for k in idx if ref["ref_space_uid"][k] == first]
    assert ref["ref_mask"][idx].all()
    return {
        decode_atom_name(e.atoms["name"][k]): (ref["ref_pos"][k].astype(float), int(ref["ref_charge"][k]))
        for k in idx
    }


def _plane_rms(p: np.ndarray) -> float:
    p = p - p.mean(axis=0)
    return float(np.linalg.svd(p)[1][-1] / np.sqrt(len(p)))


@pytest.mark.parametrize("entry_id", sorted(CASES))
def test_renamed_ligand_gets_the_definitions_geometry_and_charges(
    store: LocalStore,
    entry_id: str,
) -> None:
    path, code = CASES[entry_id]
    fx = _file_residue(path, code)
    ref = _ref_residue(store, entry_id, code)
    assert set(ref) == set(fx)
    ccd_atoms = ccdtext.atoms(code)
    # the CCD's charges: every heavy atom of both is neutral in the definition
    assert {int(a["charge"]) for a in ccd_atoms if a["type_symbol"] != "H"} == {0}
    assert {q for _p, q in ref.values()} == {0}
    # each bond of the file (heavy atoms) has the CCD ideal length of one of its kind (same
    # elements, bonded in the definition) within 0.08 Å; 22W, whose names are the definition's
    # but for O (its O1), that of the same atoms within 0.12 Å (ETKDG's conjugated C-N of the
    # oxazolone ring is 0.09 Å longer than the CCD's ideal; a double bond taken for a single,
    # 0.2 Å)
    ideal = {
        a["atom_id"]: np.array([float(a[f"pdbx_model_Cartn_{x}_ideal"]) for x in "xyz"]) for a in ccd_atoms
    }
    element = {a["atom_id"]: a["type_symbol"] for a in ccd_atoms}
    ccd_lengths: dict[frozenset[str], list[float]] = {}
    for b in ccdtext.bonds(code):
        i, j = b["atom_id_1"], b["atom_id_2"]
        if "H" not in (element[i], element[j]):
            ccd_lengths.setdefault(frozenset((element[i], element[j])), []).append(
                float(np.linalg.norm(ideal[i] - ideal[j]))
            )
    bonded = [
        (a, b) for a, b in itertools.combinations(sorted(fx), 2) if np.linalg.norm(fx[a] - fx[b]) < BONDED_A
    ]
    assert len(bonded) >= len(fx) - 1
    for a, b in bonded:
        d = float(np.linalg.norm(ref[a][0] - ref[b][0]))
        kind = frozenset(gemmi.Element(n.rstrip("0123456789")[:1]).name.upper() for n in (a, b))
        kinds = ccd_lengths.get(kind) or [x for v in ccd_lengths.values() for x in v]
        assert min(abs(d - x) for x in kinds) < 0.08, (a, b, d)
        if code == "22W":
            same = [n if n != "O" else "O1" for n in (a, b)]
            assert abs(d - float(np.linalg.norm(ideal[same[0]] - ideal[same[1]]))) < 0.12, (a, b, d)
    # GBS: its six aromatic carbons (the definition's flags) are planar, as the file's ring is
    if code == "GBS":
        ring = ["C1", "C21", "C22", "C31", "C32", "C4"]
        assert sum(a["pdbx_aromatic_flag"] == "Y" for a in ccd_atoms) == len(ring)
        assert _plane_rms(np.array([fx[n] for n in ring])) < 0.05
        assert _plane_rms(np.array([ref[n][0] for n in ring])) < 0.03


def test_a_residue_the_definition_does_not_contain_is_perceived() -> None:
    """GBS's atoms with its guanidine's NE written as a sulphur: no graph of the definition has it."""
    fx = _file_residue("1GBT.cif", "GBS")
    names = sorted(fx)
    z = [16 if n == "NE" else gemmi.Element(n[0]).atomic_number for n in names]
    conf = conformer_for_renamed(
        parse_component_file(CCD / "GBS.cif"), names, z, np.array([fx[n] for n in names]), timeout_s=5
    )
    assert conf.strategy == "perceived" and "no graph match" in conf.reason, conf.reason
    assert conf.key.startswith("GBS#") and list(conf.atom_names) == names


def test_a_renamed_component_follows_the_definition_of_the_build(
    store: LocalStore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Review R22 s41 #2: the component of a renamed residue is keyed by its atoms (``GBS#…``), not by
    the definition it was matched against, and a stored key was never computed again: a store built
    without --ccd, then with it, kept the perception from heavy-atom geometry (and the reverse kept
    the CCD's chemistry in entries built without CCD)."""
    root = tmp_path_factory.mktemp("renamed_switch")
    inputs = root / "in"
    inputs.mkdir()
    (inputs / "1GBT.cif").symlink_to(STRUCTURES / "1GBT.cif")

    def gbs_row(s: LocalStore) -> dict:
        return next(r for r in s.components.to_pylist() if r["key"].startswith("GBS#"))

    build_store(root / "s", inputs, workers=1)  # no --ccd: perceived
    assert gbs_row(featurecache.open_store(root / "s"))["strategy"] == "perceived"
    build_store(root / "s", inputs, ccd=CCD, workers=1)  # the same store, now with the CCD
    switched = featurecache.open_store(root / "s")
    assert gbs_row(switched)["source_sha256"] == gbs_row(store)["source_sha256"] != ""
    got = switched.reference_features(switched.entry("1GBT"))
    want = store.reference_features(store.entry("1GBT"))  # built with --ccd from the start
    for name in ("ref_pos", "ref_charge", "ref_mask"):
        assert np.array_equal(got[name], want[name]), name
    build_store(root / "s", inputs, workers=1)  # and without it again
    assert gbs_row(featurecache.open_store(root / "s"))["strategy"] == "perceived"
