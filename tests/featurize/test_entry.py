"""featurize_bytes on real files: entry metadata and where bad input is stopped."""

from __future__ import annotations

import math
import re

import pytest

from featurecache.errors import InputError
from featurecache.featurize.entry import StageTimer, featurize_bytes
from tests.conftest import STRUCTURES


def _stated(name: str, tag: str) -> float:
    m = re.search(rf"^{re.escape(tag)}\s+(\S+)", (STRUCTURES / name).read_text(), flags=re.M)
    assert m, (name, tag)
    return float(m.group(1))


@pytest.mark.parametrize("name", ["5y2e.cif", "7rye.cif", "209d-assembly1.cif"])
def test_resolution_is_the_one_the_file_states(name: str) -> None:
    # gemmi leaves these at 0: their _refine has no pdbx_refine_id
    structure = featurize_bytes((STRUCTURES / name).read_bytes(), name, name)
    assert structure.meta.resolution == pytest.approx(_stated(name, "_refine.ls_d_res_high"))


def test_no_stated_resolution_is_nan() -> None:
    name = "1psm.cif"  # solution NMR
    assert "d_res_high" not in (STRUCTURES / name).read_text()
    assert math.isnan(featurize_bytes((STRUCTURES / name).read_bytes(), name, "1psm").meta.resolution)


def test_non_finite_coordinate_stops_at_parse_naming_the_atom() -> None:
    lines = (STRUCTURES / "5y2e.cif").read_text().splitlines(keepends=True)
    header = [line.split()[0] for line in lines if line.startswith("_atom_site.")]
    k = next(i for i, line in enumerate(lines) if line.startswith("ATOM"))
    fields = lines[k].split()
    fields[header.index("_atom_site.Cartn_y")] = "nan"
    lines[k] = " ".join(fields) + "\n"
    atom = fields[header.index("_atom_site.label_atom_id")]
    timer = StageTimer()
    with pytest.raises(InputError, match=rf"non-finite coordinates .* atom {atom} ") as info:
        featurize_bytes("".join(lines).encode(), "5y2e.cif", "5y2e", timer=timer)
    assert info.value.stage == "parse" and timer.stage == "parse"


def test_structure_id_is_the_pdb_header_id_code_or_empty() -> None:
    # A PDB file states its id in HEADER columns 63-66; gemmi names every structure read from a
    # string "string", which is no id of the file's. Without a HEADER the file states none: "".
    text = (STRUCTURES / "1A8O.pdb").read_text()
    header = next(line for line in text.splitlines() if line.startswith("HEADER"))
    assert featurize_bytes(text.encode(), "1A8O.pdb", "1a8o").meta.structure_id == header[62:66].strip()
    no_header = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("HEADER"))
    assert featurize_bytes(no_header.encode(), "x.pdb", "x").meta.structure_id == ""
