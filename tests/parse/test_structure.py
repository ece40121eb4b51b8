"""Structure parsing: every format, and every EDGE file rejected with the right reason."""

from __future__ import annotations

import gzip
import math
import random
import re
from pathlib import Path

import gemmi
import pytest

from featurecache.errors import EmptyStructureError, InputError, ParseError, UnsupportedFormatError
from featurecache.parse.structure import _parse_structure, entry_stem, read_structure, structure_format
from tests.conftest import STRUCTURES


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("1MOM_min.cif", EmptyStructureError),  # only _struct_conf, no _atom_site
        ("4Q9R_min.cif", EmptyStructureError),  # only an audit category
        ("1bna-errors.cif", ParseError),  # deliberate syntax errors
        ("r5wkdsf.ent", UnsupportedFormatError),  # structure factors, not coordinates
        ("5moo_header.pdb", EmptyStructureError),  # header only
        ("header.pdb", EmptyStructureError),
    ],
)
def test_edge_files_fail_with_a_reason(name: str, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        read_structure(STRUCTURES / name)
    assert str(info.value), "the failure must carry a message"
    assert getattr(info.value, "stage", None) == "parse"


def test_gzip_is_transparent() -> None:
    plain = (STRUCTURES / "102m.cif").read_bytes()
    a = _parse_structure(plain, "102m.cif").structure
    b = _parse_structure(gzip.compress(plain), "102m.cif.gz").structure
    assert a[0].count_atom_sites() == b[0].count_atom_sites() > 0


def test_bcif_matches_its_notes() -> None:
    # SOURCES.tsv: "BinaryCIF, gzipped at source; 14 chains 2491 res"
    raw = read_structure(STRUCTURES / "6wg6.bcif.gz")
    assert raw.fmt == "bcif"
    model = raw.structure[0]
    assert len(model) == 14
    polymer_residues = sum(len(ch.get_polymer()) for ch in model)
    assert polymer_residues == 2491
    # coordinates decoded as numbers, not NaN
    assert all(abs(a.pos.x) < 1e4 for a in model[0][0])


def test_pdb_and_mmcif_twins_agree() -> None:
    cif = read_structure(STRUCTURES / "1A8O.cif").structure
    pdb = read_structure(STRUCTURES / "1A8O.pdb").structure
    assert cif[0].count_atom_sites() == pdb[0].count_atom_sites()


def test_malformed_charge_columns_recover_with_warning() -> None:
    # gemmi alone fails on this old file ("Wrong format for charge"); Biopython parses it.
    with pytest.raises(RuntimeError):
        gemmi.read_structure(str(STRUCTURES / "pdb1gdr.ent"))
    raw = read_structure(STRUCTURES / "pdb1gdr.ent")
    assert raw.structure[0].count_atom_sites() > 0
    assert "charge" in raw.structure.info["_featurecache.warning"]


def test_names() -> None:
    assert structure_format("x.cif.gz") == "mmcif"
    assert structure_format("pdb1gdr.ent") == "pdb"
    assert structure_format("6wg6.bcif.gz") == "bcif"
    assert structure_format("README.md") is None
    assert entry_stem("7a4d-assembly1.cif") == "7a4d-assembly1"
    assert entry_stem("AF-P01112-F1-model_v4.cif.gz") == "AF-P01112-F1-model_v4"


def test_empty_bytes() -> None:
    with pytest.raises(EmptyStructureError):
        _parse_structure(b"", "x.cif")
    assert Path(STRUCTURES).is_dir()


# --- resolution: the value the file states, read here with a plain text scan -------------------------

#: Files whose resolution gemmi leaves at 0 (``_refine`` without ``pdbx_refine_id``), with the
#: value of ``_refine.ls_d_res_high`` they state.
UNREAD_BY_GEMMI = {
    "5y2e.cif": 2.70,
    "6s61.cif": 1.84,
    "6ydw.cif": 4.20,
    "7rye.cif": 3.90,
    "209d-assembly1.cif": 3.00,
    "721p-assembly1.cif": 2.0,
    "7a4d-assembly1.cif": 2.694,
    "1ffk.cif.gz": 2.4,
}


def _text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("latin-1")


def _stated_resolution(path: Path) -> float | None:
    """The first numeric resolution the file states, by a grep of the tags (PDB's order)."""
    text = _text(path)
    if structure_format(path.name) == "pdb":
        patterns = [
            r"^REMARK   2 RESOLUTION\.\s+(\S+)",
            r"^REMARK   3   RESOLUTION RANGE HIGH \(ANGSTROMS\) :\s*(\S+)",
        ]
    else:
        tags = ("_refine.ls_d_res_high", "_em_3d_reconstruction.resolution", "_reflns.d_resolution_high")
        patterns = [rf"^{re.escape(tag)}\s+(\S+)" for tag in tags]
    for pattern in patterns:
        m = re.search(pattern, text, flags=re.M)
        if m:
            try:
                return float(m.group(1))
            except ValueError:
                continue
    return None


@pytest.mark.parametrize(("name", "value"), sorted(UNREAD_BY_GEMMI.items()))
def test_resolution_gemmi_misses_is_read_from_the_file(name: str, value: float) -> None:
    path = STRUCTURES / name
    assert _stated_resolution(path) == value  # the table above is what the file says
    assert gemmi.read_structure(str(path)).resolution == 0  # why the fallback exists
    assert read_structure(path).resolution == pytest.approx(value)


def test_resolution_of_every_corpus_file_is_the_stated_one() -> None:
    checked = 0
    for path in sorted(STRUCTURES.iterdir()):
        if structure_format(path.name) in (None, "bcif"):
            continue
        try:
            raw = read_structure(path)
        except InputError:
            continue
        stated = _stated_resolution(path)
        if stated is None:
            assert math.isnan(raw.resolution), path.name  # NMR, predictions, "NOT APPLICABLE"
        else:
            assert raw.resolution == pytest.approx(stated), path.name
            checked += 1
    assert checked >= 30


def test_resolution_fallback_order_and_unusable_values() -> None:
    head = (STRUCTURES / "5y2e.cif").read_text()
    assert "_refine.ls_d_res_high 2.70" in head
    em = head.replace(
        "_refine.ls_d_res_high 2.70", "_em_3d_reconstruction.resolution 3.1\n_reflns.d_resolution_high 2.9"
    )
    assert _parse_structure(em.encode(), "5y2e.cif").resolution == pytest.approx(3.1)
    unknown = head.replace("_refine.ls_d_res_high 2.70", "_refine.ls_d_res_high ?")
    assert math.isnan(_parse_structure(unknown.encode(), "5y2e.cif").resolution)


# --- messages for bad bytes ---------------------------------------------------------------------------


def _random_bytes(seed: int, n: int = 4096) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.mark.parametrize("seed", range(8))  # seed 4 holds a MessagePack ext type (msgpack asserted)
def test_random_bytes_as_bcif_are_not_binarycif(seed: int) -> None:
    with pytest.raises(ParseError, match=r"x\.bcif: not a valid BinaryCIF file \(MessagePack"):
        _parse_structure(_random_bytes(seed), "x.bcif")


def test_truncated_bcif_is_not_binarycif() -> None:
    data = gzip.decompress((STRUCTURES / "6wg6.bcif.gz").read_bytes())
    with pytest.raises(ParseError, match="not a valid BinaryCIF file"):
        _parse_structure(data[: len(data) // 2], "6wg6.bcif")


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("name", "kind"), [("x.pdb", "PDB"), ("x.ent", "PDB"), ("x.cif", "mmCIF")])
def test_random_bytes_as_text_formats_are_binary(seed: int, name: str, kind: str) -> None:
    with pytest.raises(
        ParseError, match=rf"{re.escape(name)}: binary content .* not a text {kind} file"
    ) as info:
        _parse_structure(_random_bytes(seed), name)
    assert info.value.stage == "parse"


def test_binarycif_under_a_text_name_still_reads() -> None:
    data = gzip.decompress((STRUCTURES / "6wg6.bcif.gz").read_bytes())
    assert _parse_structure(data, "6wg6.cif").fmt == "bcif"


def test_latin1_text_is_not_binary() -> None:
    text = (STRUCTURES / "1A8O.pdb").read_bytes().replace(b"HIV", "HIV \u00e9\u00e8".encode("latin-1"), 1)
    assert _parse_structure(text, "1A8O.pdb").structure[0].count_atom_sites() > 0


@pytest.mark.parametrize("tag", ["_atom_site.Cartn_x", "_atom_site.label_atom_id", "_atom_site.auth_asym_id"])
def test_mangled_mmcif_tag_is_a_parse_error_naming_the_file(tag: str) -> None:
    text = (STRUCTURES / "102m.cif").read_text()
    bad, n = re.subn(rf"^{re.escape(tag)}(?=\s)", tag.replace(".", "_", 1), text, flags=re.M)
    assert n == 1
    with pytest.raises(ParseError) as info:
        _parse_structure(bad.encode(), "102m.cif")
    message = str(info.value)
    assert "102m.cif" in message
    assert f"Tag {tag.replace('.', '_', 1)} in loop with _atom_site." in message  # gemmi's reason
    assert info.value.stage == "parse"


def _with_coordinate(path: Path, value: str) -> tuple[bytes, str, str, str]:
    """The file with one atom's x coordinate replaced; returns (bytes, chain, residue, atom)."""
    if structure_format(path.name) == "pdb":
        lines = path.read_text().splitlines(keepends=True)
        k = next(i for i, line in enumerate(lines) if line.startswith("ATOM  ") and line[12:16] == " CA ")
        line = lines[k]
        lines[k] = line[:30] + value.rjust(8) + line[38:]
        return "".join(lines).encode(), line[21], line[17:20], "CA"
    lines = path.read_text().splitlines(keepends=True)
    header = [line.strip() for line in lines if line.startswith("_atom_site.")]
    col = {t: i for i, t in enumerate(header)}
    k = next(i for i, line in enumerate(lines) if line.startswith("ATOM") and " CA " in line)
    fields = lines[k].split()
    fields[col["_atom_site.Cartn_x"]] = value
    lines[k] = " ".join(fields) + "\n"
    chain = fields[col["_atom_site.auth_asym_id"]]
    return "".join(lines).encode(), chain, fields[col["_atom_site.label_comp_id"]], "CA"


@pytest.mark.parametrize("name", ["102m.cif", "1A8O.pdb"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_coordinates_name_the_atom(name: str, value: str) -> None:
    data, chain, res, atom = _with_coordinate(STRUCTURES / name, value)
    with pytest.raises(InputError) as info:
        _parse_structure(data, name)
    message = str(info.value)
    assert info.value.stage == "parse"
    assert name in message and "non-finite coordinates" in message
    assert f"atom {atom} " in message and f"residue {res} " in message and f"chain {chain} " in message
