"""A structure file cut at a line's end gets a parse warning, and is stored as read (review R25a s43 #4).

209d cut after its 200th atom row was stored with 2 of its 3 chains, 7DDO.pdb cut after its
3000th atom line with 1 of 7, and a .pdb.gz whose content was cut with half its atoms: no warning.
"""

from __future__ import annotations

import gzip

import gemmi
import pytest

from featurecache.featurize.entry import featurize_bytes
from featurecache.parse.structure import _parse_structure
from tests.conftest import SAMPLES, STRUCTURES


def _cut_after_atom_line(data: bytes, n: int) -> bytes:
    """``data`` up to the end of its ``n``-th ATOM line."""
    lines = data.split(b"\n")
    k = [i for i, line in enumerate(lines) if line.startswith(b"ATOM")][n - 1]
    return b"\n".join(lines[: k + 1]) + b"\n"


def _cut_warnings(data: bytes, name: str) -> list[str]:
    return [w for w in _parse_structure(data, name).warnings if "cut short?" in w]


def test_an_mmcif_that_ends_inside_its_atom_site_loop_is_warned_and_stored_as_read() -> None:
    cut = _cut_after_atom_line((STRUCTURES / "209d-assembly1.cif").read_bytes(), 200)
    assert _cut_warnings(cut, "209d.cif") == [
        "209d.cif: the file ends inside its _atom_site loop (its last line is an atom row, with no '#' or "
        "category after it): cut short? 200 atoms read"
    ]
    entry = featurize_bytes(cut, "209d.cif", "209d")
    assert int(entry.atoms["is_present"].sum()) == 200
    assert any("cut short?" in w for w in entry.parse_warnings)
    # closed by '#', or followed by a category, as every writer does: no warning
    assert _cut_warnings(cut + b"#\n", "209d.cif") == []
    assert _cut_warnings(cut + b"loop_\n_pdbx_featurecache_test.id\n1\n", "209d.cif") == []


@pytest.mark.parametrize("gz", [False, True])
def test_a_pdb_file_whose_last_line_is_an_atom_record_is_warned(gz: bool) -> None:
    cut = _cut_after_atom_line((STRUCTURES / "7DDO.pdb").read_bytes(), 3000)
    line = cut.count(b"\n")
    data = gzip.compress(cut) if gz else cut
    name = "7DDO.pdb.gz" if gz else "7DDO.pdb"
    assert _cut_warnings(data, name) == [
        f"{name}: no END record, and its last line (line {line}) is an ATOM record: cut short? 3000 atoms read"
    ]
    assert _cut_warnings(cut + b"TER\nEND\n", "7DDO.pdb") == []


@pytest.mark.parametrize("path", sorted((SAMPLES / "structures").iterdir()), ids=lambda p: p.name)
def test_whole_files_are_not_warned(path) -> None:  # type: ignore[no-untyped-def]
    assert _cut_warnings(path.read_bytes(), path.name) == []


def test_a_writer_that_closes_no_category_with_a_hash_is_not_blamed() -> None:
    """gemmi's plain style writes no '#' at all: its 102m ends on an atom row, whole."""
    text = gemmi.cif.read_string((STRUCTURES / "102m.cif").read_text()).as_string()
    assert text.rstrip().rsplit("\n", 1)[-1].startswith("HETATM") and "\n#" not in text
    assert _cut_warnings(text.encode(), "102m.cif") == []
