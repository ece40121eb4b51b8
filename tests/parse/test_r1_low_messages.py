"""The reasons a structure or Stockholm file is refused (review R1, low findings): what the file
holds when it plainly is no structure (before: gemmi's "expected block header (data_)"), and the
line, row and alignment where a Stockholm file stops making sense (before: no line). The build's
side of each is in tests/build/test_r1_low_inputs.py."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from featurecache.errors import EmptyStructureError, MSAError, UnsupportedFormatError
from featurecache.parse.sto import _parse_sto, parse_sto
from featurecache.parse.structure import _parse_structure
from tests.conftest import MSAS, STRUCTURES

PDBML = (
    b'<?xml version="1.0" encoding="UTF-8" ?>\n<PDBx:datablock datablockName="102M" '
    b'xmlns:PDBx="http://pdbml.pdb.org/schema/pdbx-v50.xsd">\n<PDBx:atom_siteCategory>\n'
)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("102m.cif.gz", gzip.compress(b"<!-- saved -->\n<HTML><HEAD><TITLE>\n  Sign in\n</TITLE></HEAD></HTML>"),
         "102m.cif.gz: an HTML page, not an mmCIF file (it starts '<!-- saved -->', title 'Sign in'): a web page "
         "saved in place of the file (a download that got an error or sign-in page?)"),
        ("102m.xml.cif", PDBML,
         "102m.xml.cif: PDBML (PDBx/mmCIF written as XML), not an mmCIF file (it starts '<?xml version=\"1.0\" "
         "encoding=\"UTF-8\" ?>'): the build reads mmCIF, PDB and BinaryCIF: convert it to mmCIF"),
        ("x.bcif", b'{"status": 404, "message": "Not Found"}',
         "x.bcif: JSON text, not a BinaryCIF file (it starts '{\"status\": 404, \"message\": \"Not Found\"}')"),
        ("odd", b"<?xml version='1.0'?><svg/>", "odd: an XML document, not a structure file (it starts "
         "\"<?xml version='1.0'?><svg/>\")"),
    ],
    ids=["html-gzipped", "pdbml", "json", "xml"],
)  # fmt: skip
def test_content_that_is_no_structure_is_named(name: str, data: bytes, message: str) -> None:
    with pytest.raises(UnsupportedFormatError) as info:
        _parse_structure(data, name)
    assert str(info.value) == message
    assert info.value.stage == "parse"


def test_no_corpus_structure_file_is_taken_for_other_content() -> None:
    from featurecache.parse.structure import _not_structure

    for path in sorted(STRUCTURES.iterdir()):
        data = path.read_bytes()
        raw = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        assert _not_structure(raw, path.name, None) is None, path.name


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("a.cif", b"", "a.cif: empty file (0 bytes)"),
        ("b.pdb", b" \n\r\n\t\n", "b.pdb: empty file (6 bytes of white space, no text)"),
        ("c.cif.gz", gzip.compress(b""), "c.cif.gz: empty file (a gzip stream of 20 bytes that decompresses to nothing)"),
    ],
    ids=["0-bytes", "white-space", "gzip-of-nothing"],
)  # fmt: skip
def test_an_empty_file_is_named_with_its_size(name: str, data: bytes, message: str) -> None:
    with pytest.raises(
        EmptyStructureError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"
    ):
        _parse_structure(data, name)


def test_a_stockholm_line_that_is_no_row_is_named_with_its_alignment() -> None:
    first = (MSAS / "openfold/2q2k_A/mgnify_hits.sto").read_text()
    text = first + "# STOCKHOLM 1.0\nquery ACDE\nhit_1/1-4\n//\n"
    line = len(first.splitlines()) + 3
    with pytest.raises(MSAError) as info:
        _parse_sto(text)
    assert str(info.value) == (
        f"line {line} (alignment 2 of the file): expected '<name> <aligned sequence>', got a name or a sequence "
        "alone: 'hit_1/1-4'"
    )


def test_a_stockholm_file_cut_short_says_so_and_its_rows_still_read(tmp_path: Path) -> None:
    text = (MSAS / "openfold/3u8v_A/mgnify_hits.sto").read_text()
    lines = text.split("\n")
    query = next(k for k, line in enumerate(lines) if line.startswith("query "))
    cut = "\n".join(lines[: query + 4]) + "\n" + lines[query + 4][:50]
    path = tmp_path / "mgnify_hits.sto"
    path.write_text(cut)
    with pytest.raises(MSAError) as info:
        parse_sto(path)
    width = len(lines[query].split()[1])
    name = lines[query + 4].split()[0]
    assert str(info.value).startswith(f"line {query + 5}: sequence {name!r} has ")
    assert str(info.value).endswith(
        f"the first ('query', line {query + 1}) has {width}; no '//' closes the alignment (the file ends at "
        f"line {query + 5}): a file cut short?"
    )
    assert info.value.path == str(path)
    # what reads of it: the rows before the cut, whole, and the cut one as cut
    from featurecache.parse.sto import readable_alignments

    (aln,) = readable_alignments(cut.encode(), path)
    assert aln.names[0] == "query" and aln.aligned[0] == lines[query].split()[1]
    assert len(aln.names) == 5 and len(aln.aligned[4]) < width
    assert readable_alignments(b"\x1f\x8b damaged", path) == []
