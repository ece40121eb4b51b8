"""Reference conformers: names/elements, geometry, stereo, determinism, fallbacks, perception."""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys

import gemmi
import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import rdCIPLabeler

from featurecache.chem.conformer import (
    component_seed,
    conformer_for_component,
    conformer_for_perceived,
    perceived_key,
)
from featurecache.parse.ccd import CCD, _parse_component
from tests.chem import ccdtext

LIGANDS = ("GNP", "MG", "HEM", "CLR", "PLM", "NAG", "ZN", "FX0", "9N0", "EPE")
METALS = {"FE", "MG", "ZN", "CA", "NA", "K", "NI", "CU", "CD"}


@pytest.fixture(scope="module")
def ccd() -> CCD:
    return CCD(ccdtext.CCD_DIR)


@pytest.mark.parametrize("code", (*LIGANDS, "ALA", "TRP", "DG", "U"))
def test_names_and_elements_are_the_ccds(ccd: CCD, code: str) -> None:
    conf = conformer_for_component(ccd[code])
    expected = ccdtext.heavy_atoms(code)
    assert list(conf.atom_names) == [n for n, _ in expected]
    assert [gemmi.Element(int(z)).name.upper() for z in conf.elements] == [e for _, e in expected]
    assert conf.strategy == "etkdg", conf.reason
    assert conf.mask.all() and np.isfinite(conf.positions).all()
    assert conf.positions.dtype == np.float32 and conf.positions.shape == (len(expected), 3)


@pytest.mark.parametrize("code", LIGANDS)
def test_bond_lengths_are_chemically_sane(ccd: CCD, code: str) -> None:
    conf = conformer_for_component(ccd[code])
    pos = {n: p for n, p in zip(conf.atom_names, conf.positions.astype(np.float64), strict=True)}
    ideal = {
        r["atom_id"]: np.array([float(r[f"pdbx_model_Cartn_{c}_ideal"]) for c in "xyz"])
        for r in ccdtext.atoms(code)
    }
    element = {r["atom_id"]: r["type_symbol"] for r in ccdtext.atoms(code)}
    checked = 0
    for b in ccdtext.bonds(code):
        a1, a2 = b["atom_id_1"], b["atom_id_2"]
        if a1 not in pos or a2 not in pos:
            continue  # bonds to hydrogens
        d = float(np.linalg.norm(pos[a1] - pos[a2]))
        if element[a1] == element[a2] == "C":
            assert 1.2 <= d <= 1.7, (code, a1, a2, d)
        if not ({element[a1], element[a2]} & METALS):
            d_ideal = float(np.linalg.norm(ideal[a1] - ideal[a2]))
            assert abs(d - d_ideal) < 0.2, (code, a1, a2, d, d_ideal)
        checked += 1
    # non-bonded heavy atoms are not on top of each other
    xyz = conf.positions.astype(np.float64)
    dmat = np.linalg.norm(xyz[:, None] - xyz[None], axis=-1) + np.eye(len(xyz)) * 10
    assert dmat.min() > 0.9 or len(xyz) == 1
    assert checked == sum(1 for b in ccdtext.bonds(code) if b["atom_id_1"] in pos and b["atom_id_2"] in pos)


@pytest.mark.parametrize("code", ("NAG", "CLR", "GNP", "ALA", "THR"))
def test_stereo_matches_ccd_labels(ccd: CCD, code: str) -> None:
    comp = ccd[code]
    conf = conformer_for_component(comp)
    # Rebuild the heavy-atom graph from the CCD text, give it the conformer's coordinates, and let
    # RDKit assign CIP labels from 3D; compare to the CCD's pdbx_stereo_config.
    rows = ccdtext.atoms(code)
    idx = {r["atom_id"]: k for k, r in enumerate(rows)}
    rw = Chem.RWMol()
    for r in rows:
        a = Chem.Atom(r["type_symbol"].capitalize())
        a.SetFormalCharge(int(r["charge"]))
        a.SetNoImplicit(True)
        rw.AddAtom(a)
    orders = {"SING": Chem.BondType.SINGLE, "DOUB": Chem.BondType.DOUBLE, "TRIP": Chem.BondType.TRIPLE}
    for b in ccdtext.bonds(code):
        rw.AddBond(idx[b["atom_id_1"]], idx[b["atom_id_2"]], orders[b["value_order"]])
    Chem.SanitizeMol(rw)
    # hydrogens: place them at their ideal offsets from their heavy neighbour (labels need them present)
    pos = {n: p for n, p in zip(conf.atom_names, conf.positions.astype(np.float64), strict=True)}
    ideal = {r["atom_id"]: np.array([float(r[f"pdbx_model_Cartn_{c}_ideal"]) for c in "xyz"]) for r in rows}
    c = Chem.Conformer(len(rows))
    for r in rows:
        name = r["atom_id"]
        if name in pos:
            p = pos[name]
        else:
            heavy = next(
                (b["atom_id_2"] if b["atom_id_1"] == name else b["atom_id_1"])
                for b in ccdtext.bonds(code)
                if name in (b["atom_id_1"], b["atom_id_2"])
            )
            p = pos[heavy] + 0.3 * (ideal[name] - ideal[heavy])  # direction only matters roughly
        c.SetAtomPosition(idx[name], p.tolist())
    rw.AddConformer(c)
    Chem.AssignStereochemistryFrom3D(rw)
    rdCIPLabeler.AssignCIPLabels(rw)
    n_stereo = 0
    for r in rows:
        if r["pdbx_stereo_config"] in ("R", "S"):
            a = rw.GetAtomWithIdx(idx[r["atom_id"]])
            assert a.GetProp("_CIPCode") == r["pdbx_stereo_config"], (code, r["atom_id"])
            n_stereo += 1
    assert n_stereo > 0


def test_seed_depends_on_code_only() -> None:
    expected = int.from_bytes(hashlib.sha256(b"HEM").digest()[:4], "big") % 2**31
    assert component_seed("HEM") == expected
    assert component_seed("HEM") != component_seed("GNP")


def test_same_positions_in_another_process(ccd: CCD) -> None:
    here = {c: conformer_for_component(ccd[c]).positions.tobytes().hex() for c in ("HEM", "CLR", "NAG")}
    script = (
        "import sys, json; from featurecache.parse.ccd import CCD; "
        "from featurecache.chem.conformer import conformer_for_component; "
        f"ccd = CCD({str(ccdtext.CCD_DIR)!r}); "
        "print(json.dumps({c: conformer_for_component(ccd[c]).positions.tobytes().hex() for c in ('HEM','CLR','NAG')}))"
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    import json

    assert json.loads(out) == here


# --- fallbacks ------------------------------------------------------------------------------------


def _cif_block(
    code: str,
    elements: list[str],
    ideal: np.ndarray | None,
    model: np.ndarray | None,
    bonds: list[tuple[int, int, str]],
) -> str:
    def fmt(x: np.ndarray | None, k: int) -> list[str]:
        return ["?"] * 3 if x is None else [f"{v:.4f}" for v in x[k]]

    lines = [
        f"data_{code}",
        f"_chem_comp.id {code}",
        f"_chem_comp.name test-{code}",
        "_chem_comp.type NON-POLYMER",
        "#",
        "loop_",
    ]
    cols = ["comp_id", "atom_id", "type_symbol", "charge", "pdbx_leaving_atom_flag", "model_Cartn_x", "model_Cartn_y",
            "model_Cartn_z", "pdbx_model_Cartn_x_ideal", "pdbx_model_Cartn_y_ideal", "pdbx_model_Cartn_z_ideal"]  # fmt: skip
    lines += [f"_chem_comp_atom.{c}" for c in cols]
    names = [f"{e}{k + 1}" for k, e in enumerate(elements)]
    for k, e in enumerate(elements):
        lines.append(" ".join([code, names[k], e, "0", "N", *fmt(model, k), *fmt(ideal, k)]))
    lines += ["#", "loop_"] + [
        f"_chem_comp_bond.{c}" for c in ("comp_id", "atom_id_1", "atom_id_2", "value_order")
    ]
    lines += [f"{code} {names[i]} {names[j]} {o}" for i, j, o in bonds]
    return "\n".join(lines) + "\n#\n"


def _c60() -> tuple[np.ndarray, list[tuple[int, int, str]]]:
    """Buckminsterfullerene: truncated-icosahedron vertices (edge 1.4 Å), 6:6 bonds double."""
    phi = (1 + 5**0.5) / 2
    pts = set()
    for base in ((0, 1, 3 * phi), (1, 2 + phi, 2 * phi), (phi, 2, phi**3)):
        for signs in itertools.product((1, -1), repeat=3):
            v = [s * x for s, x in zip(signs, base, strict=True)]
            for k in range(3):
                pts.add(tuple(round(v[(i + k) % 3], 6) for i in range(3)))
    xyz = np.array(sorted(pts)) * 0.7
    d = np.linalg.norm(xyz[:, None] - xyz[None], axis=-1)
    edges = [(i, j) for i in range(60) for j in range(i + 1, 60) if abs(d[i, j] - 1.4) < 0.05]
    adj = {i: {j for e in edges for j in e if i in e and j != i} for i in range(60)}

    # an edge i-j lies on a pentagon i-j-m-l-k-i
    def on_pentagon(i: int, j: int) -> bool:
        return any((adj[m] & adj[k]) - {i, j} for m in adj[j] - {i} for k in adj[i] - {j} if k != m)

    bonds = [(i, j, "SING" if on_pentagon(i, j) else "DOUB") for i, j in edges]
    return xyz, bonds


def test_timeout_falls_back_to_ccd_ideal() -> None:
    xyz, bonds = _c60()
    assert len(bonds) == 90 and sum(o == "DOUB" for *_, o in bonds) == 30
    comp = _parse_component(_cif_block("X60", ["C"] * 60, xyz, None, bonds))
    conf = conformer_for_component(comp, timeout_s=1)
    assert conf.strategy == "ccd_ideal", conf.reason
    assert "etkdg: timed out" in conf.reason and "random_coords: timed out" in conf.reason
    np.testing.assert_allclose(conf.positions, xyz - xyz.mean(axis=0), atol=2e-4)  # CIF keeps 4 decimals
    assert conf.mask.all()


def test_impossible_stereo_falls_back_to_model_when_ideal_missing() -> None:
    # trans-fused bicyclo[2.1.0]pentane: the (distorted) coordinates encode a ring fusion that no
    # embedding can satisfy, so ETKDG and random coordinates both fail.
    elems = ["C"] * 5 + ["H"] * 8
    xyz = np.array([
        [-0.3661, 0.5708, 0.6922], [0.6602, -0.4011, -0.0175], [1.3473, 0.9089, -0.1175],
        [1.0486, 2.0705, -1.0687], [-0.1537, 1.2414, -0.6111], [0.0242, 0.9933, 1.6096],
        [-1.3201, 0.0477, 0.7094], [1.1571, -1.0350, 0.7221], [0.2406, -0.8772, -0.8989],
        [1.5179, 1.3569, 0.9280], [1.3808, 1.9658, -2.1318], [1.0875, 3.1033, -0.6603],
        [-0.4412, 0.5460, -1.4807],
    ])  # fmt: skip
    bonds = [
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 4),
        (4, 0),
        (4, 2),
        (0, 5),
        (0, 6),
        (1, 7),
        (1, 8),
        (2, 9),
        (3, 10),
        (3, 11),
        (4, 12),
    ]
    comp = _parse_component(_cif_block("XTB", elems, None, xyz, [(i, j, "SING") for i, j in bonds]))
    conf = conformer_for_component(comp, timeout_s=2)
    assert conf.strategy == "ccd_model", conf.reason
    assert "etkdg" in conf.reason and "ccd_ideal: coordinates incomplete" in conf.reason
    np.testing.assert_allclose(conf.positions, xyz[:5] - xyz[:5].mean(axis=0), atol=1e-5)


# --- perceived (no definition) ---------------------------------------------------------------------


def _hem_from_102m() -> tuple[list[str], list[int], np.ndarray]:
    st = gemmi.read_structure(str(ccdtext.REAL_DIR / "structures" / "102m.cif"))
    res = next(r for ch in st[0] for r in ch if r.name == "HEM")
    atoms = [a for a in res if a.element.name != "H" and a.altloc in ("\0", "A")]
    return (
        [a.name for a in atoms],
        [a.element.atomic_number for a in atoms],
        np.array([a.pos.tolist() for a in atoms]),
    )


def test_perceived_conformer_never_copies_coordinates() -> None:
    names, z, xyz = _hem_from_102m()
    conf = conformer_for_perceived("HEM", names, z, xyz, timeout_s=5)
    assert conf.strategy == "perceived", conf.reason
    assert conf.key == perceived_key("HEM", list(zip(names, z, strict=True))) and conf.key.startswith("HEM#")
    assert list(conf.atom_names) == names and conf.mask.all()
    # the porphyrin's perceived graph has at least every heavy-heavy CCD bond's count of edges
    heavy_ccd_bonds = sum(
        1
        for b in ccdtext.bonds("HEM")
        if not b["atom_id_1"].startswith("H") and not b["atom_id_2"].startswith("H")
    )
    assert len(conf.bonds) >= heavy_ccd_bonds - 4  # Fe–N may or may not be perceived
    # positions are an embedding, not the structure: moving the structure's atoms a little changes nothing
    rng = np.random.default_rng(0)
    moved = conformer_for_perceived("HEM", names, z, xyz + rng.normal(0, 0.03, xyz.shape), timeout_s=5)
    assert moved.positions.tobytes() == conf.positions.tobytes()
    centred = (xyz - xyz.mean(axis=0)).astype(np.float32)
    assert not np.allclose(conf.positions, centred, atol=0.5)


def test_perception_failure_is_recorded() -> None:
    conf = conformer_for_perceived("ODD", ["C1", "C2"], [6, 6], np.array([[0.0, 0, 0], [np.nan, 0, 0]]))
    assert conf.strategy == "failed" and not conf.mask.any()
    assert "no CCD definition" in conf.reason and conf.positions.shape == (2, 3)
