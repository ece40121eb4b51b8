"""CCD reader: per-code directory, components.cif(.gz), lazy loading; checked against a text scan."""

from __future__ import annotations

import gzip
import importlib.util
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from featurecache.errors import CCDError, ParseError
from featurecache.parse.ccd import CCD, _parse_component, parse_component_file, read_components

# tests/parse is not a package: load the shared independent CCD text scanner by path.
_spec = importlib.util.spec_from_file_location(
    "_ccdtext", Path(__file__).resolve().parents[1] / "chem" / "ccdtext.py"
)
assert _spec is not None and _spec.loader is not None
ccdtext = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ccdtext)

CCD_DIR: Path = ccdtext.CCD_DIR
CODES = ("HEM", "GNP", "MG", "NAG", "ALA", "DA", "CLR", "PLM", "ZN")


@pytest.mark.parametrize("code", CODES)
def test_dir_matches_text_scan(code: str) -> None:
    comp = CCD(ccdtext.CCD_DIR)[code]
    rows = ccdtext.atoms(code)
    assert comp.code == code
    assert comp.atom_names == tuple(r["atom_id"] for r in rows)
    assert comp.elements == tuple(r["type_symbol"] for r in rows)
    assert comp.charges == tuple(int(r["charge"]) for r in rows)
    assert comp.leaving == tuple(r["pdbx_leaving_atom_flag"] == "Y" for r in rows)
    ideal = np.array([[float(r[f"pdbx_model_Cartn_{c}_ideal"]) for c in "xyz"] for r in rows])
    np.testing.assert_allclose(comp.ideal, ideal)
    brows = ccdtext.bonds(code)
    assert len(comp.bonds) == len(brows)
    for (i, j, order, arom, _), r in zip(comp.bonds, brows, strict=True):
        assert (comp.atom_names[i], comp.atom_names[j]) == (r["atom_id_1"], r["atom_id_2"])
        assert order == {"SING": 1, "DOUB": 2, "TRIP": 3}[r["value_order"]]
        assert arom == (r["pdbx_aromatic_flag"] == "Y")


def test_single_atom_written_as_pairs() -> None:
    mg = CCD(ccdtext.CCD_DIR)["MG"]
    assert mg.atom_names == ("MG",) and mg.atomic_numbers == (12,) and mg.charges == (2,)
    assert mg.bonds == ()


def test_missing_coordinates_are_nan() -> None:
    unk = CCD(ccdtext.CCD_DIR)["UNK"]
    rows = {r["atom_id"]: r for r in ccdtext.atoms("UNK")}
    cg = unk.index("CG")
    assert rows["CG"]["model_Cartn_x"] == "?"
    assert np.isnan(unk.model[cg]).all() and np.isfinite(unk.ideal[cg]).all()


def test_components_file_plain_and_gz(tmp_path: Path) -> None:
    big = tmp_path / "components.cif"
    with big.open("w") as out:
        for code in CODES:
            text = (ccdtext.CCD_DIR / f"{code}.cif").read_text()
            out.write(text if text.endswith("\n") else text + "\n")
    gz = tmp_path / "components.cif.gz"
    with big.open("rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    by_dir = CCD(ccdtext.CCD_DIR)
    for path in (big, gz):
        ccd = CCD(path)
        got = ccd.load(["HEM", "MG", "NOPE"])
        assert set(got) == {"HEM", "MG"}
        assert "NOPE" not in ccd
        for code in ("HEM", "MG"):
            a, b = got[code], by_dir[code]
            assert a.atom_names == b.atom_names and a.bonds == b.bonds
            assert a.sha256 == b.sha256  # the same block text, whichever container
    assert set(read_components(big)) == set(CODES)


def test_absent_code_and_path() -> None:
    assert CCD(ccdtext.CCD_DIR).get("ZZZZZ") is None
    assert CCD(None).get("ALA") is None
    with pytest.raises(ParseError):
        CCD(ccdtext.CCD_DIR / "no-such-dir")


def test_bond_to_unknown_atom_is_a_parse_error() -> None:
    text = (ccdtext.CCD_DIR / "EDO.cif").read_text().replace("EDO  C1  O1   SING", "EDO  C1  O9   SING", 1)
    assert "O9" in text
    with pytest.raises(ParseError):
        _parse_component(text)


def test_parse_component_file_gz(tmp_path: Path) -> None:
    gz = tmp_path / "NAG.cif.gz"
    gz.write_bytes(gzip.compress((ccdtext.CCD_DIR / "NAG.cif").read_bytes()))
    assert parse_component_file(gz).atom_names == CCD(ccdtext.CCD_DIR)["NAG"].atom_names
    assert CCD(tmp_path)["NAG"].code == "NAG"


def broken_hem_ccds(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """:func:`broken_ccds` of HEM (its first atom row: CHA)."""
    return broken_ccds(tmp_path, "HEM")


def broken_ccds(tmp_path: Path, code: str) -> dict[str, tuple[Path, Path]]:
    """Copies of the real CCD whose definition of ``code`` is broken, by kind: ``(--ccd path, the
    file that holds it)``. A directory with ``code``.cif missing three values of its first atom
    row, cut in half, empty, or ``code``.cif.gz cut short; a components.cif with the same bad row."""
    text = (CCD_DIR / f"{code}.cif").read_text()
    lines = text.splitlines()
    header = max(i for i, line in enumerate(lines) if line.startswith("_chem_comp_atom."))
    row = lines[header + 1]
    assert row.startswith(f"{code} ")
    bad_row = text.replace(row, " ".join(row.split()[:-3]))
    out: dict[str, tuple[Path, Path]] = {}
    for kind, name, data in (
        ("dir: bad row", f"{code}.cif", bad_row.encode()),
        ("dir: cut", f"{code}.cif", text[: len(text) // 2].encode()),
        ("dir: empty", f"{code}.cif", b""),
        ("dir: gz cut short", f"{code}.cif.gz", gzip.compress(text.encode())[:-100]),
    ):
        d = tmp_path / kind.replace(": ", "_").replace(" ", "_")
        shutil.copytree(CCD_DIR, d)
        (d / f"{code}.cif").unlink()
        (d / name).write_bytes(data)
        out[kind] = (d, d / name)
    one = tmp_path / "components.cif"
    with one.open("w") as fh:
        for f in sorted(CCD_DIR.glob("*.cif")):
            body = bad_row if f.name == f"{code}.cif" else f.read_text()
            fh.write(body if body.endswith("\n") else body + "\n")
    out["file: bad row"] = (one, one)
    return out


BROKEN_KINDS = ("dir: bad row", "dir: cut", "dir: empty", "dir: gz cut short", "file: bad row")


@pytest.mark.parametrize("kind", BROKEN_KINDS)
def test_broken_definition_is_an_error_naming_file_and_code(tmp_path: Path, kind: str) -> None:
    """R1 M3: a broken HEM was skipped with a log line (components.cif: HEM then built from the
    file's atoms, perceived bonds, exit 0), or failed with gemmi's "string:29:0" naming no file
    (directory), or raised gzip's bare EOFError (HEM.cif.gz cut short). Each is now one
    CCDError naming the CCD file and HEM; the other codes still load."""
    ccd_path, file = broken_hem_ccds(tmp_path)[kind]
    assert kind in BROKEN_KINDS
    ccd = CCD(ccd_path)
    for _ in range(2):  # the second time from what the first one learned
        with pytest.raises(CCDError) as info:
            ccd.load(["SO4", "HEM"])
        exc = info.value
        assert (exc.path, exc.component, exc.stage) == (str(file), "HEM", "ccd")
        assert str(exc).startswith(f"CCD {file}: the definition of HEM")
        assert str(exc).endswith("; fix or replace it") and "string:" not in str(exc)
    assert set(ccd.load(["SO4", "ZN"])) == {"SO4", "ZN"}


def test_definition_without_atoms_is_no_definition(tmp_path: Path) -> None:
    """UNL / UNX (an unknown ligand or atom) define no atoms: the CCD does not define them (the
    residue keeps the file's atoms), which is not a broken definition."""
    unl = "data_UNL\n_chem_comp.id UNL\n_chem_comp.name 'Unknown ligand'\n_chem_comp.type NON-POLYMER\n"
    (tmp_path / "UNL.cif").write_text(unl)
    shutil.copy(CCD_DIR / "SO4.cif", tmp_path / "SO4.cif")
    one = tmp_path / "components.cif"
    one.write_text(unl + (CCD_DIR / "SO4.cif").read_text())
    for path in (tmp_path, one):
        assert set(CCD(path).load(["UNL", "SO4"])) == {"SO4"}


@pytest.mark.parametrize("suffix", [".cif", ".cif.gz"])
def test_components_file_is_read_at_most_twice(tmp_path: Path, suffix: str) -> None:
    """A build's worker asks a ``components.cif`` for the new codes of each structure, one or two
    at a time. Each pass over a real 75 MB ``components.cif.gz`` costs 3-4 s, so a pass per new
    code made a PDB-sized build take hours per worker. The second pass keeps every block (zlib,
    in memory): once it ran, the file is never read again (it is moved away here), and the
    definitions, a broken one's error and an absent code are what one pass over the file gives."""
    ccd_path, _ = broken_hem_ccds(tmp_path)["file: bad row"]
    if suffix == ".cif.gz":
        gz = tmp_path / "components.cif.gz"
        gz.write_bytes(gzip.compress(ccd_path.read_bytes()))
        ccd_path = gz
    codes = sorted(f.name.removesuffix(".cif") for f in CCD_DIR.glob("*.cif") if f.name != "HEM.cif")
    want = read_components(ccd_path)  # one pass, every block
    assert "HEM" not in want and set(want) == set(codes)
    ccd = CCD(ccd_path)
    assert set(ccd.load(["SO4"])) == {"SO4"}  # first pass: only what was asked for
    assert set(ccd.load(["MG"])) == {"MG"}  # second pass: keeps every block
    moved = ccd_path.rename(tmp_path / "moved")
    for code in codes:
        got = ccd.get(code)
        assert got is not None and got.sha256 == want[code].sha256, code
        assert got.atom_names == want[code].atom_names and got.bonds == want[code].bonds, code
    assert ccd.get("NOPE") is None
    with pytest.raises(CCDError) as info:
        ccd.load(["HEM"])
    assert (info.value.path, info.value.component) == (str(ccd_path), "HEM")
    assert moved.exists()


def test_a_broken_block_of_a_components_file_names_the_files_lines(tmp_path: Path) -> None:
    """Review R15 s40 #7: a broken HEM inside a concatenated components.cif was reported at its
    block's lines ("line 29", "line 48": where they are in HEM.cif alone), thousands of lines away
    from the damage in the file named. The same damage is named at the same lines of HEM.cif in a
    CCD directory, and shifted by where HEM's block starts in components.cif."""
    ccds = broken_hem_ccds(tmp_path)
    messages = {}
    for kind in ("dir: bad row", "file: bad row"):
        with pytest.raises(CCDError) as info:
            CCD(ccds[kind][0]).load(["HEM"])
        messages[kind] = str(info.value)
    lines = {k: [int(n) for n in re.findall(r"\bline (\d+)", m)] for k, m in messages.items()}
    assert len(lines["dir: bad row"]) == 2, messages  # gemmi's (the loop's header) and the bad row's
    components = ccds["file: bad row"][1].read_text().splitlines()
    hem_starts = components.index("data_HEM") + 1  # the file's line of HEM's block
    assert hem_starts > 1000
    assert lines["file: bad row"] == [n + hem_starts - 1 for n in lines["dir: bad row"]], messages
    # the bad row itself: the line named is the one missing values
    bad = lines["file: bad row"][1]
    assert len(components[bad - 1].split()) == 15, components[bad - 1]


def test_atom_listed_twice_fails_naming_file_and_atom(tmp_path: Path) -> None:
    """Review R25a s43 #2: HEM with its CHB row written twice was read as 44 atoms (two named CHB
    at the same coordinates, both present in every entry; the bond index kept the last). A name
    listed twice is a broken definition: stage ``ccd``, naming the file and the atom."""
    text = (CCD_DIR / "HEM.cif").read_text()
    row = next(line for line in text.splitlines() if line.startswith("HEM  CHB   CHB "))
    twice = text.replace(row, f"{row}\n{row}", 1)
    with pytest.raises(ParseError, match="atom CHB listed 2 times") as info:
        _parse_component(twice)
    assert info.value.stage == "ccd"
    shutil.copytree(CCD_DIR, tmp_path / "ccd")
    (tmp_path / "ccd" / "HEM.cif").write_text(twice)
    with pytest.raises(CCDError) as broken:
        CCD(tmp_path / "ccd").load(["SO4", "HEM"])
    assert (broken.value.path, broken.value.component) == (str(tmp_path / "ccd" / "HEM.cif"), "HEM")
    assert "atom CHB listed 2 times" in str(broken.value)
