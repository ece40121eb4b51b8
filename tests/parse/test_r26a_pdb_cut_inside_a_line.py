"""A PDB file cut inside a line gets the same "cut short?" warning as one cut at a line's end
(review R26a s44 #1).

1orc.pdb cut after its 100th ATOM line and then inside the next record name (``ATO`` or ``A``, no
newline) was stored with 100 of its 496 atoms and no warning: the check stripped the trailing blanks
of ``ATOM  `` and asked only for a whole atom record name. (gemmi refuses ``ATOM  `` and ``HETA`` as
lines too short, so those files fail at parse; the check missed them too.) The rule now: a PDB text
with no newline after a last line that is no END / ENDMDL / MASTER / CONECT record was cut.
"""

from __future__ import annotations

import gzip

import pytest

from featurecache.errors import ParseError
from featurecache.featurize.entry import featurize_bytes
from featurecache.parse.atom_site import cut_short
from featurecache.parse.structure import _parse_structure
from tests.conftest import SAMPLES, STRUCTURES
from tests.parse.test_cut_short import _cut_after_atom_line, _cut_warnings


def _1orc_up_to_atom_100() -> bytes:
    return _cut_after_atom_line((STRUCTURES / "1orc.pdb").read_bytes(), 100)


@pytest.mark.parametrize("tail", ["ATO", "ATOM  ", "HETA", "A"])
def test_cut_short_sees_each_of_the_four_repro_cuts(tail: str) -> None:
    whole = _1orc_up_to_atom_100().decode()
    warning = cut_short(whole + tail, "pdb", "1orc.pdb", 100)
    assert warning is not None and warning.endswith("cut short? 100 atoms read")
    assert f"(line {whole.count(chr(10)) + 1}" in warning
    assert cut_short(whole, "pdb", "1orc.pdb", 100) is not None  # cut at the line's end: as before
    assert cut_short(whole + "END\n", "pdb", "1orc.pdb", 100) is None


@pytest.mark.parametrize("tail", [b"ATO", b"A"])
def test_a_pdb_file_cut_inside_a_record_name_is_warned_and_stored_as_read(tail: bytes) -> None:
    cut = _1orc_up_to_atom_100() + tail
    assert len(_cut_warnings(cut, "1orc.pdb")) == 1
    entry = featurize_bytes(cut, "1orc.pdb", "1orc")
    assert int(entry.atoms["is_present"].sum()) == 100
    assert any("cut short?" in w for w in entry.parse_warnings)
    assert len(_cut_warnings(gzip.compress(cut), "1orc.pdb.gz")) == 1


@pytest.mark.parametrize("tail", [b"ATOM  ", b"HETA"])
def test_a_cut_gemmi_reads_as_a_short_atom_line_fails_at_parse_naming_the_line(tail: bytes) -> None:
    """gemmi refuses an ATOM / HETATM line too short for its fields: the file is a failure."""
    cut = _1orc_up_to_atom_100() + tail
    line = cut.count(b"\n") + 1
    with pytest.raises(ParseError, match=f"line {line}: The line is too short"):
        _parse_structure(cut, "1orc.pdb")


def test_the_warning_names_the_line_and_what_it_holds() -> None:
    whole = _1orc_up_to_atom_100().decode()
    line = whole.count("\n") + 1
    assert cut_short(whole + "HETA", "pdb", "1orc.pdb", 100) == (
        f"1orc.pdb: no END record, and it ends inside its last line (line {line}, 'HETA', no newline): "
        "cut short? 100 atoms read"
    )
    assert cut_short(whole + "ATOM  ", "pdb", "1orc.pdb", 100) == (
        f"1orc.pdb: no END record, and its last line (line {line}) is an ATOM record: cut short? 100 atoms read"
    )


@pytest.mark.parametrize("tail", ["T", "TE", "TER     101      GLU A  13", "ENDM", "MODEL  "])
def test_a_cut_inside_a_line_after_the_atoms_is_warned(tail: str) -> None:
    """A cut inside a TER record loses the chains after it; a file with no newline after a line
    that is no END-like record was cut, whatever the line."""
    whole = _1orc_up_to_atom_100().decode()
    assert cut_short(whole + tail, "pdb", "1orc.pdb", 100) is not None
    if not tail.startswith("MODEL"):  # gemmi refuses a MODEL with no ENDMDL
        assert len(_cut_warnings((whole + tail).encode(), "1orc.pdb")) == 1


@pytest.mark.parametrize(
    "tail", [b"END", b"END   ", b"TER\nEND", b"ENDMDL", b"CONECT    1    2", b"MASTER", b"  "]
)
def test_a_file_that_ends_on_an_end_like_record_without_a_newline_is_not_warned(tail: bytes) -> None:
    whole = _1orc_up_to_atom_100()
    assert _cut_warnings(whole + b"TER\n" + tail, "1orc.pdb") == []
    assert _cut_warnings(whole + b"TER\n" + tail + b"\r\n", "1orc.pdb") == []


#: every whole PDB-format file of the real corpus and the samples; 4hhh_frag.pdb (a fragment that
#: ends on an atom record) and ERR550519's ColabFold model (no END) were warned before and still are
WHOLE_PDB = [
    *(STRUCTURES / name for name in ("1A8O.pdb", "1LCD.pdb", "1lzh.pdb.gz", "1orc.pdb", "2n0n_M1.pdb", "4oz7.pdb",
                                     "5cvz_final.pdb", "5e5z.pdb", "5wkd.pdb", "6KWC_1_model_1_ptm_relaxed.pdb",
                                     "7DDO.pdb", "7pzb.pdb", "disordered.pdb", "ions.pdb", "pdb1gdr.ent")),
    *sorted((SAMPLES / "structures").glob("*.pdb")),
]  # fmt: skip


@pytest.mark.parametrize("path", WHOLE_PDB, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_whole_pdb_files_are_not_warned(path) -> None:  # type: ignore[no-untyped-def]
    data = path.read_bytes()
    assert _cut_warnings(data, path.name) == []
    # nor with no newline after their last record
    text = gzip.decompress(data) if path.suffix == ".gz" else data
    assert _cut_warnings(text.rstrip(), path.name.removesuffix(".gz")) == []
