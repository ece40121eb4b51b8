"""The chem build stage on real stores (real Dask LocalCluster, real zarr parts, the real corpus)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import gemmi
import numpy as np
import pytest

import featurecache
from featurecache.build.chem_stage import parse_strategy_counts
from featurecache.chem.conformer import STRATEGIES
from featurecache.const import MolType, decode_atom_name, decode_res_name
from featurecache.store.reader import LocalStore
from tests.chem import ccdtext
from tests.conftest import CCD, STRUCTURES, build_store

LIGAND_ENTRIES = {
    "721p-assembly1": {"GNP", "MG"},
    "102m": {"HEM"},
    "8f9h": {"HEM"},
    "7CFN": {"CLR", "PLM"},
    "7DDO": {"NAG", "ZN"},
}


def _file_residue_names(path: Path) -> set[str]:
    """Residue names with atoms in model 1 (gemmi; waters dropped)."""
    st = gemmi.read_structure(str(path))
    return {r.name for ch in st[0] for r in ch if r.name not in ("HOH", "DOD")}


def _warned_atoms(store: LocalStore, entry_id: str) -> int:
    w = store.table("chem_warnings")
    if w.num_rows == 0:
        return 0
    return sum(r["n_atoms"] for r in w.to_pylist() if r["entry_id"] == entry_id)


# --- the real corpus ---------------------------------------------------------------------------------


def test_corpus_ligand_atoms_have_reference_or_reason(corpus_store: Path) -> None:
    store = featurecache.open_store(corpus_store)
    for entry_id, expected_codes in LIGAND_ENTRIES.items():
        e = store.entry(entry_id)
        ref = store.reference_features(e)
        tok = e.atoms["token_index"]
        lig = e.tokens["mol_type"][tok] == MolType.LIGAND
        codes = [decode_res_name(r) for r in e.tokens["res_name"][tok]]
        assert expected_codes <= {c for c, is_lig in zip(codes, lig, strict=True) if is_lig}, entry_id
        masked = int((~ref["ref_mask"]).sum())
        assert masked == _warned_atoms(store, entry_id), entry_id  # every masked atom has a reason row
        # each ligand atom's element is the CCD's for that (code, atom name) — read from the CCD text
        for k in np.flatnonzero(lig & ref["ref_mask"]):
            name = decode_atom_name(e.atoms["name"][k])
            ccd_el = {r["atom_id"]: r["type_symbol"] for r in ccdtext.atoms(codes[k])}
            assert gemmi.Element(int(ref["ref_element"][k])).name.upper() == ccd_el[name], (
                entry_id,
                codes[k],
                name,
            )
        # bonded ligand atoms (CCD bonds) sit at chemically sane distances in ref_pos
        for code in expected_codes:
            idx = {decode_atom_name(e.atoms["name"][k]): k for k in np.flatnonzero(lig) if codes[k] == code}
            for b in ccdtext.bonds(code):
                i, j = idx.get(b["atom_id_1"]), idx.get(b["atom_id_2"])
                if i is None or j is None:
                    continue
                d = float(np.linalg.norm(ref["ref_pos"][i] - ref["ref_pos"][j]))
                assert 0.9 < d < 2.6, (entry_id, code, b["atom_id_1"], b["atom_id_2"], d)


def test_corpus_every_masked_atom_is_explained(corpus_store: Path) -> None:
    store = featurecache.open_store(corpus_store)
    for entry_id in store.ids:
        ref = store.reference_features(store.entry(entry_id, ["atoms", "tokens"]))
        assert int((~ref["ref_mask"]).sum()) == _warned_atoms(store, entry_id), entry_id


def test_corpus_components(corpus_store: Path) -> None:
    store = featurecache.open_store(corpus_store)
    rows = store.components.to_pylist()
    keys = {r["key"] for r in rows}
    built = set(store.entries.column("source_path").to_pylist())
    # every CCD code the curators list as occurring in a built file's atoms has a component
    expected = set()
    for line in (CCD / "DEV_CODES.tsv").read_text().splitlines()[1:]:
        code, role, _n, files, _ = (line.split("\t") + [""] * 5)[:5]
        if role == "atom_site" and code != "HOH" and set(files.split(",")) & built:
            expected.add(code)
    if "MSE" in expected:
        # AF3 SI 2.1: selenomethionine is featurized as methionine (tokenize renames MSE to MET),
        # so files with MSE need the MET component and no MSE component is computed
        expected = (expected - {"MSE"}) | {"MET"}
        assert "MSE" not in keys
    assert expected <= keys
    for r in rows:
        assert r["strategy"] in STRATEGIES
        if "#" not in r["key"] and r["source"] == "ccd":
            # the recorded definition hash is the sha256 of the CCD file the build read
            assert r["source_sha256"] == hashlib.sha256((CCD / f"{r['key']}.cif").read_bytes()).hexdigest()
        if r["strategy"] != "etkdg":
            assert r["reason"], r["key"]
    assert len(keys) == len(rows)  # computed once per store, not per entry


# --- our own small builds ------------------------------------------------------------------------------


def _link(dst: Path, names: list[str]) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for n in names:
        (dst / n).symlink_to(STRUCTURES / n)
    return dst


def _perturbed_copy(src: Path, dst: Path, sigma: float, seed: int) -> None:
    """The same mmCIF with every coordinate moved by N(0, sigma) Å (all other categories kept)."""
    doc = gemmi.cif.read(str(src))
    table = doc.sole_block().find("_atom_site.", ["Cartn_x", "Cartn_y", "Cartn_z"])
    rng = np.random.default_rng(seed)
    for row in table:
        for i in range(3):
            row[i] = f"{float(row[i]) + rng.normal(0.0, sigma):.3f}"
    doc.write_file(str(dst))


def _component_bytes(store_path: Path) -> dict[str, bytes]:
    table = featurecache.open_store(store_path).component_table()
    return {k: table.component(k)["ref_pos"].tobytes() for k in table.keys}


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("chem")
    inputs_a = _link(root / "in_a", ["721p-assembly1.cif", "102m.cif"])
    a = root / "a"
    first = build_store(a, inputs_a, ccd=CCD, part_size=1, workers=2)
    keys_first = set(_component_bytes(a))
    _link(inputs_a, ["8f9h.cif"])
    second = build_store(a, inputs_a, ccd=CCD, part_size=1, workers=2)
    inputs_b = _link(root / "in_b", ["721p-assembly1.cif", "102m.cif", "8f9h.cif"])
    _perturbed_copy(STRUCTURES / "102m.cif", inputs_b / "102x.cif", sigma=0.5, seed=7)
    b = root / "b"
    third = build_store(b, inputs_b, ccd=CCD, part_size=16, workers=1)
    return {"a": a, "b": b, "first": first, "second": second, "third": third, "keys_first": keys_first}


def test_summary_counts_and_keys(builds: dict[str, object]) -> None:
    first = builds["first"].stages["chem"]  # type: ignore[attr-defined]
    names = _file_residue_names(STRUCTURES / "721p-assembly1.cif") | _file_residue_names(
        STRUCTURES / "102m.cif"
    )
    keys = builds["keys_first"]
    assert isinstance(keys, set)
    assert first["components (store / this run)"] == f"{len(names)} / {len(names)}"
    assert keys == names
    assert sum(parse_strategy_counts(first["strategies (this run)"]).values()) == len(names)
    assert parse_strategy_counts(first["strategies (store)"]) == parse_strategy_counts(
        first["strategies (this run)"]
    )
    assert first["atoms without ref_pos"] == "0 in 0 entries"


def test_second_build_computes_only_new_components(builds: dict[str, object]) -> None:
    second = builds["second"].stages["chem"]  # type: ignore[attr-defined]
    before = _file_residue_names(STRUCTURES / "721p-assembly1.cif") | _file_residue_names(
        STRUCTURES / "102m.cif"
    )
    new = _file_residue_names(STRUCTURES / "8f9h.cif") - before
    assert new  # 8f9h brings NSM
    n_store, n_run = (int(x) for x in second["components (store / this run)"].split(" / "))
    assert n_run == len(new) and n_store == len(new | before)
    assert second["structure parts scanned"] == 1


def test_builds_give_identical_ref_pos(builds: dict[str, object]) -> None:
    a, b = _component_bytes(builds["a"]), _component_bytes(builds["b"])  # type: ignore[arg-type]
    assert set(a) == set(b)
    assert all(a[k] == b[k] for k in a)


def test_ground_truth_coordinates_never_reach_ref_pos(builds: dict[str, object]) -> None:
    store = featurecache.open_store(builds["b"])  # type: ignore[arg-type]
    orig, moved = store.entry("102m"), store.entry("102x")
    assert not np.allclose(orig.atoms["coords"], moved.atoms["coords"])  # the structure did move
    r0, r1 = store.reference_features(orig), store.reference_features(moved)
    assert r0["ref_mask"].all()
    assert r0["ref_pos"].tobytes() == r1["ref_pos"].tobytes()


def test_perceived_components_without_ccd(tmp_path: Path) -> None:
    """No --ccd: standard residues from the packaged set, HEM/SO4 perceived; the perceived HEM is
    the same from the original and from the perturbed structure (bonds only come from the file)."""
    c_in = _link(tmp_path / "in_c", ["102m.cif"])
    d_in = tmp_path / "in_d"
    d_in.mkdir()
    _perturbed_copy(STRUCTURES / "102m.cif", d_in / "102m.cif", sigma=0.03, seed=3)
    summary = build_store(tmp_path / "c", c_in, workers=1)
    build_store(tmp_path / "d", d_in, workers=1)
    stage = summary.stages["chem"]
    assert stage["atoms without ref_pos"] == "0 in 0 entries"
    c, d = featurecache.open_store(tmp_path / "c"), featurecache.open_store(tmp_path / "d")
    rows = {r["key"]: r for r in c.components.to_pylist()}
    hem = [k for k in rows if k.startswith("HEM#")]
    assert (
        len(hem) == 1
        and rows[hem[0]]["strategy"] == "perceived"
        and rows[hem[0]]["source"] == "perceived:102m"
    )
    assert rows["ALA"]["source"] == "packaged" and rows["ALA"]["strategy"] == "etkdg"
    n_perceived = parse_strategy_counts(stage["strategies (this run)"])["perceived"]
    assert n_perceived == sum(1 for k in rows if "#" in k)
    assert _component_bytes(tmp_path / "c")[hem[0]] == _component_bytes(tmp_path / "d")[hem[0]]
    ref_c, ref_d = c.reference_features(c.entry("102m")), d.reference_features(d.entry("102m"))
    assert ref_c["ref_mask"].all()
    assert ref_c["ref_pos"].tobytes() == ref_d["ref_pos"].tobytes()


def _component_part_files(store_path: Path) -> dict[str, bytes]:
    """Every stored byte of the component parts' arrays, by path under parts/ (index files, which
    record per-component seconds, left out)."""
    out = {}
    for part in sorted((store_path / "parts").glob("c-*")):
        for f in sorted(part.rglob("*")):
            rel = f.relative_to(store_path / "parts")
            if f.is_file() and "_index" not in rel.parts and not f.name.startswith("."):
                out[str(rel)] = f.read_bytes()
    return out


def _component_part_rows(store_path: Path) -> list[dict[str, object]]:
    table = featurecache.open_store(store_path).components  # its seconds are in component_timings
    return sorted(table.to_pylist(), key=lambda r: (str(r["part"]), str(r["key"])))


def test_component_parts_do_not_depend_on_the_worker_count(tmp_path: Path) -> None:
    inputs = _link(tmp_path / "in", ["721p-assembly1.cif", "102m.cif"])
    one, two = tmp_path / "w1", tmp_path / "w2"
    build_store(one, inputs, ccd=CCD, part_size=1, workers=1, own_cluster=True)
    build_store(two, inputs, ccd=CCD, part_size=1, workers=2, own_cluster=True)
    files_one, files_two = _component_part_files(one), _component_part_files(two)
    parts = {k.split("/", 1)[0] for k in files_one}
    assert len(parts) >= 3  # several conformer parts (plus the scan part): the split is exercised
    assert sorted(files_one) == sorted(files_two)  # the same parts, the same zarr chunk files
    assert all(files_one[k] == files_two[k] for k in files_one)
    rows_one = _component_part_rows(one)
    assert rows_one == _component_part_rows(two)  # the same components in the same parts, same rows
    # and the decoded reference conformers are equal byte for byte
    assert _component_bytes(one) == _component_bytes(two)
